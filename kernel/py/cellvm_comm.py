"""cellvm_comm - comms both ways, with ipykernel's API, and the kernel object libraries reach
through get_ipython().kernel (docs/kernel.md "Comms").

C hands every comm_open/comm_msg/comm_close from the client to dispatch(), on the main
thread, between requests (as ipykernel handles shell messages), with the message as parent
of what the handlers publish. What the kernel sends goes out through _cellvm.publish.

ipykernel's own Comm needs ipykernel's Kernel (zmq, a session), so `ipykernel.comm` is ours
(as xeus-python does): `from ipykernel.comm import Comm` (ipywidgets 6 and 7) gets this
module without importing ipykernel (93 ms natively), and the `comm` package, when something
imports it, gets our create_comm and get_comm_manager (ipywidgets 8).
"""
import importlib
import json
import logging
import sys
import types
import uuid

import _cellvm


class _KernelLog(logging.Handler):
    """Comm errors go to the kernel's own log (the gateway's log), as ipykernel's go to its
    terminal: a client sees no stray stderr for a comm nobody opened."""

    def emit(self, record):
        try:
            text = self.format(record)
            text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            level = ("error" if record.levelno >= logging.ERROR else "warn"
                     if record.levelno >= logging.WARNING else "info")
            if len(text) > 1800:        # a traceback's end says most
                text = text[:600] + " ... " + text[-1200:]
            _cellvm.log(level, "comm.log", text)
        except Exception:
            pass


log = logging.getLogger("cellvm.comm")
log.addHandler(_KernelLog())
log.propagate = False

KERNEL = None               # the CellvmKernel, once install() ran
_request = None             # the shell request Python handles now: its content (get_parent)


def _dumps(obj):
    from cellvm_io import _dumps as dumps        # loaded after us; strict, bytes as base64
    return dumps(obj)


def _publish(msg_type, content, metadata=None, buffers=None, parent=None):
    """On iopub; parent None: the running request's (a silent one publishes nothing)."""
    _cellvm.publish(msg_type, _dumps(content), _dumps(metadata) if metadata else None,
                    None if parent is None else _dumps(parent),
                    [b if isinstance(b, (bytes, bytearray)) else memoryview(b).cast("B")
                     for b in buffers] if buffers else None)


class Comm:
    """ipykernel.comm.Comm: a comm the kernel opens (primary) or the client opened."""

    _closed = True

    def __init__(self, target_name="", data=None, metadata=None, buffers=None, *,
                 comm_id=None, primary=True, target_module=None, kernel=None, topic=None,
                 **kwargs):
        self.comm_id = comm_id or uuid.uuid4().hex
        self.target_name = target_name or "comm"
        self.target_module = target_module
        self.primary = primary
        self.kernel = KERNEL if kernel is None else kernel
        self.topic = topic or ("comm-%s" % self.comm_id).encode("ascii")
        self._open_data = kwargs.get("_open_data") or {}
        self._close_data = kwargs.get("_close_data") or {}
        self._msg_callback = self._close_callback = None
        if self.kernel is not None:
            if primary:
                self.open(data=data, metadata=metadata, buffers=buffers)
            else:
                self._closed = False

    @property
    def log(self):
        return log

    def _publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        content = dict(data={} if data is None else data, comm_id=self.comm_id, **keys)
        _publish(msg_type, content, metadata, buffers)

    def __del__(self):
        try:
            self.close(deleting=True)
        except Exception:
            pass

    def open(self, data=None, metadata=None, buffers=None):
        """Open the client's side of this comm."""
        manager = getattr(self.kernel, "comm_manager", None)
        if manager is None:
            raise RuntimeError("Comms cannot be opened without a kernel and a comm_manager "
                               "attached to that kernel.")
        manager.register_comm(self)
        try:
            self._publish_msg("comm_open", self._open_data if data is None else data, metadata,
                              buffers, target_name=self.target_name,
                              target_module=self.target_module)
            self._closed = False
        except Exception:
            manager.unregister_comm(self)
            raise

    def close(self, data=None, metadata=None, buffers=None, deleting=False):
        """Close the client's side of this comm (once)."""
        if self._closed:
            return
        self._closed = True
        if not self.kernel:
            return
        self._publish_msg("comm_close", self._close_data if data is None else data, metadata,
                          buffers)
        if not deleting:
            self.kernel.comm_manager.unregister_comm(self)

    def send(self, data=None, metadata=None, buffers=None):
        """A comm_msg to the client's side."""
        self._publish_msg("comm_msg", data, metadata, buffers)

    def on_close(self, callback):
        self._close_callback = callback

    def on_msg(self, callback):
        self._msg_callback = callback

    def handle_close(self, msg):
        if self._close_callback:
            self._close_callback(msg)

    def handle_msg(self, msg):
        """As ipykernel: the shell's pre/post_execute run around the callback (so an
        inline figure a callback draws is shown)."""
        if self._msg_callback:
            shell = getattr(self.kernel, "shell", None)
            if shell:
                shell.events.trigger("pre_execute")
            self._msg_callback(msg)
            if shell:
                shell.events.trigger("post_execute")


class CommManager:
    """ipykernel.comm.CommManager: targets by name, open comms by id."""

    def __init__(self, kernel=None, **kwargs):
        self.kernel = kernel
        self.comms = {}
        self.targets = {}

    @property
    def log(self):
        return log

    def register_target(self, target_name, f):
        """f(comm, comm_open message) runs when the client opens a comm on target_name; f
        may be an import string."""
        if isinstance(f, str):
            mod, _, name = f.rpartition(".")
            f = getattr(importlib.import_module(mod), name)
        self.targets[target_name] = f

    def unregister_target(self, target_name, f=None):
        return self.targets.pop(target_name)

    def register_comm(self, comm):
        comm.kernel = self.kernel
        self.comms[comm.comm_id] = comm
        return comm.comm_id

    def unregister_comm(self, comm):
        return self.comms.pop(comm.comm_id, None)

    def get_comm(self, comm_id):
        comm = self.comms.get(comm_id)
        if comm is None:
            log.warning("No such comm: %s", comm_id)
        return comm

    def comm_open(self, stream, ident, msg):
        content = msg["content"]
        comm_id, target_name = content["comm_id"], content["target_name"]
        f = self.targets.get(target_name)
        comm = Comm(comm_id=comm_id, primary=False, target_name=target_name,
                    kernel=self.kernel)
        self.register_comm(comm)
        if f is None:
            log.error("No such comm target registered: %s", target_name)
        else:
            try:
                f(comm, msg)
                return
            except Exception:
                log.error("Exception opening comm with target: %s", target_name,
                          exc_info=True)
        comm.close()        # no target, or it failed: the client's side goes too

    def comm_msg(self, stream, ident, msg):
        comm = self.get_comm(msg["content"]["comm_id"])
        if comm is not None:
            try:
                comm.handle_msg(msg)
            except Exception:
                log.error("Exception in comm_msg for %s", comm.comm_id, exc_info=True)

    def comm_close(self, stream, ident, msg):
        comm_id = msg["content"]["comm_id"]
        comm = self.get_comm(comm_id)
        if comm is None:
            return
        comm._closed = True
        self.comms.pop(comm_id, None)
        try:
            comm.handle_close(msg)
        except Exception:
            log.error("Exception in comm_close for %s", comm_id, exc_info=True)


# ----------------------------------------------------------------------------
#  get_ipython().kernel

class _Stream:
    """A stand-in for one of ipykernel's sockets: only iopub_socket can be sent on."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "<cellvm %s>" % self.name


def _extract_header(parent):
    """jupyter_client's extract_header: a message's header, or the header itself."""
    if not parent:
        return {}
    return dict(parent.get("header", parent) if isinstance(parent, dict) else parent)


class Session:
    """The part of jupyter_client's Session that libraries use on a kernel: msg() and
    send() on iopub_socket. The kernel makes the header (msg_id, date, session)."""

    username = "cellvm"

    def __init__(self, kernel):
        self._kernel = kernel

    def msg(self, msg_type, content=None, parent=None, header=None, metadata=None):
        header = header or {"msg_id": uuid.uuid4().hex, "msg_type": msg_type,
                            "username": self.username, "session": "", "version": "5.3"}
        return {"header": header, "msg_id": header.get("msg_id"), "msg_type": msg_type,
                "parent_header": _extract_header(parent), "content": content or {},
                "metadata": metadata or {}}

    def send(self, stream, msg_or_type, content=None, parent=None, ident=None, buffers=None,
             track=False, header=None, metadata=None):
        """Publish on iopub (the only stream here); parent as given, None meaning none, as
        jupyter_client has it. Returns the message as msg() makes it."""
        if isinstance(msg_or_type, dict):
            msg = msg_or_type
            buffers = buffers if buffers is not None else msg.get("buffers")
        else:
            msg = self.msg(msg_or_type, content, parent, header, metadata)
        if stream is not self._kernel.iopub_socket:
            log.warning("session.send on %r: cellvm-kernel sends on iopub_socket only", stream)
            return None
        msg_type = msg.get("msg_type") or msg["header"]["msg_type"]
        _publish(msg_type, msg.get("content") or {}, msg.get("metadata") or None,
                 buffers, parent=msg.get("parent_header") or {})
        return msg


class CellvmKernel:
    """What ipykernel's kernel gives libraries, as far as cellvm-kernel has it."""

    implementation = "cellvm-kernel"

    def __init__(self, shell=None):
        self.shell = shell
        self.comm_manager = CommManager(kernel=self)
        self.session = Session(self)
        self.iopub_socket = _Stream("iopub_socket")

    def get_parent(self, channel="shell"):
        """The running shell request as a message ({} outside one)."""
        header = json.loads(_cellvm.parent()) if channel == "shell" else {}
        if not header:
            return {}
        req = _request if isinstance(_request, dict) else {}
        return {"header": header, "msg_id": header.get("msg_id"),
                "msg_type": header.get("msg_type"), "parent_header": req.get("parent_header", {}),
                "metadata": req.get("metadata", {}), "content": req.get("content", {})}

    @property
    def _parent_header(self):
        return self.get_parent("shell")

    def raw_input(self, prompt=""):
        import builtins
        return builtins.input(prompt)

    def getpass(self, prompt="Password: ", stream=None):
        import getpass
        return getpass.getpass(prompt)


def set_request(msg):
    """The shell request that runs now (header, content, ...; None after it)."""
    global _request
    _request = msg


def dispatch(msg_type, msg_json, buffers):
    """A comm message from the client, whole; C calls this between requests."""
    msg = json.loads(msg_json)
    msg.update(buffers=buffers, msg_id=msg["header"].get("msg_id"), msg_type=msg_type)
    manager = KERNEL.comm_manager
    handler = getattr(manager, msg_type, None) if msg_type in (
        "comm_open", "comm_msg", "comm_close") else None
    set_request(msg)
    try:
        if handler is None:
            log.warning("cellvm-kernel does not handle %s", msg_type)
        else:
            handler(None, None, msg)
    except BaseException:       # an interrupt too: the kernel goes on
        log.error("Exception in %s", msg_type, exc_info=True)
    finally:
        set_request(None)


def comm_info(content):
    """comm_info_reply content: the open comms, of one target when asked, as ipykernel."""
    target = content.get("target_name")
    comms = getattr(KERNEL.comm_manager, "comms", {})
    return {"status": "ok",
            "comms": {k: {"target_name": v.target_name} for k, v in list(comms.items())
                      if target is None or v.target_name == target}}


# ----------------------------------------------------------------------------
#  Installing it

class _PatchingLoader:
    """A loader that runs the real one, then patches the module it made."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _PatchOnImport:
    """A meta path finder: modules named in patches load as always, then get patched. Only
    when something imports them, so start-up pays nothing."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not self and find else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def _patch_comm_package(mod):
    if hasattr(mod, "create_comm") and hasattr(mod, "get_comm_manager"):
        mod.create_comm = lambda *args, **kwargs: Comm(*args, **kwargs)
        mod.get_comm_manager = lambda: KERNEL.comm_manager


def install(shell=None):
    """Make the kernel object (get_ipython().kernel when there is a shell), ipykernel.comm,
    and the comm package's hook."""
    global KERNEL
    KERNEL = CellvmKernel(shell)
    if shell is not None:
        shell.kernel = KERNEL
    mod = types.ModuleType("ipykernel.comm", "cellvm-kernel's comms (cellvm_comm), with "
                           "ipykernel's API")
    mod.Comm, mod.CommManager, mod.__all__ = Comm, CommManager, ["Comm", "CommManager"]
    for name in ("ipykernel.comm", "ipykernel.comm.comm", "ipykernel.comm.manager"):
        sys.modules[name] = mod
    # `import ipykernel.comm` later imports the real package: give it our submodule.
    patches = {"ipykernel": lambda pkg: setattr(pkg, "comm", mod),
               "comm": _patch_comm_package}
    if "comm" in sys.modules:
        _patch_comm_package(sys.modules["comm"])
    sys.meta_path.insert(0, _PatchOnImport(patches))
    return KERNEL
