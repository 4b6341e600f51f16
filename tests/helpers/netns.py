"""Two machines on one: two Linux network namespaces joined by a veth pair (10.213.0.1 and
10.213.0.2), each with its own loopback, so processes in one reach the other only through
the pair, as two hosts on a network do. Needs root and iproute2 (`ip`).

    with two_hosts() as hosts:          # [Host(name, address, interface), Host(...)]
        subprocess.Popen(hosts[0].wrap(["python", "..."]))

Names carry this process's id, so concurrent test runs don't meet. On leaving, every process
still running in a namespace is killed (by the ids `ip netns pids` gives) and both are deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Host", "two_hosts", "unavailable"]

SUBNET = "10.213.0"


@dataclass(frozen=True)
class Host:
    name: str  # the namespace
    address: str
    interface: str

    def wrap(self, command: list[str]) -> list[str]:
        """`command` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *command]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> str | None:
    """Why two namespaces can't be made here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed: `apt-get install iproute2`"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"lwprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed here: {made.stderr.strip()}"
    return None


@contextlib.contextmanager
def two_hosts() -> Iterator[list[Host]]:
    tag = f"lw{os.getpid()}"
    hosts = [Host(f"{tag}a", f"{SUBNET}.1", f"{tag}a"[:15]), Host(f"{tag}b", f"{SUBNET}.2", f"{tag}b"[:15])]
    try:
        for host in hosts:
            _ip("netns", "add", host.name)
        _ip("link", "add", hosts[0].interface, "netns", hosts[0].name, "type", "veth",
            "peer", "name", hosts[1].interface, "netns", hosts[1].name)
        for host in hosts:
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", host.interface)
            _ip("-n", host.name, "link", "set", "lo", "up")
            _ip("-n", host.name, "link", "set", host.interface, "up")
        yield hosts
    finally:
        for host in hosts:
            kill_inside(host.name)
            _ip("netns", "del", host.name, check=False)  # the veth pair goes with it


def kill_inside(namespace: str) -> None:
    """SIGKILL every process still running in `namespace`, by id."""
    for _ in range(3):
        listed = _ip("netns", "pids", namespace, check=False).stdout.split()
        if not listed:
            return
        for pid in listed:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
