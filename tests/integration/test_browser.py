"""A real browser on the classic Notebook (README "Classic Notebook in a browser").

One Debian Notebook 6.4 server per module (`/usr/bin/python3 -m notebook`, a free port, a random
token, a temporary copy of notebooks/ as its notebook dir, JUPYTER_PATH with the build's
kernelspecs, its own runtime, data and config dirs) and one headless Chromium per module, driven
through selenium and chromedriver. For each kernelspec in KERNELS (`cellvm`, the microVM, and
`cellvm-unsafe-local`; CELLVM_BROWSER_KERNELS="a b" picks others), every check reads the page's
DOM:

- the sales-analysis notebook (01) runs with Cell > Run All: every prompt gets a number, a
  pandas `table.dataframe` and the summary lines show, and no error; the chart notebook (02) shows
  its two PNG charts (`img[src^="data:image/png"]`, decoded by the browser). On `cellvm` the
  notebook's relative data/sales.csv is not in the VM: the `cellvm-notebook` kernelspec (which
  shares the notebook's folder) is used when the build has it, else data/sales.csv is uploaded
  with `cellvm_put_request` through a side client on the kernel's connection file (docs/files.md);
- streaming: a cell printing a line a second shows its first line while its prompt is `In [*]`;
- interrupt: the toolbar's interrupt button ends `time.sleep(600)` with KeyboardInterrupt
  quickly, and the next cell runs;
- restart: Kernel > Restart and the dialog's Restart: a variable is gone (NameError), and on a
  microVM a file written under /workspace is still there;
- input(): the `.raw_input` box takes typed text and Enter, and the answer is printed;
- a widget: an IntSlider renders, arrow keys on its handle move it (`print(s.value)` shows the new
  value) and `s.value = 42` in a cell moves its readout (this needs comms in the kernel and the
  jupyter-js-widgets nbextension, which Debian's python3-widgetsnbextension enables in
  /etc/jupyter/nbconfig);
- completion: Tab after `os.pa` opens the `#complete` list, which holds `path`.

Every check first confirms that what it waits for is not on the page yet. A failed test leaves a
screenshot, the page's HTML and its console log in build/browser/<test>.*. Every process started
here (the server and everything below it: gateways, QEMUs; chromedriver and every Chromium
process) is tracked by pid and killed at the end; the server's log (which holds the gateways'
logs) is a sessions.Logs, so conftest attaches it to a failed test and scans it for
`event=reactor.slow`.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import psutil
import pytest

import sessions
from sessions import BUILD, HOST_PYTHON, READY_TIMEOUT, ROOT, SPECS, kernel_spec

NOTEBOOKS = ROOT / "notebooks"
SHOTS = ROOT / "build" / "browser"
KERNELS = os.environ.get("CELLVM_BROWSER_KERNELS", "cellvm cellvm-unsafe-local").split()
NOTEBOOK_SPEC = "cellvm-notebook"      # cellvm with the notebook's folder shared into the VM
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 120                             # anything in the page, on a microVM under TCG
QUICK = 30                             # what must be quick: an interrupt's KeyboardInterrupt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Tracker:
    """psutil handles of a process and everything that ever ran below it (polled every 50 ms),
    so that everything can be killed by pid."""

    def __init__(self, pid):
        self.root = psutil.Process(pid)
        self.procs = {pid: self.root}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.is_set():
            self.track()
            time.sleep(0.05)

    def track(self):
        try:
            kids = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        with self._lock:
            for k in kids:
                if k.pid not in self.procs or not self.procs[k.pid].is_running():
                    self.procs[k.pid] = k

    def alive(self):
        self.track()
        with self._lock:
            return [p for p in self.procs.values() if running(p)]

    def kill(self):
        self.track()
        self._stop.set()
        self._thread.join(2)
        with self._lock:
            procs = list(self.procs.values())
        for p in procs:
            try:
                if p.is_running():
                    p.kill()
            except psutil.Error:
                pass
        sessions.wait_procs_gone(procs, 10)


# --------------------------------------------------------------------------
# The notebook server

class NotebookServer:
    """Debian's classic Notebook 6.4 on a free port, serving a temporary copy of notebooks/."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.port = free_port()
        self.token = uuid.uuid4().hex
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = self.tmp / "notebooks"
        shutil.copytree(NOTEBOOKS, self.root)
        self.runtime = self.tmp / "runtime"
        self.config = self.tmp / "config"
        self.data = self.tmp / "data"
        for d in (self.runtime, self.config, self.data):
            d.mkdir()
        self.log_path = self.tmp / "notebook-server.log"
        self.logs = sessions.Logs("notebook-server", gateway_log=self.log_path)
        self.env = dict(os.environ, JUPYTER_PATH=str(BUILD / "share" / "jupyter"),
                        JUPYTER_RUNTIME_DIR=str(self.runtime), JUPYTER_DATA_DIR=str(self.data),
                        JUPYTER_CONFIG_DIR=str(self.config))
        self.env.pop("JUPYTER_TOKEN", None)
        self.proc = None
        self.tracker = None

    def start(self):
        self.enable_widgets()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [HOST_PYTHON, "-m", "notebook", "--no-browser", "--ip=127.0.0.1",
             f"--port={self.port}", "--port-retries=0", f"--NotebookApp.token={self.token}",
             f"--notebook-dir={self.root}", "--allow-root",
             "--MappingKernelManager.cull_idle_timeout=0"],
            env=self.env, cwd=str(self.tmp), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.tracker = Tracker(self.proc.pid)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, \
                f"the notebook server exited {self.proc.returncode}:\n{self.log()[-3000:]}"
            try:
                status, _ = self.call("GET", "/api/status", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the notebook server never answered:\n{self.log()}"
            time.sleep(0.2)
        return self

    def enable_widgets(self):
        """The widgets nbextension must be enabled for the notebook section. Debian enables it in
        /etc/jupyter/nbconfig, which a private JUPYTER_CONFIG_DIR does not hide; if it is not
        enabled anywhere on the server's config path, enable it in ours."""
        code = ("from notebook.nbextensions import _get_nbextension_dir\n"
                "from notebook.services.config import ConfigManager\n"
                "from jupyter_core.paths import jupyter_config_path\n"
                "import json, os\n"
                "cm = ConfigManager(read_config_path=[os.path.join(p, 'nbconfig') "
                "for p in jupyter_config_path()])\n"
                "print(json.dumps(cm.get('notebook').get('load_extensions', {})))\n")
        out = subprocess.run([HOST_PYTHON, "-c", code], env=self.env, capture_output=True,
                             text=True, timeout=60)
        loaded = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
        if not loaded.get("jupyter-js-widgets/extension"):
            subprocess.run([HOST_PYTHON, "-m", "notebook.nbextensions", "enable", "--py",
                            "widgetsnbextension", "--user"], env=self.env, capture_output=True,
                           timeout=60)
        self.nbextensions = subprocess.run(
            [HOST_PYTHON, "-m", "notebook.nbextensions", "list"], env=self.env,
            capture_output=True, text=True, timeout=60).stdout

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def call(self, method, path, body=None, timeout=READY_TIMEOUT):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "token " + self.token,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        try:
            return status, (json.loads(text) if text else None)
        except ValueError:
            return status, text

    def shutdown_session(self, session_id):
        self.call("DELETE", f"/api/sessions/{session_id}")

    def stop(self):
        """Every session deleted (each gateway stops its VM), then SIGTERM; what is left after
        30 s is SIGKILLed by pid."""
        try:
            status, models = self.call("GET", "/api/sessions", timeout=30)
            for m in models if status == 200 else []:
                self.call("DELETE", f"/api/sessions/{m['id']}", timeout=60)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.tracker.alive():
            time.sleep(0.1)
        self.tracker.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        self.logs.close()


# --------------------------------------------------------------------------
# The browser

class Browser:
    """Headless Chromium through chromedriver (its own process group); every process of both is
    tracked and killed by pid after driver.quit()."""

    def __init__(self, tmp):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        self.tmp = pathlib.Path(tmp)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                  "--window-size=1400,1800", f"--user-data-dir={self.tmp / 'profile'}"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.service = Service(executable_path=CHROMEDRIVER,
                               log_path=str(self.tmp / "chromedriver.log"),
                               popen_kw={"start_new_session": True})
        self.service.start()
        self.pid = self.service.process.pid
        self.t0 = psutil.Process(self.pid).create_time()
        self.tracker = Tracker(self.pid)
        try:
            self.driver = webdriver.Remote(self.service.service_url, options=opts)
        except BaseException:
            self.close()
            raise
        self.driver.set_script_timeout(60)
        self.console = []

    def console_log(self):
        try:
            self.console += self.driver.get_log("browser")
        except Exception:
            pass
        return self.console

    def close(self):
        self.tracker.track()
        drv = getattr(self, "driver", None)
        if drv is not None:
            try:
                drv.quit()
            except Exception:
                pass
        try:
            self.service.stop()
        except Exception:
            pass
        self.tracker.kill()
        # Anything left in the process group we created (pgid = chromedriver's pid), started
        # after it: a Chromium process that escaped the tracker's polls.
        for p in psutil.process_iter(["pid", "create_time"]):
            try:
                if os.getpgid(p.pid) == self.pid and p.info["create_time"] >= self.t0 - 1:
                    p.kill()
            except (OSError, psutil.Error):
                pass


# --------------------------------------------------------------------------
# Pages

def wait_for(fn, timeout, what):
    """fn()'s first truthy value within timeout; AssertionError naming what and fn's last value."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
        except Exception as e:          # a page in the middle of loading
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last seen: {last!r:.3000})")
        time.sleep(0.1)


def short(message):
    """A console line without the long URLs of the scripts it names."""
    return re.sub(r"https?://\S+/([^/?\s]+)(\?\S*)?", r"\1", message)[:500]


CELL_JS = r"""
var c = Jupyter.notebook.get_cell(arguments[0]);
var e = c.element[0];
var out = e.querySelector('.output_wrapper');
return {prompt: ((e.querySelector('.input_prompt') || {}).innerText || '').replace(/\s+/g, ''),
        text: out ? out.innerText : '',
        errors: e.querySelectorAll('.output_area .output_error').length};
"""


class Page:
    """One notebook open in the browser, driven through Jupyter's page (menus, toolbar, keys)
    and read through its DOM."""

    def __init__(self, server, browser, name):
        self.server, self.browser, self.drv = server, browser, browser.driver
        self.name = name
        self.url = f"{server.url}/notebooks/{name}?token={server.token}"

    def open(self):
        self.leave()
        self.drv.get(self.url)
        wait_for(lambda: self.js("return !!(window.Jupyter && Jupyter.notebook && "
                                 "Jupyter.notebook._fully_loaded && Jupyter.notebook.kernel)"),
                 WAIT, f"{self.name} loaded")
        self.js("window.onbeforeunload = null;")
        self.wait_kernel_idle(READY_TIMEOUT)
        return self

    def is_open(self):
        try:
            return self.drv.current_url.split("?")[0] == self.url.split("?")[0] and \
                self.js("return !!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel)")
        except Exception:
            return False

    def leave(self):
        """No 'leave this page?' question when the browser moves on."""
        try:
            self.drv.execute_script("if (window.Jupyter && Jupyter.notebook) "
                                    "{Jupyter.notebook.set_dirty(false);} "
                                    "window.onbeforeunload = null;")
        except Exception:
            pass

    def js(self, code, *args):
        return self.drv.execute_script(code, *args)

    def kernel_state(self):
        return self.js("var i = document.getElementById('kernel_indicator_icon');"
                       "var k = Jupyter.notebook.kernel;"
                       "return {icon: i ? i.className : '', connected: !!(k && k.is_connected()),"
                       " id: k ? k.id : null, name: k ? k.name : null};")

    def wait_kernel_idle(self, timeout=WAIT):
        return wait_for(lambda: (lambda s: s if s["connected"] and "kernel_idle_icon" in s["icon"]
                                 else None)(self.kernel_state()),
                        timeout, f"{self.name}: the kernel idle and connected")

    @property
    def session_id(self):
        return self.js("return Jupyter.notebook.session && Jupyter.notebook.session.id;")

    @property
    def kernel_id(self):
        return self.kernel_state()["id"]

    # --- cells ----------------------------------------------------------
    def add_cell(self, code):
        """A new code cell at the bottom holding code, selected and in view; its index."""
        return self.js("var nb = Jupyter.notebook; var c = nb.insert_cell_at_bottom('code');"
                       "c.set_text(arguments[0]); var i = nb.find_cell_index(c); nb.select(i);"
                       "c.element[0].scrollIntoView(); return i;", code)

    def execute(self, i):
        self.js("Jupyter.notebook.get_cell(arguments[0]).execute();", i)

    def cell(self, i):
        return self.js(CELL_JS, i)

    def element(self, i):
        return self.js("return Jupyter.notebook.get_cell(arguments[0]).element[0];", i)

    def find(self, i, css):
        return self.js("return Jupyter.notebook.get_cell(arguments[0]).element[0]"
                       ".querySelectorAll(arguments[1]);", i, css)

    def wait_done(self, i, timeout=WAIT, expect=None):
        """The cell's prompt numbered (it ran) and, with expect, that text in its output; its
        state. (The prompt's number comes with the execute_reply on the shell channel, the output
        on iopub: the number can show before the last output does.)"""
        def done():
            c = self.cell(i)
            if re.match(r"In\[\d+\]", c["prompt"]) and (expect is None or expect in c["text"]):
                return c
            return None
        what = f"cell {i} of {self.name} finished" + (f", showing {expect!r}" if expect else "")
        return wait_for(done, timeout, what)

    def run(self, code, expect=None, timeout=WAIT):
        i = self.add_cell(code)
        self.execute(i)
        return i, self.wait_done(i, timeout, expect)

    def code_prompts(self):
        return self.js("return Jupyter.notebook.get_cells().filter(function (c) "
                       "{ return c.cell_type == 'code'; }).map(function (c) "
                       "{ return c.element[0].querySelector('.input_prompt').innerText.replace(/\\s+/g, ''); });")

    def menu(self, menu_id, item_id):
        """Open menu menu_id and click item_id. A click that lands while the page is still busy
        (a loaded machine) can leave the menu shut: the menu is clicked again each second."""
        from selenium.webdriver.common.by import By
        shown = lambda: (lambda e: e if e.is_displayed() else None)(  # noqa: E731
            self.drv.find_element(By.CSS_SELECTOR, f"#{item_id} > a"))
        def open_now():
            try:
                return shown()
            except Exception:           # not on the page yet
                return None
        item = None
        for _ in range(30):
            if not open_now():
                self.drv.find_element(By.ID, menu_id).click()
            try:
                item = wait_for(shown, 1, f"menu item #{item_id}")
                break
            except AssertionError:
                continue
        assert item is not None, f"menu item #{item_id}: not shown within 30 s of clicks"
        item.click()


def notebook_copy(server, src, dst, kernel):
    """server's notebook dir gets dst: notebook src (a path under it) without outputs, on the
    kernelspec kernel."""
    import nbformat
    nb = nbformat.read(server.root / src, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    spec = kernel_spec(kernel)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": spec.display_name,
                                 "language": "python"}
    nbformat.write(nb, server.root / dst)
    return dst


def blank_notebook(server, dst, kernel):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(""))
    spec = kernel_spec(kernel)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": spec.display_name,
                                 "language": "python"}
    nbformat.write(nb, server.root / dst)
    return dst


def is_microvm(kernel):
    return sessions.backend_of(kernel_spec(kernel).argv) == "microvm"


def upload(server, kernel_id, rel):
    """notebooks/<rel> into the kernel's /workspace/<rel>, with cellvm_put_request on its control
    channel (docs/files.md), through a side client on the server's connection file."""
    from jupyter_client import BlockingKernelClient
    cf = server.runtime / f"kernel-{kernel_id}.json"
    assert cf.exists(), f"no connection file {cf}: {sorted(os.listdir(server.runtime))}"
    kc = BlockingKernelClient(connection_file=str(cf))
    kc.load_connection_file()
    kc.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    try:
        data = (server.root / rel).read_bytes()
        msg = kc.session.msg("cellvm_put_request", {"path": rel})
        kc.session.send(kc.control_channel.socket, msg, buffers=[data])
        deadline = time.monotonic() + WAIT
        while True:
            reply = kc.get_control_msg(timeout=max(1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                break
        assert reply["content"].get("status") == "ok", reply["content"]
        assert reply["content"].get("size") == len(data), reply["content"]
    finally:
        kc.stop_channels()


# --------------------------------------------------------------------------
# Fixtures

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = NotebookServer(tmp_path_factory.mktemp("notebook-server"))
    try:
        srv.start()
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()
        else:
            srv.logs.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    SHOTS.mkdir(parents=True, exist_ok=True)
    b = Browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(autouse=True)
def failure_shots(request):
    """A failed test leaves build/browser/<test>.png, .html and .console.log."""
    failed = request.session.testsfailed
    if "browser" in request.fixturenames:
        b = request.getfixturevalue("browser")
        b.console_log()
        b.console = []                  # this test's console lines only
    yield
    if request.session.testsfailed == failed or "browser" not in request.fixturenames:
        return
    b = request.getfixturevalue("browser")
    SHOTS.mkdir(parents=True, exist_ok=True)
    base = SHOTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:150]
    try:
        b.driver.save_screenshot(str(base) + ".png")
        (base.parent / (base.name + ".html")).write_text(b.driver.page_source)
    except Exception:
        pass
    lines = [f"{e.get('level')} {e.get('source')} {e.get('message')}" for e in b.console_log()]
    (base.parent / (base.name + ".console.log")).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module", params=KERNELS)
def kernel(request):
    kernel_spec(request.param)              # fails (never skips) without spec or image
    return request.param


class Scratch:
    """One notebook per kernel for the interactive checks, reopened if a test moved away."""

    def __init__(self, page):
        self.page = page

    def __call__(self):
        if not self.page.is_open():
            self.page.open()
        return self.page


@pytest.fixture(scope="module")
def scratch(server, browser, kernel):
    name = blank_notebook(server, f"browser-{kernel}.ipynb", kernel)
    page = Page(server, browser, name)
    s = Scratch(page)
    yield s
    try:
        sid = page.session_id if page.is_open() else None
        page.leave()
        browser.driver.get("about:blank")
        if sid:
            server.shutdown_session(sid)
    except Exception:
        pass


def open_notebook(server, browser, kernel, src, tag):
    """src (under notebooks/) opened on kernel, its relative data/sales.csv visible to the kernel;
    the Page."""
    use = kernel
    if is_microvm(kernel) and (SPECS / NOTEBOOK_SPEC / "kernel.json").exists():
        use = NOTEBOOK_SPEC
    name = notebook_copy(server, src, f"{pathlib.Path(src).stem}-{tag}.ipynb", use)
    page = Page(server, browser, name).open()
    state = page.kernel_state()
    assert state["name"] == use, state
    if is_microvm(use) and use != NOTEBOOK_SPEC:
        upload(server, state["id"], "data/sales.csv")
    return page


def run_all(page, last, timeout=WAIT):
    """Cell > Run All; waits for every prompt to be numbered and the text last in the page (the
    last cell's output: a prompt's number can show before its cell's last output does)."""
    assert not page.js("return document.querySelectorAll('.output_area').length;"), \
        "outputs before Run All"
    page.menu("celllink", "run_all_cells")
    wait_for(lambda: (lambda p: p if p and all(re.match(r"In\[\d+\]", x) for x in p)
                      else None)(page.code_prompts()),
             timeout, f"{page.name}: every prompt numbered after Cell > Run All")
    return wait_for(lambda: (lambda t: t if last in t else None)(page.js(
        "return document.getElementById('notebook-container').innerText;")),
        timeout, f"{page.name}: {last!r} in the page after Cell > Run All")


def close_page(server, page):
    sid = page.session_id
    page.leave()
    page.drv.get("about:blank")
    if sid:
        server.shutdown_session(sid)


# --------------------------------------------------------------------------
# Tests

@pytest.mark.slow
def test_sales_notebook(server, browser, kernel):
    from selenium.webdriver.common.by import By
    page = open_notebook(server, browser, kernel, "01-pandas-analysis.ipynb", kernel)
    try:
        assert not page.drv.find_elements(By.CSS_SELECTOR, "table.dataframe")
        text = run_all(page, "{'2024-01': 142.5, '2024-02': 140.0, '2024-03': 150.0}")
        errors = page.js("return Array.from(document.querySelectorAll('.output_area .output_error'))"
                         ".map(function (e) { return e.innerText; });")
        assert not errors, f"errors in the sales notebook: {errors}"
        tables = page.drv.find_elements(By.CSS_SELECTOR, ".output_area table.dataframe")
        # df.head(), df.describe() and the pivot table (by_region and by_month are Series)
        assert len(tables) == 3, f"expected 3 pandas tables, got {len(tables)}"
        assert "North" in tables[0].text and "Widget" in tables[0].text, tables[0].text
        assert "12 orders, 4 regions, 3 products" in text
        assert "total revenue: 432.50" in text and "best region: East (117.50)" in text
    finally:
        close_page(server, page)


@pytest.mark.slow
def test_chart_notebook(server, browser, kernel):
    from selenium.webdriver.common.by import By
    page = open_notebook(server, browser, kernel, "02-matplotlib-chart.ipynb", kernel)
    try:
        assert not page.drv.find_elements(By.CSS_SELECTOR, 'img[src^="data:image/png"]')
        run_all(page, "figures still open: 0")
        errors = page.js("return Array.from(document.querySelectorAll('.output_area .output_error'))"
                         ".map(function (e) { return e.innerText; });")
        assert not errors, f"errors in the chart notebook: {errors}"
        sizes = wait_for(lambda: (lambda s: s if len(s) == 2 and all(w > 100 for w, h in s)
                                  else None)(page.js(
                             "return Array.from(document.querySelectorAll("
                             "'.output_area img[src^=\"data:image/png\"]')).map(function (i) "
                             "{ return [i.naturalWidth, i.naturalHeight]; });")),
                         WAIT, "two decoded PNG charts")
        assert all(h > 100 for w, h in sizes), sizes
    finally:
        close_page(server, page)


@pytest.mark.slow
def test_streaming_output(scratch):
    page = scratch()
    i = page.add_cell("import time\nfor n in range(6):\n    print(f'line {n}', flush=True)\n"
                      "    time.sleep(1)")
    assert "line 0" not in page.cell(i)["text"]
    page.execute(i)
    seen = wait_for(lambda: (lambda c: c if "line 0" in c["text"] else None)(page.cell(i)),
                    WAIT, "the first line in the page")
    assert seen["prompt"] == "In[*]:", \
        f"the first line showed only after the cell ended: {seen}"
    assert "line 5" not in seen["text"], seen
    done = page.wait_done(i, expect="line 5")
    assert [f"line {n}" for n in range(6)] == done["text"].splitlines(), done


def test_interrupt(scratch):
    from selenium.webdriver.common.by import By
    page = scratch()
    i = page.add_cell("import time\nprint('sleeping', flush=True)\ntime.sleep(600)")
    page.execute(i)
    c = wait_for(lambda: (lambda c: c if "sleeping" in c["text"] else None)(page.cell(i)),
                 WAIT, "the sleeping cell started")
    assert "KeyboardInterrupt" not in c["text"] and c["prompt"] == "In[*]:", c
    page.drv.find_element(By.CSS_SELECTOR, 'button[data-jupyter-action='
                                           '"jupyter-notebook:interrupt-kernel"]').click()
    t0 = time.monotonic()
    c = wait_for(lambda: (lambda c: c if "KeyboardInterrupt" in c["text"] else None)(page.cell(i)),
                 QUICK, "KeyboardInterrupt after the toolbar's interrupt button")
    took = time.monotonic() - t0
    page.wait_done(i, QUICK)
    _, after = page.run("print('usable', 6 * 7)", "usable 42")
    assert after["text"].strip() == "usable 42", after
    print(f"interrupt: KeyboardInterrupt {took:.1f} s after the click")


def test_restart(scratch, kernel):
    page = scratch()
    micro = is_microvm(kernel)
    code = "kept_var = 'before restart'\nprint(kept_var)"
    if micro:
        code += ("\nwith open('/workspace/kept-across-restart.txt', 'w') as f:\n"
                 "    f.write('still here')")
    _, c = page.run(code, "before restart")
    assert c["text"].strip() == "before restart" and not c["errors"], c
    page.js("window.__cellvm_restarted = false; Jupyter.notebook.events.one('kernel_ready.Kernel',"
            " function () { window.__cellvm_restarted = true; });")
    page.menu("kernellink", "restart_kernel")
    from selenium.webdriver.common.by import By
    btn = wait_for(lambda: [b for b in page.drv.find_elements(
        By.CSS_SELECTOR, ".modal-dialog .modal-footer button") if b.text.strip() == "Restart"
        and b.is_displayed()], 10, "the Restart button of the dialog")
    t0 = time.monotonic()
    btn[0].click()
    wait_for(lambda: page.js("return window.__cellvm_restarted;"), WAIT, "the kernel restarted")
    page.wait_kernel_idle()
    took = time.monotonic() - t0
    _, c = page.run("print(kept_var)", "NameError")
    assert "NameError" in c["text"] and c["errors"], f"the variable outlived the restart: {c}"
    if micro:
        _, c = page.run("print(open('/workspace/kept-across-restart.txt').read())", "still here")
        assert c["text"].strip() == "still here", c
    print(f"restart: kernel ready {took:.1f} s after the dialog's Restart")


def test_input_box(scratch):
    from selenium.webdriver.common.keys import Keys
    page = scratch()
    i = page.add_cell("name = input('Your name: ')\nprint(f'Hello, {name}!')")
    assert not page.find(i, "input.raw_input")
    page.execute(i)
    box = wait_for(lambda: page.find(i, "input.raw_input"), WAIT, "the input() box")[0]
    assert "Your name:" in page.cell(i)["text"]
    assert "Hello, Ada Lovelace!" not in page.cell(i)["text"]
    box.send_keys("Ada Lovelace" + Keys.ENTER)
    page.wait_done(i, expect="Hello, Ada Lovelace!")
    assert not page.find(i, "input.raw_input")


def test_widget_slider(scratch):
    from selenium.webdriver.common.keys import Keys
    page = scratch()
    i = page.add_cell("import ipywidgets as w\ns = w.IntSlider()\ndisplay(s)")
    assert not page.find(i, ".ui-slider-handle")
    page.execute(i)
    try:
        page.wait_done(i)
        handle = wait_for(lambda: page.find(i, ".ui-slider-handle"), 60,
                          "the IntSlider's handle")[0]
    except AssertionError:
        c = page.cell(i)
        console = [short(e.get("message", "")) for e in page.browser.console_log()
                   if e.get("level") != "INFO"][-10:]
        pytest.fail("the IntSlider did not render in the page (widgets need comms in the kernel "
                    "and the jupyter-js-widgets nbextension): the cell shows "
                    f"{c['text'][:1500]!r} (prompt {c['prompt']!r}, {c['errors']} errors); "
                    f"browser console: {console}", pytrace=False)
    readout = lambda: (page.find(i, ".widget-readout") or [None])[0]
    assert readout() is not None and readout().text.strip() == "0", readout() and readout().text
    page.js("arguments[0].focus();", handle)
    handle.send_keys(Keys.ARROW_RIGHT * 5)
    wait_for(lambda: readout().text.strip() == "5", 10, "the readout at 5 after 5 right arrows")
    # The widget manager sends one update, then holds the newest state until the kernel is
    # idle for that message, so an execute sent meanwhile may be served before the last
    # update: a real kernel sees 1 then 5. The value must reach 5 (a kernel that never said
    # idle for a comm_msg would leave it at 1 for good).
    seen = []

    def kernel_value():
        _, c = page.run("print(s.value)", "\n")
        seen.append(c["text"].strip())
        return seen[-1] == "5"
    try:
        wait_for(kernel_value, 30, "the kernel's slider value at 5 after 5 right arrows")
    except AssertionError:
        pytest.fail(f"the kernel's slider value never reached 5 after 5 right arrows and the "
                    f"readout at 5: print(s.value) gave {seen}", pytrace=False)
    page.run("s.value = 42")
    wait_for(lambda: readout().text.strip() == "42", WAIT, "the readout at 42 after s.value = 42")


def test_completion(scratch):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    page = scratch()
    _, c = page.run("import os")
    assert not c["errors"], c
    i = page.add_cell("")
    page.js("var nb = Jupyter.notebook; nb.select(arguments[0]); nb.edit_mode();"
            "nb.get_cell(arguments[0]).code_mirror.focus();", i)
    assert not page.drv.find_elements(By.CSS_SELECTOR, "#complete")
    active = page.drv.switch_to.active_element
    active.send_keys("os.pa")
    active.send_keys(Keys.TAB)
    options = wait_for(lambda: [o.text for o in page.drv.find_elements(
        By.CSS_SELECTOR, "#complete select option")], WAIT, "the completion list")
    assert "path" in options or "os.path" in options, options
    page.drv.switch_to.active_element.send_keys(Keys.ESCAPE)
