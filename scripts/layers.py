#!/usr/bin/env python3
"""Check that the gateway's folders keep the order gateway/LAYERS declares (top first).

A file may include, and an object may use a symbol of, only its own folder and the folders below
it. Includes are read from the sources (a gateway header must be named with its folder, as in
"vm/gw_vm.h"); uses from `nm` of the built objects (--objs), where each undefined symbol is
matched to the folder whose object defines it, and `nm -l` gives the line that uses it. Exit
status 1 on any violation, each printed as FILE:LINE: what: LOW may not use HIGH, a layer above it.
"""
import argparse
import pathlib
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
NM_LINE = re.compile(r"^(?P<obj>.+?\.o):\s*[0-9a-f]*\s(?P<type>[A-Za-z])\s(?P<sym>\S+)(?:\t(?P<loc>.*))?$")
DEFINED = set("BCDGRSTVW")


def read_layers(root):
    """The folders of root/LAYERS, top first."""
    names = []
    for line in (root / "LAYERS").read_text().splitlines():
        word = line.split("#", 1)[0].split()
        if word:
            names.append(word[0])
    return names


def where(path, root):
    """path as the reader knows it: gateway/vm/gw_vm.c."""
    path = pathlib.Path(path)
    try:
        return str(path.resolve().relative_to(root.resolve().parent))
    except ValueError:
        return str(path)


def check_tree(root, rank):
    """Files outside a declared folder; includes upward or without their folder."""
    errors, headers, count = [], {}, 0
    for p in sorted(root.rglob("*.[ch]")):
        rel = p.relative_to(root)
        if len(rel.parts) != 2 or rel.parts[0] not in rank:
            errors.append(f"{where(p, root)}: not in a folder of {root.name}/LAYERS")
        headers.setdefault(p.name, str(rel))
    for p in sorted(root.glob("*/*.[ch]")):
        own = p.parent.name
        if own not in rank:
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name, count = m.group(1), count + 1
            folder = name.split("/", 1)[0] if "/" in name else None
            if folder is None and name in headers:
                errors.append(f"{where(p, root)}:{n}: includes \"{name}\": write \"{headers[name]}\"")
            elif folder in rank and rank[folder] < rank[own]:
                errors.append(f"{where(p, root)}:{n}: includes \"{name}\": {own} may not use "
                              f"{folder}, a layer above it")
    return errors, count


def nm(objs, lines=False):
    """(object, type, symbol, location) of each symbol of objs."""
    args = ["nm", "-A"] + (["-l"] if lines else []) + [str(o) for o in objs]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = NM_LINE.match(line)
        if m:
            yield m["obj"], m["type"], m["sym"], m["loc"]


def libc():
    """What the C library defines: the jail's shim defines open() too, and is not its caller's."""
    path = subprocess.run(["cc", "-print-file-name=libc.so.6"], capture_output=True, text=True,
                          check=True).stdout.strip()
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def check_objects(root, objdir, rank):
    """Symbols an object uses that a folder above it defines (not the C library's)."""
    sources = [p for p in sorted(root.glob("*/*.c")) if p.parent.name in rank]
    objs = [objdir / p.parent.name / (p.stem + ".o") for p in sources]
    errors = [f"{where(p, root)}: no object in {objdir}" for p, o in zip(sources, objs)
              if not o.exists()]
    objs = [o for o in objs if o.exists()]          #  not a stale one whose source is gone
    folder = {str(o): o.parent.name for o in objs}
    defs, uses, system = {}, [], libc()
    for obj, kind, sym, _ in nm(objs):
        if kind == "U":
            uses.append((obj, sym))
        elif kind in DEFINED and sym not in system:
            defs[sym] = obj
    bad = {}
    for obj, sym in uses:
        low, high = folder[obj], folder.get(defs.get(sym))
        if high in rank and low in rank and rank[high] < rank[low]:
            bad.setdefault(obj, {})[sym] = defs[sym]
    for obj, kind, sym, loc in nm(sorted(bad), lines=True) if bad else ():
        if kind == "U" and sym in bad[obj]:
            at = loc.rsplit(":", 1) if loc else [obj, "?"]
            high = pathlib.Path(bad[obj][sym])
            errors.append(f"{where(at[0], root)}:{at[1]}: calls {sym} ({high.parent.name}/"
                          f"{high.name}): {folder[obj]} may not use {high.parent.name}, "
                          f"a layer above it")
    return errors, len(uses)


def main():
    here = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=here / "gateway")
    ap.add_argument("--objs", type=pathlib.Path, help="the built objects: build/obj/gateway")
    a = ap.parse_args()
    layers = read_layers(a.root)
    rank = {name: i for i, name in enumerate(layers)}
    errors, includes = check_tree(a.root, rank)
    uses = 0
    if a.objs:
        if not a.objs.is_dir() or not any(a.objs.glob("*/*.o")):
            errors.append(f"{a.objs}: no objects (build them first)")
        else:
            more, uses = check_objects(a.root, a.objs, rank)
            errors += more
    for e in errors:
        print(e)
    print(f"layers: {' > '.join(layers)}")
    print(f"layers: {includes} includes, {uses} symbol uses checked: {len(errors)} against the order")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
