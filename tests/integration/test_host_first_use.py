"""A fresh HOME on the host: matplotlib's first-use work (its font cache) is done before the first
kernel with that HOME starts (firstuse.py, the set-up of the first test that needs it), so a
chart cell's timeout counts the chart only. On a cold machine that build took longer than
test_kernel_noipython::test_matplotlib_png's 60 s.
"""
import os

from kernel_driver import assert_execute_ok, new_kernel  # noqa: F401  (fixture)
from sessions import start_session

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHART = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);"


def _fresh_home(tmp_path):
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    for k in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(k, None)
    return home, env


def _font_cache(home):
    return list((home / ".cache" / "matplotlib").glob("fontlist-*.json"))


def _one_png(datas):
    import base64
    pngs = [base64.b64decode(d["image/png"]) for d in datas if "image/png" in d]
    assert len(pngs) == 1 and pngs[0].startswith(PNG_MAGIC), datas
    return pngs[0]


def test_a_fresh_home_has_the_font_cache_before_its_first_kernel(new_kernel, tmp_path):
    home, env = _fresh_home(tmp_path)
    plain = new_kernel(env=dict(env, CELLVM_NO_IPYTHON="1"))
    assert _font_cache(home), "the kernel started before matplotlib's font cache was built"
    r = plain.execute(CHART, timeout=60)
    assert_execute_ok(r)
    _one_png([m.content["data"] for m in r.of_type("display_data")])
    k = new_kernel(env=env)
    r = k.execute(CHART, timeout=60)
    assert_execute_ok(r)
    _one_png([m.content["data"] for m in r.of_type("display_data")])


def test_unsafe_local_with_a_fresh_home(tmp_path):
    home, env = _fresh_home(tmp_path)
    s = start_session("cellvm-unsafe-local",
                      env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")})
    try:
        assert _font_cache(home), "the gateway started before matplotlib's font cache was built"
        r = s.run(CHART, timeout=60)
        assert r.status == "ok", r.describe()
        _one_png([m["content"]["data"] for m in r.of_type("display_data")])
    finally:
        s.close()
