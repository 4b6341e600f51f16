"""Interrupts that land between optimizer steps, never inside one.

While `fit` runs, SIGINT (Ctrl-C, Jupyter's stop button) raises `KeyboardInterrupt` at
once, except inside the short critical section that unscales, clips, steps the optimizer
and advances the counters: there it is deferred to the end of the section, so the weights
are always those of a completed step. SIGTERM (what clusters send before a kill) only
requests a stop: the current step finishes, a checkpoint is written, fit returns; so does
SLURM's warning signal (`requeue_signal`, SIGUSR1 by default), which the Trainer handles
inside a SLURM job only. The previous handlers are restored when fit ends; nothing is
changed for good.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from collections.abc import Iterator
from typing import Any, Callable

__all__ = ["SignalGuard"]

log = logging.getLogger("trainer")


class SignalGuard:
    """Installs the handlers on `__enter__` (main thread only) and restores them on `__exit__`."""

    def __init__(self, on_terminate: Callable[[], None], also_terminate: tuple[signal.Signals, ...] = ()) -> None:
        self._on_terminate = on_terminate
        self._terminate_signals = (signal.SIGTERM, *(s for s in also_terminate if s != signal.SIGTERM))
        self.received: str | None = None  # the name of the signal that asked for the stop
        self._previous: dict[int, Any] = {}
        self.in_critical = False
        self.interrupt_deferred = False  # a SIGINT arrived inside the critical section: raised at its end
        self._interrupted = False  # a KeyboardInterrupt was raised: fit is saving and stopping
        self.terminated = False

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread
        handlers = [(signal.SIGINT, self._handle_interrupt), *((s, self._handle_terminate) for s in self._terminate_signals)]
        for signum, handler in handlers:
            try:
                self._previous[signum] = signal.signal(signum, handler)
            except (ValueError, OSError):  # e.g. an embedded interpreter without signals
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle_interrupt(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted:
            # A second Ctrl-C while fit handles the first one (writing last.ckpt): raising
            # again could cut that save short, so it is noted and ignored.
            log.warning("Already stopping after Ctrl-C; writing last.ckpt first (Ctrl-\\ quits at once).")
            return
        if self.in_critical:
            self.interrupt_deferred = True
            return
        previous = self._previous.get(signal.SIGINT)
        self._interrupted = True
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)
        raise KeyboardInterrupt

    def deliver(self, signum: int) -> None:
        """A stop signal that arrived before fit (noted while the script started): as if now."""
        self._handle_terminate(signum, None)

    def _handle_terminate(self, signum: int, frame: FrameType | None) -> None:
        self.terminated = True
        self.received = signal.Signals(signum).name
        self._on_terminate()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A critical section for bookkeeping (opening/closing bars, writing the last
        checkpoint): an interrupt arriving inside waits for its end, then is raised."""
        if self.in_critical:  # nested: the outer section raises
            yield
            return
        self.in_critical = True
        try:
            yield
        finally:
            self.exit_critical()

    def exit_critical(self) -> None:
        self.in_critical = False
        if self.interrupt_deferred:
            self.interrupt_deferred = False  # a SIGINT arrived inside the critical section: raised at its end
            self._interrupted = True
            raise KeyboardInterrupt
