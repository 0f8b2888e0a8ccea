"""scripts/contracts.py, the check of what headers promise: it passes on the tree, and each kind of
violation planted in a copy of the tree fails it, named by file and line.

The planted tracker citations are spelled in pieces here, so this file does not cite one itself.
"""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "contracts.py"
COPIED = ("channel", "kernel", "gateway", "guest-image/init", "mcp", "tests/unit", "tests/fuzz")
ISSUE, PR = "iss" + "ue", "P" + "R"


def run(*args):
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def tree(tmp_path):
    """A copy of the sources and of the unit tests and fuzzers that call them."""
    for d in COPIED:
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def append(path, text):
    """text appended to path; the line number of its first line."""
    old = path.read_text()
    path.write_text(old + text)
    return old.count("\n") + 1


def declare(tree, decl):
    """decl added to channel/ch_util.h before its #endif; its line number."""
    h = tree / "channel/ch_util.h"
    text = h.read_text()
    at = text.rindex("#endif")
    h.write_text(text[:at] + decl + "\n\n" + text[at:])
    return text[:at].count("\n") + 1


def test_the_tree_keeps_its_contracts():
    rc, out = run()
    assert rc == 0, out
    assert " 0 without a caller outside their file, 0 second classes, 0 tracker citations" in out


def test_the_copy_passes_before_anything_is_planted(tree):
    rc, out = run("--root", tree)
    assert rc == 0, out


def test_a_function_nothing_calls_fails_as_dead(tree):
    n = declare(tree, "int ch_planted (int x);")
    append(tree / "channel/ch_util.c", "\nint\nch_planted (int x)\n{\n    return x;\n}\n")
    rc, out = run("--root", tree)
    assert rc == 1
    assert f"channel/ch_util.h:{n}: ch_planted: no caller anywhere: delete it" in out
    assert " 1 without a caller outside their file" in out


def test_a_function_used_only_in_its_file_fails_as_file_local(tree):
    n = declare(tree, "int ch_planted (int x);")
    append(tree / "channel/ch_util.c", "\nint\nch_planted (int x)\n{\n    return x;\n}\n\n"
           "int ch_planted_user (void);\nint\nch_planted_user (void)\n{\n"
           "    return ch_planted (1);\n}\n")
    rc, out = run("--root", tree)
    assert rc == 1
    assert (f"channel/ch_util.h:{n}: ch_planted: used only in channel/ch_util.c: make it static, "
            "drop it from the header") in out
    assert "ch_planted_user: not static and in no header: make it static" in out


def test_a_caller_in_another_file_passes(tree):
    declare(tree, "int ch_planted (int x);")
    append(tree / "channel/ch_util.c", "\nint\nch_planted (int x)\n{\n    return x;\n}\n")
    text = (tree / "channel/ch_msg.c").read_text()
    (tree / "channel/ch_msg.c").write_text(text.replace(
        "ch_channel_name (ch_channel_t channel)\n{\n",
        "ch_channel_name (ch_channel_t channel)\n{\n    (void) ch_planted (0);\n", 1))
    rc, out = run("--root", tree)
    assert rc == 0, out
    assert "ch_planted" not in out


def test_a_function_only_tests_call_passes_with_a_note(tree):
    n = declare(tree, "int ch_planted (int x);")
    append(tree / "channel/ch_util.c", "\nint\nch_planted (int x)\n{\n    return x;\n}\n")
    append(tree / "tests/unit/test_ch_text.c", "\nint s_planted_use (void);\n"
           "int\ns_planted_use (void)\n{\n    return ch_planted (2);\n}\n")
    rc, out = run("--root", tree)
    assert rc == 0, out
    assert (f"note: channel/ch_util.h:{n}: ch_planted: used only by tests "
            "(tests/unit/test_ch_text.c)") in out


def test_a_name_in_a_comment_or_a_string_is_no_caller(tree):
    n = declare(tree, "int ch_planted (int x);")
    append(tree / "channel/ch_util.c", "\nint\nch_planted (int x)\n{\n    return x;\n}\n")
    append(tree / "channel/ch_msg.c", "\n//  ch_planted (1) would do\n"
           "static const char s_planted [] = \"ch_planted (2)\";\n")
    rc, out = run("--root", tree)
    assert rc == 1
    assert f"channel/ch_util.h:{n}: ch_planted: no caller anywhere: delete it" in out


def test_a_declaration_defined_nowhere_fails(tree):
    n = declare(tree, "//  Promised, never written.\nint ch_planted (int x);")
    rc, out = run("--root", tree)
    assert rc == 1
    assert f"channel/ch_util.h:{n + 1}: ch_planted: declared, defined nowhere" in out


def test_a_second_class_fails(tree):
    n = declare(tree, "typedef struct _ch_extra_t ch_extra_t;\n"
                      "ch_extra_t *ch_extra_new (void);")
    h = tree / "channel/ch_asm.h"
    text = h.read_text()
    at = text.rindex("#endif")
    h.write_text(text[:at] + "typedef struct _ch_asm_more_t ch_asm_more_t;\n"
                 "void ch_asm_more_destroy (ch_asm_more_t **self_p);\n\n" + text[at:])
    m = text[:at].count("\n") + 1
    rc, out = run("--root", tree)
    assert rc == 1
    assert (f"channel/ch_util.h:{n}: ch_extra_t is not ch_util's class: give it its own "
            "ch_extra.h/.c") in out
    assert f"channel/ch_asm.h:{m}: ch_asm_more_t is a second class in ch_asm" in out
    assert " 2 second classes" in out


def test_tracker_citations_fail_in_comments_not_in_code(tree):
    c = tree / "channel/ch_util.c"
    n = append(c, f"\n//  Kept for {ISSUE} 12.\n/*  Also {ISSUE} #" "7,\n    and see #" "12.  */\n"
               f"static const char s_text [] = \"{ISSUE} 12 in a string\";\n"
               "static const char s_entity [] = \"&#" "39;\";\n")
    (tree / "docs").mkdir()
    (tree / "docs/x.md").write_text(f"# A doc\n\nDone in {PR} 4 (#" "5).\n")
    p = tree / "tests/unit/gen_hmac_vectors.py"
    k = append(p, f'\n"""Vectors, as {ISSUE}s 3 and 4 asked."""\n')
    seed = tree / "tests/fuzz/seeds/fuzz_x/hello"    # data that happens to hold a citation
    seed.parent.mkdir(parents=True)
    seed.write_bytes(b"\x16\x03\x01\x00\x00 see #" b"1\n")
    rc, out = run("--root", tree)
    assert rc == 1
    for where, what in ((f"channel/ch_util.c:{n + 1}", f"{ISSUE} 12"),
                        (f"channel/ch_util.c:{n + 2}", f"{ISSUE} #" "7"),
                        (f"channel/ch_util.c:{n + 3}", "#" "12"),
                        ("docs/x.md:3", f"{PR} 4"),
                        (f"tests/unit/gen_hmac_vectors.py:{k + 1}", f"{ISSUE}s 3")):
        assert f'{where}: cites a tracker ("{what}"): say the reason instead' in out, out
    assert f"channel/ch_util.c:{n + 4}" not in out                  #  code, not a comment
    assert f"channel/ch_util.c:{n + 5}" not in out
    assert "fuzz_x/hello" not in out
    assert " 5 tracker citations" in out
