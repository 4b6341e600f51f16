"""Starting a worker script under `torchrun` on this machine (Gloo on CPU), as the distributed
tests do: without the launcher variables a surrounding job may have set, one thread per process,
and the repository on the path; a run past its time limit is killed with every worker (torchrun
starts its workers in sessions of their own) and fails the test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def torchrun_command(script: Path, *args: str, nproc: int = 2, options: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *options,
            str(script), *args]


def run_torchrun(script: Path, *args: str, cwd: Path, timeout: float = 240, nproc: int = 2,
                 options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The finished run (its return code and output); past `timeout` seconds the launcher and
    its workers are killed and the test fails, saying it hung. `options`: more of torchrun's
    own (`"--max-restarts=1"`), before the script."""
    command = torchrun_command(script, *args, nproc=nproc, options=options)
    process = subprocess.Popen(command, cwd=cwd, env=torchrun_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"torchrun {' '.join(args)} still ran after {timeout:g} s (a hang):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *_descendants(int(child))]
    return found
