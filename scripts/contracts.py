#!/usr/bin/env python3
"""Check that headers promise only what is used, one class each, and that comments cite no tracker.

Read from the sources of channel/, kernel/, gateway/, guest-image/init/ and mcp/, comments and
string literals left out of the C (a name in a macro's body is a use), with tests/unit/ and
tests/fuzz/ (helpers included) read as callers. No build is needed.

(a) A function a header declares is a contract with the rest of the tree, so it needs a caller
    outside the .c file that defines it. One with no use anywhere is dead: delete it. One used
    only in its own file is file-local: make it static and drop it from the header. One declared
    and defined nowhere is a stale promise. A function defined without `static` that no header
    declares (main, the fuzzers' entry point and the jail shim's libc interposers aside) is
    file-local too.
    The rule for tests: a test is a caller. A module's header is also what its unit test drives,
    and a function only a test calls (an accessor a test reads state through, a parser the test
    feeds directly) is a fair contract, so it stays public and passes. It is still suspicious,
    so each is printed as a note ("used only by tests") for a reader to judge.
(b) A comment (in Python, Markdown and the like, any line) may say why, never where a tracker
    keeps the reason: no "issue 12", "issue #12", "bug 3", "see #12" or "(#12)". The tracker is
    not in the repository, so the citation tells its reader nothing. Read in those folders and in
    tests/, docs/, scripts/, examples/, bench/, the Makefile and the README.
(c) One class per header: a header declares the functions of at most one opaque type
    (`typedef struct _x_t x_t;` with x_* functions), named after the file (ch_frame.h may hold
    ch_frame_dec_t, ch_io.h may not hold ch_outq_t).

Exit status 1 on any violation, each printed as FILE:LINE: what.
"""
import argparse
import pathlib
import re
import sys

SOURCES = ("channel", "kernel", "gateway", "guest-image/init", "mcp")
TESTS = ("tests/unit", "tests/fuzz")
#  Where a tracker citation is looked for: the sources, every test, the docs.
TEXTS = SOURCES + ("tests", "docs", "scripts", "Makefile", "README.md", "examples", "bench")
TEXT_SUFFIXES = {".c", ".h", ".py", ".mjs", ".js", ".sh", ".md", ".txt", ""}
SKIP_DIRS = {"node_modules", "build", "__pycache__", ".git"}
ENTRY_POINTS = {"main", "LLVMFuzzerTestOneInput", "LLVMFuzzerInitialize"}

#  "issue 12", "issues 3 and 4", "bug #7"; or a bare "#12" ("see #12", "(#12)"), which is
#  not an HTML entity ("&#39;").
TRACKER = re.compile(r"\b(?:issues?|bugs?|tickets?|pull requests?|PRs?)\s*#?\s*\d+"
                     r"|(?<![&\w])#\d+\b(?![;\w])", re.IGNORECASE)
IDENT = re.compile(r"[A-Za-z_]\w*")
OPAQUE = re.compile(r"\btypedef\s+struct\s+_(\w+)_t\s+\1_t\s*;")
NOT_A_NAME = {"__attribute__", "__attribute", "sizeof", "if", "while", "for", "switch", "return",
              "_Static_assert", "static_assert", "__typeof__", "typeof", "defined"}


def lex(text):
    """(code, comments): text with comments and string literals blanked (newlines kept, so an
    offset keeps its line), and each comment as (line, text)."""
    out, comments, i, n, line = [], [], 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            body = text[i + 2:j - 2]
            comments.append((line, body))
            line += body.count("\n")
            out.append("\n" * body.count("\n"))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            line += c == "\n"
            out.append(c)
            i += 1
    return "".join(out), comments


DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)


def no_directives(code):
    """code with its preprocessor lines blanked (a macro's body still counts as a use, but is
    no declaration)."""
    return DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), code)


def statements(code):
    """(text, offset, ends_with) of each top-level statement: ends_with is ';' or '{' (a body)."""
    code = no_directives(code)
    depth, start = 0, 0
    for m in re.finditer(r"[{};]", code):
        ch = m.group()
        if ch == "{":
            if depth == 0:
                yield code[start:m.start()], start, "{"
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = m.end()
        elif depth == 0:
            yield code[start:m.start()], start, ";"
            start = m.end()


def function_name(stmt):
    """The function stmt declares or defines, or None (a variable, a type, a macro call)."""
    flat = " ".join(stmt.split())
    if not flat or flat.startswith("typedef") or "=" in flat.split("(")[0]:
        return None
    for m in re.finditer(r"(\(\s*)?\b([A-Za-z_]\w*)\s*\(", flat):
        if m.group(2) in NOT_A_NAME:
            continue
        if m.group(1):                              #  (*fn) (...): a pointer, not a function
            return None
        head = flat[:m.start(2)]
        if not re.search(r"[\w*]\s*$", head):       #  a return type comes first
            return None
        if not flat.rstrip().endswith(")") and "__attribute__" not in flat[m.end():]:
            return None
        return m.group(2)
    return None


def line_of(code, offset, name):
    """The line of name's first occurrence after offset."""
    m = re.compile(r"\b%s\b" % re.escape(name)).search(code, offset)
    return code.count("\n", 0, m.start() if m else offset) + 1


class Tree:
    def __init__(self, root):
        self.root = root
        self.files = {}                             #  rel path -> (code, comments)
        for d in SOURCES + TESTS:
            for p in sorted((root / d).rglob("*.[ch]")) if (root / d).is_dir() else ():
                if not SKIP_DIRS & set(p.relative_to(root).parts):
                    self.files[str(p.relative_to(root))] = lex(p.read_text(errors="replace"))
        self.uses = {}                              #  name -> {file: count}
        for rel, (code, _) in self.files.items():
            for m in IDENT.finditer(code):
                self.uses.setdefault(m.group(), {}).setdefault(rel, 0)
                self.uses[m.group()][rel] += 1

    @staticmethod
    def ours(rel):
        """Not a test's."""
        return not rel.startswith(TESTS)


FN_TYPE = re.compile(r"\btypedef\s[^;{}()]*\(\s*(\w+)\s*\)\s*\(|\btypedef\s[^;{}()*]*\b(\w+)\s*\(")
BY_FN_TYPE = re.compile(r"^\s*(\w+)\s+(\w+)\s*$")


def declarations(tree):
    """{name: (header, line)} of the functions our headers declare, by prototype or by a
    function type (`gw_cli_fn_t gw_cli_ls;`); {header: [names]}."""
    fn_types = set()
    for rel, (code, _) in tree.files.items():
        for m in FN_TYPE.finditer(code):
            fn_types.add(m.group(1) or m.group(2))
    decl, by_header = {}, {}
    for rel, (code, _) in tree.files.items():
        if not rel.endswith(".h") or not tree.ours(rel):
            continue
        for stmt, off, end in statements(code):
            name = function_name(stmt) if end == ";" else None
            m = BY_FN_TYPE.match(stmt) if end == ";" else None
            if m and m.group(1) in fn_types:
                name = m.group(2)
            if name and not re.search(r"\b(static|extern)\b", stmt):
                decl.setdefault(name, (rel, line_of(code, off, name)))
                by_header.setdefault(rel, []).append(name)
    return decl, by_header


def definitions(tree):
    """{name: (file, line, static)} of the functions defined in our .c files and test files."""
    defs = {}
    for rel, (code, _) in tree.files.items():
        if not rel.endswith(".c"):
            continue
        for stmt, off, end in statements(code):
            name = function_name(stmt) if end == "{" else None
            if name and not stmt.rstrip().endswith(("=", "]")):
                static = bool(re.search(r"\bstatic\b", stmt))
                defs.setdefault(name, (rel, line_of(code, off, name), static))
    return defs


def check_callers(tree):
    """(errors, notes) of check (a)."""
    decl, _ = declarations(tree)
    defs = definitions(tree)
    errors, notes = [], []
    for name, (hdr, line) in sorted(decl.items(), key=lambda kv: kv[1]):
        where = f"{hdr}:{line}: {name}"
        if name not in defs:
            errors.append(f"{where}: declared, defined nowhere: drop it from the header")
            continue
        own = defs[name][0]
        uses = {f: c for f, c in tree.uses.get(name, {}).items() if f != hdr}
        own_uses = uses.pop(own, 0) - 1             #  less the definition itself
        ours = [f for f in uses if tree.ours(f)]
        tests = [f for f in uses if not tree.ours(f)]
        if ours:
            continue
        if tests:
            notes.append(f"{where}: used only by tests ({', '.join(sorted(tests))})")
        elif own_uses > 0:
            errors.append(f"{where}: used only in {own}: make it static, drop it from the header")
        else:
            errors.append(f"{where}: no caller anywhere: delete it")
    for name, (rel, line, static) in sorted(defs.items(), key=lambda kv: kv[1]):
        if static or name in decl or name in ENTRY_POINTS or not tree.ours(rel):
            continue
        if "programs/jailshim.c" in rel:            #  the shim's interposers are libc's names
            continue
        errors.append(f"{rel}:{line}: {name}: not static and in no header: make it static")
    return errors, notes


def text_files(root):
    for d in TEXTS:
        p = root / d
        if p.is_file():
            yield p
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                parts = set(f.relative_to(root).parts)
                if (f.is_file() and not SKIP_DIRS & parts and f.suffix in TEXT_SUFFIXES
                        and b"\0" not in f.read_bytes()):    # a fuzz seed is data, not prose
                    yield f


def comments_of(path, text):
    """(line, text) of what in path is prose: C comments; anything else whole (docstrings,
    comments and Markdown alike)."""
    if path.suffix in (".c", ".h"):
        return lex(text)[1]
    return list(enumerate(text.split("\n"), 1))


def check_trackers(root):
    """errors of check (b)."""
    errors = []
    for path in text_files(root):
        if path.resolve() == pathlib.Path(__file__).resolve():
            continue                                #  its own examples
        rel = path.relative_to(root)
        for line, body in comments_of(path, path.read_text(errors="replace")):
            for k, text in enumerate(body.split("\n")):
                m = TRACKER.search(text)
                if m:
                    errors.append(f"{rel}:{line + k}: cites a tracker (\"{m.group().strip()}\"): "
                                  f"say the reason instead")
    return errors


def check_classes(tree):
    """errors of check (c)."""
    _, by_header = declarations(tree)
    errors = []
    for rel, names in sorted(by_header.items()):
        text = (tree.root / rel).read_text(errors="replace")
        stem, own = pathlib.Path(rel).stem, 0
        for m in OPAQUE.finditer(text):
            cls, line = m.group(1), text.count("\n", 0, m.start()) + 1
            if not any(n.startswith(cls + "_") for n in names):
                continue                            #  a forward declaration of another's
            if not cls.startswith(stem):
                errors.append(f"{rel}:{line}: {cls}_t is not {stem}'s class: give it its own "
                              f"{cls}.h/.c")
            elif own:
                errors.append(f"{rel}:{line}: {cls}_t is a second class in {stem}: give it its "
                              f"own .h/.c")
            else:
                own = 1
    return errors


def main():
    here = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=here, help="the tree (default: this one)")
    a = ap.parse_args()
    tree = Tree(a.root)
    callers, notes = check_callers(tree)
    trackers = check_trackers(a.root)
    classes = check_classes(tree)
    for e in callers + classes + trackers:
        print(e)
    for n in notes:
        print(f"note: {n}")
    decl, _ = declarations(tree)
    errors = len(callers) + len(classes) + len(trackers)
    print(f"contracts: {len(decl)} declared functions, {len(notes)} used only by tests; "
          f"{len(callers)} without a caller outside their file, {len(classes)} second classes, "
          f"{len(trackers)} tracker citations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
