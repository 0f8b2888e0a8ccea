#!/usr/bin/env python3
"""Report C functions longer than --max-fn body lines and files longer than --max-file lines.

A function body is counted from the line after its opening brace at column 0 to the line before
its closing brace at column 0 (the project's style puts both there). Exit status 1 when anything
is over, so `make sizes` can gate on it.
"""
import argparse
import pathlib
import re
import sys

DIRS = ("channel", "kernel", "gateway", "guest-image/init")


def functions(path):
    lines = path.read_text(errors="replace").split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{" and i > 0:
            start = i
        elif line == "}" and start is not None:
            head = lines[start - 1]
            m = re.match(r"^\s*(\w+)\s*\(", head) or re.search(r"(\w+)\s*\([^)]*$", head)
            name = m.group(1) if m else head.strip()
            yield name, start + 1, i - start - 1
            start = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-fn", type=int, default=40)
    ap.add_argument("--max-file", type=int, default=800)
    ap.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parents[1])
    a = ap.parse_args()
    root = pathlib.Path(a.root)
    over = 0
    for d in DIRS:
        for p in sorted((root / d).rglob("*.[ch]")):
            n = len(p.read_text(errors="replace").split("\n"))
            if n > a.max_file:
                print(f"{p.relative_to(root)}: {n} lines (file cap {a.max_file})")
                over += 1
            if p.suffix != ".c":
                continue
            for name, line, body in functions(p):
                if body > a.max_fn:
                    print(f"{p.relative_to(root)}:{line}: {name}: {body} lines (cap {a.max_fn})")
                    over += 1
    print(f"sizes: {over} over the caps")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
