"""Test hosts on this one machine: each a network namespace with its own address (a veth pair to
a bridge in the root namespace, which holds the bridge's address) and, for what runs there, its
own hostname (a UTS namespace). The hosts share the filesystem, as an NFS mount would give real
ones: nsenter joins only the network namespace (`ip netns exec` would make a mount namespace).

    with Hosts(("a", "b")) as h:
        subprocess.run(h.prefix("a") + ["hostname"])      # prints a

down() kills by pid every process left in a host's namespace, then removes the namespaces and
the bridge. Traffic goes only to the bridge's and the hosts' addresses (10.77.N.0/24).
"""
import contextlib
import fcntl
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

# 10.77.N.0/24, one N per Hosts alive at once (pytest-xdist runs them side by side).
NET_PREFIX = "10.77"
LOCK = Path(tempfile.gettempdir()) / "cellvm-hosts-net.lock"


class HostsError(RuntimeError):
    pass


def run(argv, check=True, env=None, timeout=30):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise HostsError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
    return p


class Hosts:
    def __init__(self, names):
        self.names = tuple(names)
        self.netns = {}          # host -> netns name
        self.addr = {}           # host -> IPv4 address
        self.veths = []          # the root namespace's ends
        self.bridge = None
        self.bridge_addr = None

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        LOCK.touch(exist_ok=True)
        with open(LOCK) as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            net = self._pick_net()
            tag = f"{net:03d}"
            self.bridge = f"cvh{tag}br"
            self.bridge_addr = f"{NET_PREFIX}.{net}.1"
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            run(["ip", "addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge])
            run(["ip", "link", "set", self.bridge, "up"])
            for i, host in enumerate(self.names, 1):
                ns, veth = f"cvh{tag}{host}", f"cvh{tag}v{i}"
                run(["ip", "netns", "add", ns])
                self.netns[host] = ns
                self.addr[host] = f"{NET_PREFIX}.{net}.{10 + i}"
                run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                     "netns", ns])
                self.veths.append(veth)
                run(["ip", "link", "set", veth, "master", self.bridge, "up"])
                nsx = ["ip", "-n", ns]
                run(nsx + ["addr", "add", f"{self.addr[host]}/24", "dev", "eth0"])
                run(nsx + ["link", "set", "eth0", "up"])
                run(nsx + ["link", "set", "lo", "up"])

    @staticmethod
    def _pick_net():
        used = set(re.findall(rf"inet {re.escape(NET_PREFIX)}\.(\d+)\.",
                              run(["ip", "-4", "-o", "addr"]).stdout))
        free = [n for n in range(1, 255) if str(n) not in used]
        if not free:
            raise HostsError(f"no free {NET_PREFIX}.N.0/24 network")
        return random.choice(free)

    def prefix(self, host, hostname=None):
        """argv that runs the rest in host's namespace, named hostname (default: host). Both
        tools exec, so the command keeps their pid."""
        name = hostname or host
        return (["nsenter", f"--net=/run/netns/{self.netns[host]}",
                 "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name])

    def pids(self, host):
        """Every process in host's network namespace."""
        p = run(["ip", "netns", "pids", self.netns[host]], check=False)
        return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []

    def kill(self, host):
        """The host dies: every process in its namespace gets SIGKILL."""
        for _ in range(20):
            pids = self.pids(host)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def down(self):
        for host, ns in list(self.netns.items()):
            self.kill(host)
        # The veths go first and by name: a namespace's are destroyed only once the kernel
        # cleans the namespace up, later than `ip netns delete` returns.
        for veth in self.veths:
            run(["ip", "link", "delete", veth], check=False)
        self.veths = []
        for host, ns in list(self.netns.items()):
            run(["ip", "netns", "delete", ns], check=False)
            del self.netns[host]
        if self.bridge:
            run(["ip", "link", "delete", self.bridge], check=False)
            self.bridge = None
