"""`Trainer(devices=N)` from a plain `python script.py`: N processes on this machine.

This process becomes rank 0 and goes on training; ranks 1..N-1 are new processes that run
the same command line, started through torch's own elastic multiprocessing (what torchrun
uses to start its workers) with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Each of them builds the same Trainer, finds that environment
and, like a process torchrun started, joins the group. Under torchrun (or an initialised
process group) nothing is started. See docs/distributed.md ("devices=N").

Ending together: rank 0 watches the others while it runs, and when one fails it aborts its
process group and stops (it would wait for that rank in its next collective: with NCCL, for
minutes); it waits for the others when it exits (bounded) and ends them at once
when it exits on an uncaught exception (they would wait for it in a collective); the others
are started in their own session (torch's choice), so on Linux each asks the kernel to end
it should rank 0 die without running its exit handlers (SIGKILL, a crash). The signal
handlers torch's launcher installs in its caller are put back as they were.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Union

from trainer.strategies.cluster import ClusterEnvironment
from trainer.strategies.devices import check_devices_fit

__all__ = ["launch_processes"]

log = logging.getLogger("trainer")

#: How long rank 0, at exit, waits for the other ranks to finish before ending them.
EXIT_WAIT_S = 120.0
#: The same when rank 0 exits on an uncaught exception: the others are then usually stuck
#: in a collective waiting for it, so they get a short while to end by themselves.
FAILED_WAIT_S = 5.0
#: How often rank 0 looks whether one of the ranks it started has failed.
WATCH_S = 1.0
#: Set in the other ranks' environment: the pid of rank 0, which started them.
PARENT_ENV = "TRAINER_LAUNCHER_PID"
#: What torch's launcher installs handlers for in its caller (TORCHELASTIC_SIGNALS_TO_HANDLE).
_TORCH_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")

_Handler = Union[Callable[[int, Any], Any], int, None]


def launch_processes(devices: int, strategy: Any = "auto", device: str = "auto") -> None:
    """Start ranks 1..`devices`-1 unless this process already is one of several.

    Args:
        devices: the number of processes on this machine (`Trainer(devices=...)`).
        strategy: `Trainer(strategy=...)`, checked against `devices` only.
        device: `Trainer(device=...)`: on CUDA, `devices` must not exceed the visible GPUs.

    Raises:
        ValueError: strategy 'single' with several devices, under torchrun with another
            world size, or when there is no script to run again (a notebook, `python -c`),
            before anything is started.
        RuntimeError: in a rank that a devices=N rank 0 started, when rank 0 is already gone.
    """
    if devices <= 1:
        return
    if strategy == "single":
        raise ValueError(
            f"Trainer(devices={devices}, strategy='single'): 'single' trains in one process. Expected "
            "strategy='ddp' (or 'auto') to train one model on several processes, 'fsdp' to shard it, or devices=1."
        )
    from torch import distributed as dist

    cluster = ClusterEnvironment.detect()
    initialised = dist.is_available() and dist.is_initialized()
    if cluster.kind == "slurm" and cluster.world_size > 1 and not initialised:  # srun started every task
        if devices not in (cluster.world_size, cluster.local_world_size):
            on_node = f" ({cluster.local_world_size} on this node)" if cluster.local_world_size else ""
            raise ValueError(
                f"Trainer(devices={devices}) under srun with {cluster.world_size} task(s) in all{on_node}. Expected "
                f"devices to match the tasks per node (#SBATCH --ntasks-per-node={devices}), or leave it out: srun "
                "already decides."
            )
        return
    if cluster.kind == "torchrun" or initialised:
        world = dist.get_world_size() if initialised else cluster.world_size
        if world != devices:
            raise ValueError(
                f"Trainer(devices={devices}) under torchrun with {world} process(es) in all. Expected devices "
                f"to match: devices={world} (or leave it out: torchrun already decides), or launch with "
                f"--nproc_per_node={devices}."
            )
        if os.environ.get(PARENT_ENV, "").isdigit():  # one of the ranks a devices=N rank 0 started
            _end_with_parent(int(os.environ[PARENT_ENV]))
        return
    if not dist.is_available():
        raise ValueError(f"Trainer(devices={devices}) needs torch.distributed, which this PyTorch build lacks.")
    import torch

    check_devices_fit(devices, str(device), cuda_available=torch.cuda.is_available(), visible=torch.cuda.device_count())
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
    threads = _share_threads(common)
    others = range(1, devices)
    handlers = _signal_handlers()  # empty outside the main thread
    # The kernel's "parent died" signal follows the starting thread: only the main one lives as long as rank 0.
    child = {**common, PARENT_ENV: str(os.getpid())} if handlers else common
    logs = tempfile.mkdtemp(prefix="trainer-devices-")  # torch's per-rank folders (error.json); removed at exit
    try:
        context = start_processes(
            name="trainer",
            entrypoint=command[0],
            args={index: tuple(command[1:]) for index, _ in enumerate(others)},
            envs={index: {**child, "RANK": str(rank), "LOCAL_RANK": str(rank)} for index, rank in enumerate(others)},
            logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=Std.NONE, tee=Std.NONE),  # output: this terminal
        )
    except BaseException:
        shutil.rmtree(logs, ignore_errors=True)
        raise
    finally:
        _restore_signal_handlers(handlers)  # torch's raise SignalException (Ctrl-C would not be KeyboardInterrupt)
    os.environ.update(common, RANK="0", LOCAL_RANK="0")
    if "OMP_NUM_THREADS" in common:  # set by _share_threads: this process's torch threads too
        torch.set_num_threads(int(common["OMP_NUM_THREADS"]))
    watch = _ChildWatch(context)
    watch.start()
    atexit.register(_finish, context, logs, watch)
    log.info("devices=%d: this process is rank 0; started ranks 1..%d (%s); %s.", devices, devices - 1,
             " ".join(command), threads)


def _share_threads(common: dict[str, str]) -> str:
    """Each process's CPU threads, as torchrun sets them: `OMP_NUM_THREADS=1` for every rank
    (this one included) unless the user set `OMP_NUM_THREADS`, which every rank then inherits.
    Otherwise each of the N processes would run as many threads as the machine has cores, N
    times too many: on a CPU several times slower than torchrun; and the thread count decides
    the bits of a CPU reduction (torchrun's weights need torchrun's threads). Returns what the
    launch line reports."""
    chosen = os.environ.get("OMP_NUM_THREADS")
    if chosen:
        return f"OMP_NUM_THREADS={chosen} (yours) in every process"
    common["OMP_NUM_THREADS"] = "1"
    return "OMP_NUM_THREADS=1 in every process, as torchrun sets it (set OMP_NUM_THREADS to choose)"


def _command_line(devices: int) -> list[str]:
    """How this process was started, so the other ranks can run the same."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    started_by = getattr(spec, "name", None) or os.path.basename(sys.argv[0] if sys.argv else "")
    under_pytest = started_by.split(".")[0] in ("pytest", "_pytest") or started_by == "py.test"
    if under_pytest or ("PYTEST_XDIST_WORKER" in os.environ and "pytest" in sys.modules):  # an xdist worker (execnet's main)
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


def _signal_handlers() -> dict[signal.Signals, _Handler]:
    """This process's handlers for the signals torch's launcher takes over (main thread only:
    elsewhere torch does not touch them)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    names = (name for name in _TORCH_SIGNALS if hasattr(signal, name))
    return {sig: signal.getsignal(sig) for sig in (signal.Signals[name] for name in names)}


def _restore_signal_handlers(handlers: dict[signal.Signals, _Handler]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:  # None: installed outside Python, cannot be put back
            signal.signal(sig, handler)


def _end_with_parent(parent: int) -> None:
    """In a rank that rank 0 started: have the kernel end this process when rank 0 dies
    (Linux), so a rank 0 killed without running its exit handlers leaves nothing behind.

    Raises:
        RuntimeError: rank 0 is already gone (there is no group left to join).
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    except (OSError, AttributeError):  # no prctl: rank 0's exit handlers still end this process
        return
    if os.getppid() != parent:
        raise RuntimeError(
            f"devices=N: rank 0 (pid {parent}), which started this process (rank {os.environ.get('RANK')}), "
            "has already exited, so there is no group to join. Expected rank 0 to still be running: its output "
            "above says why it stopped."
        )


def _exiting_on_error() -> bool:
    """True at exit when the program ends on an uncaught exception (Python sets
    `sys.last_value` when it prints the traceback, before running the exit handlers)."""
    return getattr(sys, "last_value", None) is not None


class _ChildWatch(threading.Thread):
    """Rank 0 watches ranks 1..N-1 while it runs (once a second): when one of them fails, rank 0
    would otherwise wait for it in the next collective, with NCCL for the backend's whole
    timeout (minutes), or keep computing until it gets there. So it says which rank failed,
    aborts its process group (NCCL: a collective in flight returns with an error at once) and
    interrupts its own main thread (SIGINT, as Ctrl-C: the Trainer stops at once, outside the
    step's critical section), and the job ends with the failed rank's exit code reported."""

    def __init__(self, context: Any, period_s: float = WATCH_S) -> None:
        super().__init__(name="trainer-devices-watch", daemon=True)
        self.context, self.period_s = context, period_s
        self.stopped = threading.Event()
        self.failure: str | None = None

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            try:
                result = self.context.wait(timeout=0)  # a poll: None while every rank still runs
            except Exception:  # noqa: BLE001 - the context is being closed: nothing left to watch
                return
            if result is None:
                continue
            if result.is_failed() and not self.stopped.is_set():
                self.failure = _failed_ranks(result)
                log.error("devices=N: %s failed while rank 0 is still running; aborting rank 0's process group and "
                          "stopping it (the failed rank's error is printed above).", self.failure)
                _abort_group()
                _interrupt_main()
            return  # every other rank has ended (failed or not): nothing more to watch

    def stop(self) -> None:
        self.stopped.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=2 * self.period_s + 1)


def _failed_ranks(result: Any) -> str:
    return ", ".join(f"rank {index + 1} (exit code {failure.exitcode})" for index, failure in result.failures.items())


def _abort_group() -> None:
    """Abort this process's NCCL communicators (collectives in flight end with an error). Gloo
    needs nothing: a peer's closed connection already fails its collectives."""
    try:
        from torch import distributed as dist

        if dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend_config()):
            dist.distributed_c10d._abort_process_group()
    except Exception as error:  # noqa: BLE001 - best effort: the interrupt below still stops rank 0
        log.warning("devices=N: aborting the process group failed (%s).", error)


def _interrupt_main() -> None:
    """SIGINT to the main thread: a blocking call there (a sleep, a socket wait) is interrupted too."""
    main = threading.main_thread()
    if main.ident is not None and main.is_alive():
        signal.pthread_kill(main.ident, signal.SIGINT)


def _finish(context: Any, logs: str, watch: _ChildWatch | None = None) -> None:
    """At rank 0's exit: wait (bounded) for the other ranks, end any that are left, say
    which failed, and remove torch's log folder. When rank 0 itself failed, the others are
    ended after a few seconds."""
    try:
        if watch is not None:
            watch.stop()
        _wait_and_end(context)
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def _wait_and_end(context: Any) -> None:
    failed_here = _exiting_on_error()
    wait_s = FAILED_WAIT_S if failed_here else EXIT_WAIT_S
    deadline = time.monotonic() + wait_s
    result = None
    try:
        while result is None and time.monotonic() < deadline:
            result = context.wait(timeout=1.0, period=0.2)
    except KeyboardInterrupt:  # Ctrl-C while waiting: end them now
        log.error("devices=N: interrupted while waiting for ranks 1..; ending them.")
        context.close(death_sig=signal.SIGKILL)
        return
    if result is None and failed_here:
        log.error("devices=N: rank 0 failed (its error is printed above); ending ranks 1.. .")
    elif result is None:
        log.error("devices=N: ranks 1.. did not finish within %.0f s of rank 0's exit; ending them.", EXIT_WAIT_S)
    elif result.is_failed():
        log.error("devices=N: %s failed; its error is printed above.", _failed_ranks(result))
    # A rank stuck in a collective only notes SIGTERM (the Trainer stops at a step boundary)
    # and is killed after the grace period; once rank 0 has failed there is nothing to wait for.
    context.close(death_sig=signal.SIGKILL if failed_here else signal.SIGTERM)
