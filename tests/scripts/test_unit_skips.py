"""Every skip in the unit tests goes through tests/unit/tu.h: tu_skip (fails under CI=true) or
tu_skip_expected (a condition CI may have), each printing the test and why. A bare cmocka skip()
would pass CI silently without its coverage."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
BARE = re.compile(r"(?<![\w.>])skip\s*\(\s*\)")


def test_no_bare_cmocka_skip():
    found = []
    for path in sorted((ROOT / "tests" / "unit").glob("*.[ch]")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            if BARE.search(code):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "use tu_skip or tu_skip_expected (tests/unit/tu.h):\n" + "\n".join(found)


def test_the_check_sees_a_bare_skip():
    assert BARE.search("        skip ();")
    assert BARE.search("if (x) skip();")
    assert not BARE.search("    _skip (file, line);")
    assert not BARE.search('    tu_skip ("no qemu-img");')
