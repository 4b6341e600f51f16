"""Collectives that end with a name: `DDP(timeout=...)` / `FSDP(timeout=...)`.

With a timeout the process group is made with it (`init_process_group(timeout=...)`), so
every collective, the Trainer's and DDP's/FSDP's own, fails after that long instead of the
backend's 10 to 30 minutes. What this module adds:

- **a name**: a collective the Trainer issues (the barrier around a save, an agreed stop or
  skip, a metric reduction, a broadcast) runs through `CollectiveGuard.run`; when it fails,
  the error says what this rank was waiting in (the strategy method and the Trainer code that
  called it), for how long, and what became of the other ranks. A failure inside DDP's or
  FSDP's own collectives (the gradient all-reduce in backward) gets the same explanation
  when fit or an evaluation ends on it (`explain`);
- **who did not arrive**: the rank that gives up writes into the job's key-value store (the
  one the process group was formed with) and waits a few seconds for the others to answer:
  a rank that gave up too says where it waited; a rank that never arrived answers from its
  watchdog thread with where its main thread was (`training_step`, line ...);
- **the job ends everywhere**: each rank runs a watchdog thread that polls the store once a
  second. When another rank has given up, a rank that is not itself failing logs where it
  was, answers, and ends its process (exit code 1) within a couple of seconds, so a rank
  stuck outside any collective (a hang in user code, a very slow step) does not keep the job
  alive after the others failed, whatever launched it. A collective that outlives its
  timeout by `SLACK_S` (a backend that did not raise) ends the process the same way, and so
  does a store that has not answered for the timeout (rank 0, which holds it, is gone).

The watchdog exists only when a timeout was given: without one nothing here runs.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import math
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, TypeVar

__all__ = ["CollectiveError", "CollectiveGuard", "parse_timeout", "looks_like_collective_failure"]

log = logging.getLogger("trainer")

T = TypeVar("T")

#: How long a rank that gave up waits for the others to say where they were.
ANSWER_S = 3.0
#: How often the watchdog looks at the store.
POLL_S = 0.5
#: A collective still waiting this long after its timeout (the backend did not raise) ends the process.
SLACK_S = 10.0
#: Store keys (the store is the process group's, shared by every rank of the job).
_PREFIX = "trainer/collective/"

_STRATEGY_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(__import__("torch").__file__ or ""))
_MARKERS = re.compile(r"timed out|timeout|connection (closed|reset|refused)|broken pipe|gloo|nccl|socket|peer", re.I)


class CollectiveError(RuntimeError):
    """A collective failed or timed out; the message names what this rank waited in, how
    long, and which ranks did not arrive (and where they were, when they could answer)."""


def parse_timeout(value: Any, owner: str) -> datetime.timedelta | None:
    """`DDP(timeout=...)` / `FSDP(timeout=...)`: seconds (int or float) or a `timedelta`, > 0.

    Raises:
        ValueError: anything else, naming `owner` and the accepted values.

    Example:
        >>> parse_timeout(90, "DDP")
        datetime.timedelta(seconds=90)
    """
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = float("nan")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{owner}(timeout=...) expected a positive number of seconds (int or float) or a datetime.timedelta, "
            f"or None for the backend's default (NCCL 10 min, Gloo 30 min). Received: {value!r} of type "
            f"{type(value).__name__}."
        )
    return datetime.timedelta(seconds=seconds)


def looks_like_collective_failure(error: BaseException | None) -> bool:
    """A backend's error for a collective that timed out or lost a peer (not a user's error)."""
    if error is None or isinstance(error, CollectiveError) or not isinstance(error, RuntimeError):
        return False
    from torch import distributed as dist

    return isinstance(error, getattr(dist, "DistError", ())) or bool(_MARKERS.search(str(error)))


class CollectiveGuard:
    """Names the Trainer's collectives, explains their failures and runs the watchdog
    (see the module's docstring). One per process group the strategy uses."""

    def __init__(self, rank: int, world_size: int, timeout: datetime.timedelta, owner: str) -> None:
        self.rank, self.world_size, self.timeout, self.owner = rank, world_size, timeout, owner
        self._store: Any = None
        self._current: tuple[str, float] | None = None  # (operation, monotonic start) while waiting
        self._failing = False  # this rank is explaining its own failure: the watchdog stands down
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner_thread = threading.get_ident()

    @property
    def seconds(self) -> float:
        return self.timeout.total_seconds()

    # ---------------------------------------------------------------- lifecycle
    def start(self, store: Any) -> None:
        """Watch the job's store (a connection of our own, with short waits); idempotent."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._store is None:
            try:
                self._store = store.clone() if hasattr(store, "clone") else store
                self._store.set_timeout(datetime.timedelta(seconds=2))
            except Exception as error:  # noqa: BLE001 - no watchdog is better than no run
                log.warning("No collective watchdog (the process group's store can't be reached: %s).", error)
                self._store = None
                return
            atexit.register(self.stop)  # a run that ends without teardown (an evaluation): stopped at exit
        self._stop.clear()
        self._owner_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, name="trainer-collective-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Before the process group is released (a normal exit): nothing left to watch."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * POLL_S + 2)
        self._thread = None

    # -------------------------------------------------------------- collectives
    def run(self, operation: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`function(*args, **kwargs)`, a collective; its failure raises `CollectiveError`
        naming `operation` and the Trainer code that asked for it."""
        started = time.monotonic()
        self._current = (operation, started)
        try:
            return function(*args, **kwargs)
        except RuntimeError as error:
            if not looks_like_collective_failure(error):
                raise
            chain, caller = _caller(sys._getframe(1))
            shown = operation if chain == "a collective" else chain if chain.endswith(operation) else f"{chain} ({operation})"
            what = shown if caller == "?" else f"{shown}, called from {caller}"  # "?": no Python caller (atexit)
            raise CollectiveError(self._diagnose(what, time.monotonic() - started, error)) from error
        finally:
            self._current = None

    def explain(self, error: BaseException | None) -> CollectiveError | None:
        """For a failure that escaped the Trainer's own collectives (DDP's gradient all-reduce
        in backward, FSDP's gathers): the same explanation, or None for any other error."""
        if error is None or not looks_like_collective_failure(error) or not _raised_by_torch_distributed(error):
            return None
        what = _where_raised(error.__traceback__)
        return CollectiveError(self._diagnose(what, None, error))

    # ------------------------------------------------------------------ diagnosis
    def _diagnose(self, what: str, waited: float | None, error: BaseException) -> str:
        """Tell the other ranks this one gave up, hear where they were, compose the message."""
        self._failing = True
        answers = self._ask_others(what)
        took = f" after {waited:.1f} s" if waited is not None else ""
        backend = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        backend = re.sub(r"^\[[^\]]*\]\s*:?\s*", "", backend)  # the backend's source location
        return (
            f"Rank {self.rank} of {self.world_size} stopped waiting{took} in {what}, under "
            f"{self.owner}(timeout={self.seconds:g}): {answers}. The job ends on every rank. Backend: {backend}. "
            f"If the rank that did not arrive was only slow (a long save, a slow step), raise {self.owner}(timeout=...)."
        )

    def _ask_others(self, what: str) -> str:
        store = self._store
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        if store is None:
            return "the other ranks could not be asked (no store)"
        try:
            store.set(f"{_PREFIX}failed/{self.rank}", what)
            store.add(f"{_PREFIX}failed", 1)
        except Exception:  # noqa: BLE001 - rank 0 (which holds the store) is gone
            return "the other ranks could not be asked: rank 0's store is unreachable (rank 0 has exited or is unreachable)"
        answers: dict[int, str] = {}
        deadline = time.monotonic() + ANSWER_S
        while len(answers) < len(others) and time.monotonic() < deadline:
            for rank in others:
                if rank not in answers:
                    answer = _read(store, rank)
                    if answer is not None:
                        answers[rank] = answer
            time.sleep(0.05)
        parts = []
        for rank in others:
            answer = answers.get(rank)
            if answer is None:
                parts.append(f"rank {rank} did not answer (it has exited, or is stuck outside Python)")
            elif answer.startswith("failed:"):
                parts.append(f"rank {rank} gave up too (waiting in {answer.removeprefix('failed:')})")
            else:
                parts.append(f"rank {rank} did not arrive: it was {answer.removeprefix('at:')}")
        return "; ".join(parts) if parts else "no other rank"

    # -------------------------------------------------------------------- watchdog
    def _watch(self) -> None:
        unreachable_since: float | None = None
        while not self._stop.wait(POLL_S):
            if self._failing:
                continue
            current = self._current
            if current is not None and time.monotonic() - current[1] > self.seconds + SLACK_S:
                self._end(self._diagnose(f"{current[0]} (the backend did not end it)", time.monotonic() - current[1],
                                         TimeoutError("no answer from the backend")))
                return
            try:
                someone_failed = self._store.check([f"{_PREFIX}failed"])
            except Exception:  # noqa: BLE001 - the store is gone: rank 0, which holds it, exited
                # Every rank meets at exit, so a store gone for longer than the timeout means rank 0
                # (or its machine) died: no collective can succeed again, and a rank stuck outside
                # one (NCCL's watchdog only ends ranks waiting in one) would keep its GPUs forever.
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > max(self.seconds, 2 * POLL_S):
                    self._end_unreachable(time.monotonic() - unreachable_since)
                    return
                continue
            unreachable_since = None
            if someone_failed and not self._failing:
                self._answer()
                return

    def _answer(self) -> None:
        """Another rank gave up: say where this one is, then end it unless it fails by itself."""
        frame = sys._current_frames().get(self._owner_thread)
        current = self._current
        where = f"waiting in {current[0]}" if current is not None else _describe_frame(frame)
        try:
            self._store.set(f"{_PREFIX}at/{self.rank}", where)
        except Exception:  # noqa: BLE001
            pass
        failed = [rank for rank in range(self.world_size) if rank != self.rank and _read(self._store, rank, at=False)]
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)\n"
        # Waiting in a collective itself: give the backend until this rank's own timeout to end it with its message.
        wait = (current[1] + self.seconds + 2 - time.monotonic()) if current is not None else 1.0
        if self._stop.wait(max(wait, 0.0)) or self._failing:
            return
        self._end(
            f"Rank {self.rank} of {self.world_size}: rank(s) {', '.join(map(str, failed)) or '?'} gave up waiting for "
            f"the others ({self.owner}(timeout={self.seconds:g})), so this rank ends too. It was {where}; its stack:\n{stack}"
        )

    def _end_unreachable(self, seconds: float) -> None:
        frame = sys._current_frames().get(self._owner_thread)
        current = self._current
        where = f"waiting in {current[0]}" if current is not None else _describe_frame(frame)
        self._end(
            f"Rank {self.rank} of {self.world_size}: the job's key-value store, which rank 0 holds, has not answered "
            f"for {seconds:.0f} s ({self.owner}(timeout={self.seconds:g})): rank 0 has exited or its machine is gone, "
            f"so no collective can succeed again and this rank ends too. It was {where}."
        )

    def _end(self, message: str) -> None:
        log.error("%s", message)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(1)


# -------------------------------------------------------------------------- helpers
def _read(store: Any, rank: int, at: bool = True) -> str | None:
    """What `rank` said: "failed:<what>" (it gave up) or "at:<where>" (its watchdog answered)."""
    for kind in ("failed", "at") if at else ("failed",):
        key = f"{_PREFIX}{kind}/{rank}"
        try:
            if store.check([key]):
                return f"{kind}:{store.get(key).decode()}"
        except Exception:  # noqa: BLE001
            return None
    return None


def _label(frame: FrameType) -> str:
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name)
    return f"{name} ({_short(code.co_filename)}:{frame.f_lineno})"


def _short(filename: str) -> str:
    """Relative to the working directory when the file is under it, else as it is."""
    here = os.getcwd()
    return os.path.relpath(filename, here) if filename.startswith(here + os.sep) else filename


def _caller(frame: FrameType | None) -> tuple[str, str]:
    """The strategy methods on the way (`"check_epoch_lengths -> all_gather_object"`) and the
    first code outside the strategies that asked for them."""
    inside: list[str] = []
    while frame is not None and frame.f_code.co_filename.startswith(_STRATEGY_DIR):
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if not frame.f_code.co_filename.endswith("collectives.py") and not frame.f_code.co_name.startswith("_"):
            inside.append(name.rsplit(".", 1)[-1])  # public strategy methods only, not their helpers
        frame = frame.f_back
    return " -> ".join(reversed(inside)) or "a collective", _label(frame) if frame is not None else "?"


def _raised_by_torch_distributed(error: BaseException) -> bool:
    """Raised inside torch.distributed, DDP or autograd (where DDP's reducer waits), not in a
    DataLoader or the user's code that happens to mention a timeout."""
    from torch import distributed as dist

    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    trace, files = error.__traceback__, []
    while trace is not None:
        files.append(trace.tb_frame.f_code.co_filename)
        trace = trace.tb_next
    inner = files[-1] if files else ""
    places = (os.path.join(_TORCH_DIR, "distributed"), os.path.join(_TORCH_DIR, "nn", "parallel"),
              os.path.join(_TORCH_DIR, "autograd"), os.path.join(_TORCH_DIR, "_tensor.py"))
    return inner.startswith(places)


def _where_raised(trace: TracebackType | None) -> str:
    """Where an error from torch's own collectives came from: the innermost frame outside
    torch, and what torch was doing (a backward's gradient all-reduce, DDP's forward)."""
    frames: list[FrameType] = []
    while trace is not None:
        frames.append(trace.tb_frame)
        trace = trace.tb_next
    names = {f.f_code.co_name for f in frames if f.f_code.co_filename.startswith(_TORCH_DIR)}
    ours = [f for f in frames if not f.f_code.co_filename.startswith(_TORCH_DIR)]
    place = _label(ours[-1]) if ours else "torch"
    if names & {"backward", "_engine_run_backward", "run_backward"}:
        kind = "the gradient all-reduce that DDP/FSDP runs during backward"
    elif names & {"_pre_forward", "_sync_buffers", "_rebuild_buckets", "forward"}:
        kind = "DDP's/FSDP's collectives around forward"
    else:
        kind = "a collective outside the Trainer's own"
    return f"{kind}, reached from {place}"


def _describe_frame(frame: FrameType | None) -> str:
    """`"at training_step (train.py:40)"`: the innermost frame of the main thread outside torch."""
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR) or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    return f"at {_label(frame)}" if frame is not None else "somewhere unknown"
