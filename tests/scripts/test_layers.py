"""scripts/layers.py, the gateway's layer check: it passes on the tree, and an include or a call
planted against gateway/LAYERS in a copy of the tree fails it, named by file, line and both layers.

LAYERS_OBJS is the built objects (`make layers` sets it; default build/obj/gateway).
"""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "layers.py"
OBJS = pathlib.Path(os.environ.get("LAYERS_OBJS", ROOT / "build" / "obj" / "gateway"))


def run(*args):
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def tree(tmp_path):
    """A copy of gateway/ and of its built objects."""
    assert any(OBJS.glob("*/*.o")), f"no objects in {OBJS}: build the gateway first"
    shutil.copytree(ROOT / "gateway", tmp_path / "gateway")
    shutil.copytree(OBJS, tmp_path / "objs", ignore=shutil.ignore_patterns("*.d"))
    return tmp_path


def plant_line(path, after, line):
    """line inserted after the first line starting with after; its line number."""
    lines = path.read_text().split("\n")
    n = next(i for i, text in enumerate(lines) if text.startswith(after)) + 1
    lines.insert(n, line)
    path.write_text("\n".join(lines))
    return n + 1


def test_the_tree_keeps_its_layers():
    rc, out = run("--objs", OBJS)
    assert rc == 0, out
    assert "layers: programs > cli > " in out and " > base\n" in out
    assert " 0 against the order" in out


def test_the_copy_passes_before_anything_is_planted(tree):
    rc, out = run("--root", tree / "gateway", "--objs", tree / "objs")
    assert rc == 0, out


def test_an_upward_include_fails_naming_file_line_and_layers(tree):
    n = plant_line(tree / "gateway/base/gw_log.c", "#include", '#include "session/gw_session.h"')
    rc, out = run("--root", tree / "gateway")
    assert rc == 1
    assert (f'gateway/base/gw_log.c:{n}: includes "session/gw_session.h": base may not use '
            f"session, a layer above it") in out
    assert " 1 against the order" in out


def test_an_upward_call_fails_naming_file_line_and_layers(tree):
    src = tree / "gateway/vm/gw_plant.c"
    src.write_text("void gw_session_destroy (void *);\n"
                   "void gw_plant (void);\n"
                   "\n"
                   "void\n"
                   "gw_plant (void)\n"
                   "{\n"
                   "    gw_session_destroy (0);\n"
                   "}\n")
    subprocess.run(["cc", "-g", "-c", str(src), "-o", str(tree / "objs/vm/gw_plant.o")],
                   check=True)
    rc, out = run("--root", tree / "gateway", "--objs", tree / "objs")
    assert rc == 1
    assert ("gateway/vm/gw_plant.c:7: calls gw_session_destroy (session/gw_session.o): vm may "
            "not use session, a layer above it") in out
    assert " 1 against the order" in out


def test_a_call_down_or_within_a_folder_passes(tree):
    src = tree / "gateway/session/gw_plant.c"
    src.write_text("void gw_log_init (void);\nvoid gw_session_destroy (void *);\n"
                   "void gw_plant (void);\n"
                   "void\ngw_plant (void)\n{\n    gw_log_init ();\n    gw_session_destroy (0);\n}\n")
    subprocess.run(["cc", "-g", "-c", str(src), "-o", str(tree / "objs/session/gw_plant.o")],
                   check=True)
    rc, out = run("--root", tree / "gateway", "--objs", tree / "objs")
    assert rc == 0, out


def test_the_order_is_the_one_in_LAYERS(tree):
    layers = tree / "gateway/LAYERS"
    text = layers.read_text()
    base = next(line for line in text.split("\n") if line.startswith("base "))
    layers.write_text(base + "\n" + text.replace(base + "\n", ""))      # base now on top
    rc, out = run("--root", tree / "gateway")
    assert rc == 1
    assert "layers: base > programs > " in out
    assert 'gateway/vm/gw_rundir.c:' in out and "vm may not use base, a layer above it" in out


def test_an_include_without_its_folder_fails(tree):
    fs = tree / "gateway/vm/gw_rundir.c"
    fs.write_text(fs.read_text().replace('#include "base/gw_log.h"', '#include "gw_log.h"'))
    rc, out = run("--root", tree / "gateway")
    assert rc == 1
    assert 'gateway/vm/gw_rundir.c:' in out and 'includes "gw_log.h": write "base/gw_log.h"' in out


def test_a_file_outside_the_declared_folders_fails(tree):
    (tree / "gateway/extra").mkdir()
    (tree / "gateway/extra/gw_extra.c").write_text("int gw_extra;\n")
    (tree / "gateway/gw_loose.h").write_text("\n")
    rc, out = run("--root", tree / "gateway")
    assert rc == 1
    assert "gateway/extra/gw_extra.c: not in a folder of gateway/LAYERS" in out
    assert "gateway/gw_loose.h: not in a folder of gateway/LAYERS" in out


def test_a_source_without_its_object_fails(tree):
    (tree / "objs/wire/gw_hmac.o").unlink()
    rc, out = run("--root", tree / "gateway", "--objs", tree / "objs")
    assert rc == 1
    assert "gateway/wire/gw_hmac.c: no object in" in out
    rc, out = run("--root", tree / "gateway", "--objs", tree / "nothing")
    assert rc == 1 and "no objects (build them first)" in out
