"""cellvm-slurm: a jupyter_client kernel provisioner that runs the kernel as a Slurm job
(docs/slurm.md).

The kernelspec's argv is a remote launcher's command line (build/cellvm-remote) with the
placeholders {kernel_id}, {response_address}, {public_key} and {port_range}. The provisioner
makes an RSA-1024 key pair, listens on a response port, submits the launcher with sbatch and
waits, within launch_timeout, for the launcher's one connection back: base64(JSON {"version":
1, "key": K, "conn_info": C}), K the launcher's AES-128 key encrypted with our public key
(PKCS#1 v1.5), C the connection info encrypted with it (ECB, PKCS#7), the protocol Jupyter
Enterprise Gateway's launchers speak. Signals, liveness polls and the shutdown request then go
to the launcher's comm port, one JSON per TCP connection; the job is cancelled at cleanup.

The job is submitted requeueable. A drained node's jobs requeued by the operator (`scontrol
requeue`), or a dead node's requeued by Slurm, move: the launcher gets SIGTERM and the gateway
suspends its session (named by the kernel id) into the shared store, the job goes back to the
queue, and the launcher that Slurm starts on another node resumes it and answers on the same
response port. Meanwhile poll() says the kernel lives (for move_timeout at most), releases a
requeued job Slurm holds back (BeginTime), and takes the new connection info into the
KernelManager, so every client made after the move reaches the new node.

Configuration (kernelspec metadata.kernel_provisioner.config, traitlets): launch_timeout,
response_ip, port_range, cpus, memory, partition, output, sbatch_args. The kernel's
environment overrides the resources as Enterprise Gateway's kernelspecs name them:
KERNEL_CPUS, KERNEL_MEMORY (Slurm's --mem units: 512M, 2G), KERNEL_LAUNCH_TIMEOUT.
"""
import asyncio
import base64
import json
import os
import re
import shlex
import signal
import socket
import time

from Cryptodome.Cipher import AES, PKCS1_v1_5
from Cryptodome.PublicKey import RSA
from Cryptodome.Util.Padding import unpad
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from traitlets import Bool, Float, List, Unicode, default

KEY_BITS = 1024            # only wraps a 16-byte AES key
MAX_RESPONSE = 64 * 1024   # a connection-info payload is well under 2 KiB
PORT_KEYS = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
# Job states in which the launcher can still answer or is running.
LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
               "RESIZING", "SIGNALING", "STAGE_OUT"}


class LaunchError(RuntimeError):
    """The job did not bring up a kernel; the message says what Slurm knows of it."""


def format_argv(argv, ns):
    """Fill {name} placeholders from ns; unknown ones stay as they are (jupyter_client fills
    {connection_file} and the like the same way)."""
    pat = re.compile(r"\{([A-Za-z0-9_]+)\}")
    return [pat.sub(lambda m: str(ns.get(m.group(1), m.group(0))), a) for a in argv]


def public_key_b64(private_key):
    """The public half as base64 DER SubjectPublicKeyInfo (what --public-key carries)."""
    return base64.b64encode(private_key.publickey().export_key("DER")).decode()


def decode_response(data, private_key):
    """The launcher's payload -> its connection info (a dict). Raises ValueError on anything
    malformed: the response port is reachable by anyone on the network."""
    try:
        body = json.loads(base64.b64decode(data, validate=True))
        if body.get("version") != 1:
            raise ValueError(f"unsupported payload version {body.get('version')!r}")
        sentinel = object()
        aes_key = PKCS1_v1_5.new(private_key).decrypt(base64.b64decode(body["key"]), sentinel)
        if aes_key is sentinel or len(aes_key) not in (16, 24, 32):
            raise ValueError("the payload's key does not decrypt with our private key")
        clear = AES.new(aes_key, AES.MODE_ECB).decrypt(base64.b64decode(body["conn_info"]))
        info = json.loads(unpad(clear, 16))
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError, json.JSONDecodeError,
            base64.binascii.Error) as e:
        raise ValueError(f"malformed launcher response: {e}") from None
    if not isinstance(info, dict):
        raise ValueError("connection info is not a JSON object")
    for k in PORT_KEYS + ("comm_port",):
        if not isinstance(info.get(k), int) or not 0 < info[k] < 65536:
            raise ValueError(f"connection info has no valid {k}")
    for k in ("ip", "key"):
        if not isinstance(info.get(k), str) or not info[k]:
            raise ValueError(f"connection info has no {k}")
    return info


async def _run(argv, env, timeout=30.0):
    """Run a Slurm command without blocking the event loop -> (returncode, stdout, stderr)."""
    p = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.DEVNULL,
                                             stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(p.communicate(), timeout)
    except asyncio.TimeoutError:
        p.kill()
        await p.wait()
        return -1, "", f"{argv[0]} timed out after {timeout:.0f} s"
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")


class SlurmProvisioner(KernelProvisionerBase):
    launch_timeout = Float(60.0, config=True, help="seconds from sbatch to the launcher's response")
    response_ip = Unicode("", config=True,
                          help="address the nodes reach this host on (default: its hostname's)")
    port_range = Unicode("0..0", config=True, help="LO..HI for the kernel's ports; 0..0 = any")
    cpus = Unicode("", config=True, help="sbatch --cpus-per-task")
    memory = Unicode("", config=True, help="sbatch --mem")
    partition = Unicode("", config=True, help="sbatch --partition")
    output = Unicode("", config=True, help="sbatch --output (the launcher's log)")
    sbatch_args = List(Unicode(), config=True, help="more sbatch arguments")
    requeue = Bool(True, config=True, help="submit with --requeue: a drained or dead node's "
                                           "kernel moves to another node")
    move_timeout = Float(600.0, config=True,
                         help="seconds a requeued kernel may take to answer from its new node")

    job_id = None
    comm_ip = None
    comm_port = None
    host = None
    _listener = None
    _key = None
    _env = None
    _exit = None
    _moving_since = None
    _released = False

    @default("response_ip")
    def _response_ip_default(self):
        return os.environ.get("CELLVM_SLURM_RESPONSE_IP", "")

    @property
    def has_process(self):
        return self.job_id is not None

    # --- launch ------------------------------------------------------------------------------

    async def pre_launch(self, **kwargs):
        self._key = RSA.generate(KEY_BITS)
        ip = self.response_ip or socket.gethostbyname(socket.gethostname())
        self._listener = socket.socket()
        self._listener.bind((ip, 0))
        self._listener.listen(4)
        self._listener.setblocking(False)
        ns = {"kernel_id": self.kernel_id, "public_key": public_key_b64(self._key),
              "response_address": f"{ip}:{self._listener.getsockname()[1]}",
              "port_range": self.port_range}
        cmd = format_argv(self.kernel_spec.argv, ns)
        kwargs = await super().pre_launch(cmd=cmd, **kwargs)
        env = kwargs["env"]
        env.update(KERNEL_ID=self.kernel_id, RESPONSE_ADDRESS=ns["response_address"],
                   PUBLIC_KEY=ns["public_key"], PORT_RANGE=self.port_range)
        return kwargs

    def _sbatch_argv(self, cmd, env, cwd):
        cpus = env.get("KERNEL_CPUS") or self.cpus
        memory = env.get("KERNEL_MEMORY") or self.memory
        argv = ["sbatch", "--parsable", f"--job-name=cellvm-{self.kernel_id[:8]}"]
        argv += [f"--cpus-per-task={cpus}"] if cpus else []
        argv += [f"--mem={memory}"] if memory else []
        argv += [f"--partition={self.partition}"] if self.partition else []
        argv += [f"--output={self.output}"] if self.output else []
        argv += [f"--chdir={cwd}"] if cwd else []
        argv += ["--requeue"] if self.requeue else ["--no-requeue"]
        # exec: the job's process is the launcher itself, so Slurm's signals reach it.
        return argv + list(self.sbatch_args) + ["--wrap", "exec " + shlex.join(cmd)]

    async def launch_kernel(self, cmd, **kwargs):
        self._env = dict(kwargs.get("env") or os.environ)
        timeout = float(self._env.get("KERNEL_LAUNCH_TIMEOUT") or self.launch_timeout)
        rc, out, err = await _run(self._sbatch_argv(cmd, self._env, kwargs.get("cwd")),
                                  self._env)
        if rc != 0 or not out.strip():
            self._close_listener()
            raise LaunchError(f"sbatch failed (exit {rc}): {err.strip() or out.strip()}")
        self.job_id = out.strip().split(";")[0]
        self.log.info("cellvm-slurm: kernel %s is Slurm job %s", self.kernel_id, self.job_id)
        try:
            info = await self._await_response(timeout)
        except BaseException:
            await self._cancel()
            self._close_listener()
            raise
        # The listener stays open: a requeued job's launcher answers on it again.
        await self._take_info(info)
        return self.connection_info

    async def _take_info(self, info):
        self.comm_ip, self.comm_port = info["ip"], info["comm_port"]
        self.host = (await self._job()).get("BatchHost")
        self.connection_info = {k: info[k] for k in PORT_KEYS}
        self.connection_info.update(ip=info["ip"], key=info["key"].encode(),
                                    transport=info.get("transport", "tcp"),
                                    signature_scheme=info.get("signature_scheme",
                                                              "hmac-sha256"))

    async def _await_response(self, timeout):
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout
        accept = None
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    job = await self._job()
                    raise LaunchError(f"timed out after {timeout:.0f} s waiting for the "
                                      f"launcher of kernel {self.kernel_id}: "
                                      f"{self._describe(job)}; the job was cancelled")
                accept = accept or asyncio.ensure_future(loop.sock_accept(self._listener))
                done, _ = await asyncio.wait({accept}, timeout=min(left, 1.0))
                if not done:
                    # Each second without an answer: has the job ended (failed, cancelled)?
                    job = await self._job()
                    if job.get("JobState", "GONE") not in LIVE_STATES:
                        raise LaunchError(f"kernel {self.kernel_id}'s launcher ended before "
                                          f"answering: {self._describe(job)}")
                    continue
                conn, peer = accept.result()
                accept = None
                try:
                    return decode_response(await self._read_all(conn), self._key)
                except (ValueError, OSError, asyncio.TimeoutError) as e:
                    self.log.warning("cellvm-slurm: ignored a response from %s: %s", peer, e)
        finally:
            if accept is not None:
                accept.cancel()

    @staticmethod
    async def _read_all(conn):
        loop = asyncio.get_running_loop()
        data = b""
        with conn:
            conn.setblocking(False)
            while len(data) <= MAX_RESPONSE:
                chunk = await asyncio.wait_for(loop.sock_recv(conn, 4096), 10)
                if not chunk:
                    return data
                data += chunk
        raise ValueError("response too large")

    # --- the job -----------------------------------------------------------------------------

    async def _job(self):
        """scontrol show job as a dict; {} when Slurm no longer knows the job."""
        if self.job_id is None:
            return {}
        rc, out, _ = await _run(["scontrol", "-o", "show", "job", self.job_id], self._env)
        if rc != 0:
            return {}
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def _describe(self, job):
        if not job:
            return f"Slurm job {self.job_id} is no longer known to Slurm"
        where = f" on {job['NodeList']}" if job.get("NodeList") not in (None, "", "(null)") else ""
        return (f"Slurm job {self.job_id} is {job.get('JobState')}{where} "
                f"(Reason={job.get('Reason')}, ExitCode={job.get('ExitCode')})")

    async def _cancel(self):
        if self.job_id is not None:
            rc, _, err = await _run(["scancel", self.job_id], self._env)
            if rc != 0:
                self.log.warning("cellvm-slurm: scancel %s: %s", self.job_id, err.strip())

    def _close_listener(self):
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    # --- the comm port -----------------------------------------------------------------------

    async def _comm(self, request):
        """Send one request to the launcher's comm port; False if it could not be delivered."""
        if not self.comm_port:
            return False
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(self.comm_ip, self.comm_port), 5)
            w.write(json.dumps(request).encode())
            await w.drain()
            w.write_eof()
            w.close()
            await w.wait_closed()
            return True
        except (OSError, asyncio.TimeoutError) as e:
            self.log.debug("cellvm-slurm: comm %s: %s", request, e)
            return False

    # --- a move: the job requeued, its launcher answering from another node -----------------

    async def _moved(self):
        """The connection info a requeued job's launcher sent, if it came: taken into this
        provisioner and its KernelManager. True when it was."""
        if self._listener is None:
            return False
        while True:
            try:
                conn, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return False
            try:
                info = decode_response(await self._read_all(conn), self._key)
                if info.get("kernel_id", self.kernel_id) != self.kernel_id:
                    raise ValueError(f"it is for kernel {info.get('kernel_id')!r}")
            except (ValueError, OSError, asyncio.TimeoutError) as e:
                self.log.warning("cellvm-slurm: ignored a response from %s: %s", peer, e)
                continue
            old = self.host
            await self._take_info(info)
            km = self.parent
            if hasattr(km, "_reconcile_connection_info"):
                km._close_control_socket()         # it was connected to the old node
                km._reconcile_connection_info(self.connection_info)
            self.log.warning("cellvm-slurm: kernel %s moved from %s to %s (%s:%s), after "
                             "%.1f s", self.kernel_id, old, self.host, info["ip"],
                             info["shell_port"], time.monotonic() - self._moving_since
                             if self._moving_since else 0.0)
            self._moving_since, self._released = None, False
            return True

    async def _moving(self, job):
        """The launcher is gone but Slurm keeps the job (requeued after a drain or a node
        failure): True while the move may still finish."""
        now = time.monotonic()
        if self._moving_since is None:
            self._moving_since = now
            self.log.warning("cellvm-slurm: kernel %s's launcher on %s is gone and %s: "
                             "waiting for it on another node", self.kernel_id, self.host,
                             self._describe(job))
        if job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime" \
                and not self._released:
            # Slurm holds a requeued batch job back a while; a kernel's user is waiting.
            self._released = True
            rc, _, err = await _run(["scontrol", "update", f"jobid={self.job_id}",
                                     "StartTime=now"], self._env)
            if rc != 0:
                self.log.warning("cellvm-slurm: could not release requeued job %s: %s",
                                 self.job_id, err.strip())
        if now - self._moving_since <= self.move_timeout:
            return True
        self.log.error("cellvm-slurm: kernel %s did not answer from a new node within %.0f s "
                       "(%s): cancelled", self.kernel_id, self.move_timeout, self._describe(job))
        await self._cancel()
        return False

    async def poll(self):
        if self.job_id is None:
            return self._exit if self._exit is not None else 0
        await self._moved()
        alive = await self._comm({"signum": 0})
        job = await self._job()
        state = job.get("JobState", "GONE")
        if alive and state in LIVE_STATES:
            return None
        if state in LIVE_STATES and await self._moving(job):
            return None            # requeued, pending, starting on another node
        self._exit = 0 if state == "COMPLETED" else 1
        return self._exit

    async def wait(self):
        while (rc := await self.poll()) is None:
            await asyncio.sleep(0.5)
        return rc

    async def send_signal(self, signum):
        if not await self._comm({"signum": int(signum)}) and signum in (signal.SIGKILL,
                                                                         signal.SIGTERM):
            await self._cancel()

    async def kill(self, restart=False):
        await self._comm({"signum": int(signal.SIGKILL)})
        await self._cancel()

    async def terminate(self, restart=False):
        await self._comm({"signum": int(signal.SIGTERM)})
        await self._cancel()

    async def shutdown_requested(self, restart=False):
        await self._comm({"shutdown": 1})

    async def cleanup(self, restart=False):
        if self.job_id is not None and (await self._job()).get("JobState") in LIVE_STATES:
            await self._cancel()
        self._close_listener()
        self.job_id = self.comm_ip = self.comm_port = self.host = None

    # --- persistence -------------------------------------------------------------------------

    async def get_provisioner_info(self):
        info = await super().get_provisioner_info()
        info.update(job_id=self.job_id, comm_ip=self.comm_ip, comm_port=self.comm_port,
                    host=self.host)
        return info

    async def load_provisioner_info(self, provisioner_info):
        await super().load_provisioner_info(provisioner_info)
        self.job_id = provisioner_info.get("job_id")
        self.comm_ip = provisioner_info.get("comm_ip")
        self.comm_port = provisioner_info.get("comm_port")
        self.host = provisioner_info.get("host")
