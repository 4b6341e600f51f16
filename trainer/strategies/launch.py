"""`Trainer(devices=N)` from a plain `python script.py`: N processes on this machine.

This process becomes rank 0 and goes on training; ranks 1..N-1 are new processes that run
the same command line, started through torch's own elastic multiprocessing (what torchrun
uses to start its workers) with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Each of them builds the same Trainer, finds that environment
and, like a process torchrun started, joins the group. Under torchrun (or an initialised
process group) nothing is started. See docs/distributed.md ("devices=N").
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import time
from typing import Any

from trainer.strategies.base import launched_by_torchrun

__all__ = ["launch_processes"]

log = logging.getLogger("trainer")

#: How long rank 0, at exit, waits for the other ranks to finish before ending them.
EXIT_WAIT_S = 120.0


def launch_processes(devices: int, strategy: Any = "auto") -> None:
    """Start ranks 1..`devices`-1 unless this process already is one of several.

    Raises:
        ValueError: strategy 'single' with several devices, under torchrun with another
            world size, or when there is no script to run again (a notebook, `python -c`),
            before anything is started.
    """
    if devices <= 1:
        return
    if strategy == "single":
        raise ValueError(
            f"Trainer(devices={devices}, strategy='single'): 'single' trains in one process. Expected "
            "strategy='ddp' (or 'auto') to train one model on several processes, 'fsdp' to shard it, or devices=1."
        )
    from torch import distributed as dist

    if launched_by_torchrun() or (dist.is_available() and dist.is_initialized()):
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else int(os.environ["WORLD_SIZE"])
        if world != devices:
            raise ValueError(
                f"Trainer(devices={devices}) under torchrun with {world} process(es) in all. Expected devices "
                f"to match: devices={world} (or leave it out: torchrun already decides), or launch with "
                f"--nproc_per_node={devices}."
            )
        return
    if not dist.is_available():
        raise ValueError(f"Trainer(devices={devices}) needs torch.distributed, which this PyTorch build lacks.")
    command = _command_line(devices)
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

    common = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": str(devices),
        "LOCAL_WORLD_SIZE": str(devices),
        "GROUP_RANK": "0",
        "TORCHELASTIC_RUN_ID": f"trainer-{os.getpid()}",
    }
    others = range(1, devices)
    context = start_processes(
        name="trainer",
        entrypoint=command[0],
        args={index: tuple(command[1:]) for index, _ in enumerate(others)},
        envs={index: {**common, "RANK": str(rank), "LOCAL_RANK": str(rank)} for index, rank in enumerate(others)},
        logs_specs=DefaultLogsSpecs(redirects=Std.NONE, tee=Std.NONE),  # their output goes to this terminal
    )
    os.environ.update(common, RANK="0", LOCAL_RANK="0")
    atexit.register(_finish, context)
    log.info("devices=%d: this process is rank 0; started ranks 1..%d (%s).", devices, devices - 1, " ".join(command))


def _command_line(devices: int) -> list[str]:
    """How this process was started, so the other ranks can run the same."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    started_by = getattr(spec, "name", None) or os.path.basename(sys.argv[0] if sys.argv else "")
    if started_by.split(".")[0] in ("pytest", "_pytest") or started_by == "py.test":
        raise ValueError(
            f"Trainer(devices={devices}) would start {devices - 1} more copies of pytest (the other ranks run "
            "this process's command line again). Expected a training script: run the script with devices=N, "
            f"or have the test start it (`python -m torch.distributed.run --nproc_per_node={devices} script.py`)."
        )
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":  # python -m package.module
        module = spec.name.removesuffix(".__main__")
        return [sys.executable, "-m", module, *sys.argv[1:]]
    script = sys.argv[0] if sys.argv else ""
    if getattr(main, "__file__", None) and script not in ("", "-c", "-") and os.path.isfile(script):
        return [sys.executable, os.path.abspath(script), *sys.argv[1:]]
    raise ValueError(
        f"Trainer(devices={devices}) starts {devices - 1} more process(es) that run this program again, "
        "but it was not started from a script (a notebook, an interactive session or `python -c`). "
        "Expected `python script.py` or `python -m package.module`; or launch the script with "
        f"`torchrun --nproc_per_node={devices} script.py`; in a notebook, train with devices=1."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _finish(context: Any) -> None:
    """At rank 0's exit: wait (bounded) for the other ranks, end any that are left, and say
    which failed."""
    deadline = time.monotonic() + EXIT_WAIT_S
    result = None
    while result is None and time.monotonic() < deadline:
        result = context.wait(timeout=1.0, period=0.2)
    if result is None:
        log.error("devices=N: ranks 1.. did not finish within %.0f s of rank 0's exit; ending them.", EXIT_WAIT_S)
    elif result.is_failed():
        failed = ", ".join(f"rank {index + 1} (exit code {failure.exitcode})" for index, failure in result.failures.items())
        log.error("devices=N: %s failed; its error is printed above.", failed)
    context.close()
