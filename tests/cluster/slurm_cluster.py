"""A real three-node Slurm cluster on this one machine, for the tests (docs/slurm.md).

Each node is a network namespace with its own address (a veth pair to a bridge in the root
namespace) and its own hostname (a UTS namespace), running its own slurmd; slurmctld and munged
run in the root namespace, on the bridge's address. The nodes share the filesystem, as an NFS
mount would give a real cluster: `shared` is a directory every node and the submitter see.
Everything lives in a private directory: the munge key and socket, slurm.conf, spool and state
directories, the daemons' logs. Nothing under /etc is read or written; commands find the
cluster through SLURM_CONF (`cluster.env()`).

    with SlurmCluster() as c:
        out = c.run_job("n2", "hostname")

stop() kills by pid every process it started and every process left in a node's namespace
(jobs included), then removes the namespaces, the bridge and the directory.
"""
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from hosts import Hosts

NODES = ("n1", "n2", "n3")
START_BUDGET = 30.0
LOG_TAIL = 40


class ClusterError(RuntimeError):
    """The cluster did not do what a helper waited for; the message carries the daemons' logs."""


def _run(argv, check=True, env=None, timeout=30):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def _path(path):
    """PATH with the sbin directories the daemons live in (a user's PATH may lack them)."""
    parts = (path or "/usr/bin:/bin").split(":")
    return ":".join(parts + [d for d in ("/usr/sbin", "/sbin") if d not in parts])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent may not have reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _tail(path, n=LOG_TAIL):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return f"({e})"
    return "\n".join(lines[-n:])


class SlurmCluster:
    def __init__(self, nodes=NODES, budget=START_BUDGET, base=None):
        self.nodes = tuple(nodes)
        self.budget = budget
        self._base_parent = base
        self.dir = None
        self.procs = {}          # name -> Popen (munged, slurmctld, slurmd-<node>)
        self.hosts = Hosts(self.nodes)
        self.netns = {}          # node -> netns name
        self.addr = {}           # node -> IPv4 address
        self.bridge = None
        self.ctl_addr = None
        self.start_seconds = None
        self.stop_seconds = None

    # --- start -------------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        require_tools()
        t0 = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix="cellvm-slurm.", dir=self._base_parent))
        os.chmod(self.dir, 0o700)
        for sub in ("munge", "state", "log", "spool", "shared", "etc"):
            (self.dir / sub).mkdir(mode=0o700)
        # Jobs run as root here, but the store is meant for every node's user: world-readable.
        os.chmod(self.shared, 0o755)
        self._network()
        self._munge()
        self._write_conf()
        self._start_ctld()
        for node in self.nodes:
            self._start_slurmd(node)
        self.wait_states({n: "idle" for n in self.nodes}, self.budget - (time.monotonic() - t0),
                         what="every node idle")
        self.start_seconds = time.monotonic() - t0

    @property
    def shared(self):
        """The directory every node sees (the store a real cluster mounts over NFS)."""
        return self.dir / "shared"

    @property
    def conf(self):
        return self.dir / "etc" / "slurm.conf"

    def env(self, base=None):
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = _path(env.get("PATH"))
        return env

    def _network(self):
        self.hosts.up()
        self.netns, self.addr = self.hosts.netns, self.hosts.addr
        self.bridge, self.ctl_addr = self.hosts.bridge, self.hosts.bridge_addr

    def _spawn(self, name, argv, node=None, hostname=None):
        log = open(self.dir / "log" / f"{name}.out", "wb")
        if node:
            argv = self.hosts.prefix(node, hostname) + argv
        elif hostname:
            # Its own hostname (a UTS namespace): slurmctld checks it is SlurmctldHost.
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname] + argv
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             env=self.env(), start_new_session=True)
        log.close()
        self.procs[name] = p
        return p

    def _munge(self):
        d = self.dir / "munge"
        key = d / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        self.munge_socket = d / "munge.socket"
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--log-file={d / 'munged.log'}",
                               f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'seed'}"])
        self._wait(lambda: self.munge_socket.exists(), 10, "munged's socket")

    def _write_conf(self):
        self.ctld_port, self.slurmd_port = _free_port(), _free_port()
        d = self.dir
        addrs = ",".join(self.addr[n] for n in self.nodes)
        names = ",".join(self.nodes)
        self.conf.write_text(f"""\
# Written by tests/cluster/slurm_cluster.py for one test cluster.
ClusterName=cellvmtest
SlurmctldHost=ctl({self.ctl_addr})
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
# A killed node is seen quickly: pinged every SlurmdTimeout/3, down after SlurmdTimeout.
SlurmdTimeout=6
SlurmctldTimeout=10
MessageTimeout=5
# A job's grace between SIGTERM and SIGKILL: a requeued kernel's suspend fits well within it.
KillWait=20
MinJobAge=300
InactiveLimit=0
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'state'}/slurmctld.pid
SlurmdPidFile={d / 'spool'}/slurmd.%n.pid
SlurmctldLogFile={d / 'log'}/slurmctld.log
SlurmdLogFile={d / 'log'}/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName={names} NodeAddr={addrs} CPUs=2 RealMemory=1024 State=UNKNOWN
PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP
""")

    def _start_ctld(self):
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)], hostname="ctl")

    def _start_slurmd(self, node):
        (self.dir / "spool" / node).mkdir(exist_ok=True)
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)],
                    node=node, hostname=node)

    # --- waiting and reporting ---------------------------------------------------------------

    def logs(self):
        """The tail of every daemon's log and output, for an error message."""
        out = []
        for p in sorted((self.dir / "log").glob("*")) + [self.dir / "munge" / "munged.log"]:
            out.append(f"--- {p.name} ---\n{_tail(p)}")
        dead = [f"{n} (exit {p.poll()})" for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            out.append("--- exited daemons: " + ", ".join(dead))
        return "\n".join(out)

    def _wait(self, cond, budget, what):
        deadline = time.monotonic() + budget
        while True:
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {budget:.0f} s waiting for {what}\n"
                                   f"{self.logs()}")
            time.sleep(0.2)

    def slurm(self, *argv, check=True, timeout=30):
        """Run a Slurm command against this cluster; returns the CompletedProcess."""
        return _run(list(argv), check=check, env=self.env(), timeout=timeout)

    def node_states(self):
        """{node: state} as sinfo prints it (idle, drained, down*, ...; '*' = not responding)."""
        p = self.slurm("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        if p.returncode != 0:
            return {}
        return dict(line.split() for line in p.stdout.splitlines() if line.strip())

    def wait_states(self, want, budget=20, what=None):
        """Wait until each node's state matches want[node] (a regex matched at its start)."""
        def ok():
            st = self.node_states()
            return st if all(re.match(rx, st.get(n, "")) for n, rx in want.items()) else None
        try:
            return self._wait(ok, max(budget, 0.1), what or f"nodes {want}")
        except ClusterError as e:
            raise ClusterError(f"{e}\n--- sinfo: {self.node_states()}") from None

    # --- jobs --------------------------------------------------------------------------------

    def submit(self, command, node=None, args=(), output=None):
        """sbatch a shell command; returns the job id. node pins it (-w)."""
        out = output or self.shared / "slurm-%j.out"
        argv = ["sbatch", "--parsable", f"--output={out}", f"--chdir={self.shared}"]
        if node:
            argv.append(f"--nodelist={node}")
        argv += list(args) + ["--wrap", command]
        return self.slurm(*argv).stdout.strip().split(";")[0]

    def run_job(self, node, command, budget=30):
        """Run a shell command as a batch job (on node, unless None), wait for it to end;
        returns its output. (sbatch --wait polls every 2 s and more: this polls scontrol.)"""
        out = self.shared / f"run-{node}-{time.monotonic_ns()}.out"
        jobid = self.submit(command, node=node, output=out)
        job = self.wait_job(jobid, r"COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY",
                            budget)
        if job["JobState"] != "COMPLETED":
            raise ClusterError(f"job {jobid} ended {job['JobState']}: {job}\n{_tail(out)}")
        return out.read_text()

    def job(self, jobid):
        """scontrol show job as a dict ({} once the job is forgotten)."""
        p = self.slurm("scontrol", "-o", "show", "job", str(jobid), check=False)
        if p.returncode != 0 or not p.stdout.strip():
            return {}
        return dict(kv.split("=", 1) for kv in p.stdout.split() if "=" in kv)

    def wait_job(self, jobid, state, budget=20):
        """Wait until the job's JobState matches state (a regex); returns the job's dict."""
        def ok():
            j = self.job(jobid)
            return j if re.fullmatch(state, j.get("JobState", "")) else None
        try:
            return self._wait(ok, budget, f"job {jobid} in state {state}")
        except ClusterError as e:
            raise ClusterError(f"{e}\n--- job: {self.job(jobid)}") from None

    def drain(self, node, reason="test"):
        self.slurm("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node):
        self.slurm("scontrol", "update", f"nodename={node}", "state=resume")

    def requeue(self, jobid):
        """Requeue the job (unless Slurm already did, as after its node failed) and let it start
        at once: Slurm gives a requeued batch job a BeginTime a while ahead (its Reason reads
        BeginTime), which would keep it pending for minutes on a cluster of idle nodes."""
        if self.job(jobid).get("JobState") in ("RUNNING", "SUSPENDED", "COMPLETED", "FAILED"):
            self.slurm("scontrol", "requeue", str(jobid))
        self.slurm("scontrol", "update", f"jobid={jobid}", "StartTime=now")

    def node_pids(self, node):
        """Every process in the node's network namespace: its slurmd and its jobs."""
        return self.hosts.pids(node)

    def kill_node(self, node):
        """The node dies: every process in its namespace gets SIGKILL (slurmd, steps, jobs)."""
        self.hosts.kill(node)
        p = self.procs.get(f"slurmd-{node}")
        if p:
            p.wait(timeout=10)

    def restart_node(self, node):
        """Start the node's slurmd again (after kill_node)."""
        self._start_slurmd(node)

    # --- stop --------------------------------------------------------------------------------

    def pids(self):
        """Every pid this cluster owns now: its daemons and whatever runs in its namespaces."""
        out = {p.pid for p in self.procs.values() if p.poll() is None}
        for node in self.netns:
            out.update(self.node_pids(node))
        return out

    def stop(self):
        t0 = time.monotonic()
        for node in list(self.netns):
            self.kill_node(node)
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.hosts.down()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.stop_seconds = time.monotonic() - t0


MISSING = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "nsenter", "unshare", "ip")
           if shutil.which(t, path=_path(os.environ.get("PATH"))) is None]


def require_tools():
    """Raise with the fix when Slurm or munge is not installed (scripts/deps.sh installs them)."""
    if MISSING:
        raise ClusterError(f"missing {', '.join(MISSING)}: run scripts/deps.sh (slurm-wlm, munge)")


@contextlib.contextmanager
def exported(cluster):
    """SLURM_CONF in this process's environment, for what runs Slurm's commands with it (the
    cellvm-slurm provisioner passes the kernel's environment to sbatch); restored after."""
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
