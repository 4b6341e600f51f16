"""A one-node SLURM cluster on this machine, to try a job before queueing it on a real one.

It runs Debian's `slurm-wlm` and `munge` packages (`apt-get install slurm-wlm munge`) as root:
a munge daemon with a key of its own, `slurmctld` and one `slurmd` whose node has this
machine's CPUs, one partition. Everything lives in one folder (configuration, state, logs,
the munge socket, free ports chosen at start), so several clusters can run side by side and
nothing under /etc is touched. The commands (`sbatch`, `srun`, `squeue`, `scancel`,
`scontrol`) find it through `SLURM_CONF`:

    python -m tests.helpers.slurm_cluster start /tmp/cluster     # prints the SLURM_CONF line
    export SLURM_CONF=/tmp/cluster/slurm.conf
    sbatch --requeue --signal=USR1@90 job.sh
    python -m tests.helpers.slurm_cluster stop /tmp/cluster      # cancels the jobs, ends the daemons

`start` returns once `sinfo` says the node is idle. `stop` ends every process the cluster
started, its jobs' included (found by the marker variable they all carry, then by process
id), and with `--lifetime` a small watcher stops the cluster when the process that started
it ends or after that many seconds, whichever comes first (the test suite uses this).
Standard library only: the file can be copied out of the repository and used as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Cluster", "unavailable"]

#: The variable every process of a cluster carries (daemons, job steps, tasks): its folder.
MARKER = "LOOPWRIGHT_SLURM_CLUSTER"
DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "srun", "sinfo", "squeue", "scancel", "scontrol", "mungekey")


def unavailable() -> str | None:
    """Why a cluster can't be started here (None: it can)."""
    if not sys.platform.startswith("linux"):
        return f"a SLURM cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the SLURM daemons run as root here and this process is not root"
    missing = [name for name in (*DAEMONS, *COMMANDS) if _which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: install Debian's packages with `apt-get install slurm-wlm munge`"
    try:  # the node is named after this machine, and jobs reach their rank 0 by that name
        socket.gethostbyname(socket.gethostname())
    except OSError:
        return f"this machine's name {socket.gethostname()!r} does not resolve to an address (add it to /etc/hosts)"
    return None


class Cluster:
    """The cluster in `directory` (made if missing). `start()`, `stop()`, and `env` for the
    commands (SLURM_CONF and the marker set)."""

    def __init__(self, directory: Path | str, cpus: int | None = None) -> None:
        self.directory = Path(directory).resolve()
        self.cpus = cpus or len(os.sched_getaffinity(0))
        self.node = socket.gethostname()
        self.conf = self.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SLURM_CONF=str(self.conf), **{MARKER: str(self.directory)})
        return env

    # ----------------------------------------------------------------------- starting
    def start(self, timeout: float = 60.0, lifetime: float | None = None, owner: int | None = None) -> None:
        """Write the configuration, start munged, slurmctld and slurmd, and wait until the node
        is idle; with `lifetime` or `owner`, a watcher stops the cluster after that many seconds
        or once the process `owner` has ended. Raises RuntimeError naming the daemon (and its
        log's end) if one fails."""
        reason = unavailable()
        if reason:
            raise RuntimeError(f"Can't start a SLURM cluster: {reason}.")
        for sub in ("munge", "state", "spool", "log"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory / "munge", 0o700)
        key = self.directory / "munge" / "munge.key"
        if not key.exists():
            _run(["mungekey", "--create", f"--keyfile={key}"])
        os.chmod(key, 0o600)
        ctld_port, slurmd_port = _free_port(), _free_port()
        self.conf.write_text(self._config(ctld_port, slurmd_port))
        if lifetime is not None or owner is not None:
            self._watch(owner, lifetime)
        munge = self.directory / "munge"
        self._daemon("munged", ["munged", "-F", "--force", f"--key-file={key}", f"--socket={munge / 'socket'}",
                                f"--pid-file={munge / 'munged.pid'}", f"--log-file={self.directory / 'log' / 'munged.log'}",
                                f"--seed-file={munge / 'seed'}"])
        _wait(lambda: (munge / "socket").exists(), timeout, "munged did not open its socket", self._logs)
        self._daemon("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
        self._daemon("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        _wait(self.ready, timeout, "the node did not become idle", self._logs)

    def ready(self) -> bool:
        """Whether `sinfo` says the node is idle."""
        done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True, timeout=30, check=False)
        for pid_file in self.directory.glob("*.pid"):
            if not _alive(int(pid_file.read_text())):
                raise RuntimeError(f"{pid_file.stem} exited during start-up.\n{self._logs()}")
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def _config(self, ctld_port: int, slurmd_port: int) -> str:
        d = self.directory
        first_job = random.randint(1000, 9_000_000)  # clusters side by side give their jobs different ids (ports)
        return f"""# Written by tests/helpers/slurm_cluster.py: a one-node cluster in {d}
ClusterName=loopwright
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d / "munge" / "socket"},cred_expire=5
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "log" / "slurmctld.log"}
SlurmdLogFile={d / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
FirstJobId={first_job}
KillWait=10
InactiveLimit=0
MinJobAge=600
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""

    def _daemon(self, name: str, command: list[str]) -> None:
        log = open(self.directory / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the daemon keeps it)
        process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=self.directory)
        log.close()
        (self.directory / f"{name}.pid").write_text(str(process.pid))

    def _watch(self, owner: int | None, lifetime: float | None) -> None:
        """A detached watcher: stops the cluster when `owner` ends or after `lifetime` seconds."""
        command = [sys.executable, str(Path(__file__).resolve()), "watch", str(self.directory)]
        command += [f"--owner={owner}"] if owner is not None else []
        command += [f"--lifetime={lifetime:g}"] if lifetime is not None else []
        process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        (self.directory / "watcher.pid").write_text(str(process.pid))

    def _logs(self) -> str:
        parts = []
        for log in sorted((self.directory / "log").glob("*")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    # ----------------------------------------------------------------------- stopping
    def stop(self, grace: float = 10.0) -> list[int]:
        """Cancel the jobs, end the daemons and every process that carries this cluster's
        marker (SIGTERM, then SIGKILL after `grace` seconds); returns the ids it signalled."""
        if self.conf.exists() and _which("scancel"):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=10, check=False)
        pids = self._processes()
        me = {os.getpid(), os.getppid()}
        pids = [pid for pid in pids if pid not in me]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in pids:  # the daemons this process started: reaped, not left as zombies
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            pids = [pid for pid in pids if _alive(pid)]
            if not pids:
                break
        for pid_file in self.directory.glob("*.pid"):
            pid_file.unlink(missing_ok=True)
        return pids

    def _processes(self) -> list[int]:
        """The daemons (their pid files) and every process whose environment names this cluster."""
        found: set[int] = set()
        for pid_file in self.directory.glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                found.add(int(pid_file.read_text()))
        needle = f"{MARKER}={self.directory}\0".encode()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if needle in (proc / "environ").read_bytes() + b"\0":
                        found.add(int(proc.name))
        return sorted(found)


# --------------------------------------------------------------------------- helpers
def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _run(command: list[str]) -> None:
    command = [_which(command[0]) or command[0], *command[1:]]
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait(ready: object, timeout: float, what: str, logs: object) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise RuntimeError(f"SLURM cluster: {what} within {timeout:g} s.\n{logs()}")  # type: ignore[operator]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.slurm_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop", "watch"))
    parser.add_argument("directory", nargs="?", default="/tmp/loopwright-slurm")
    parser.add_argument("--cpus", type=int, default=None, help="the node's CPUs (default: this machine's)")
    parser.add_argument("--lifetime", type=float, default=None, help="seconds after which the cluster stops by itself")
    parser.add_argument("--owner", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cluster = Cluster(args.directory, args.cpus)
    if args.action == "start":
        cluster.start(lifetime=args.lifetime)
        print(f"SLURM cluster ready ({cluster.cpus} CPUs on node {cluster.node}).\nexport SLURM_CONF={cluster.conf}")
    elif args.action == "stop":
        left = cluster.stop()
        print("stopped" if not left else f"still running after SIGKILL: {left}")
    else:  # watch: stop the cluster when the owner ends or the lifetime is over
        deadline = time.monotonic() + (args.lifetime or float("inf"))
        while time.monotonic() < deadline and (args.owner is None or _alive(args.owner)):
            time.sleep(1.0)
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
