"""SLURM's warning signal while the script is still starting: noted, then honoured by fit.

Inside a SLURM job, `import trainer` (this module is the first thing it loads, before torch;
it imports nothing but the standard library)
replaces SIGUSR1's default action, which ends the process, with one that only notes the
signal. A job preempted with `scancel -s USR1` while it imports, prepares its data, builds
the Trainer or restores a checkpoint is therefore not killed without a requeue: the next
`fit` finds the noted signal and stops as if it had arrived in its first step (a checkpoint
when anything is there to save, then `scontrol requeue`). A Trainer whose `requeue_signal`
is another signal notes that one from its construction on and gives SIGUSR1 its default
back (a SIGUSR1 noted by then is delivered again, so it acts as it would have); with
`requeue_signal=None` SIGUSR1 gets its default back the same way.

Only a signal whose handler is still the default is taken over: a handler of your own,
installed before or after `import trainer`, is left alone. Outside SLURM nothing changes.
Signals that arrive before `import trainer` (while Python starts, or during `import torch`
above it) can't be caught here: put `import trainer` first in a script that must survive them.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping
from types import FrameType

__all__ = ["install", "adopt", "take"]

#: The signals this module noted and not yet handed to fit, in arrival order.
_pending: list[signal.Signals] = []
#: The signals whose handler is this module's `_note`.
_installed: set[signal.Signals] = set()


def _note(signum: int, frame: FrameType | None) -> None:
    _pending.append(signal.Signals(signum))


def install(signals: Iterable[signal.Signals] = (signal.SIGUSR1,), environ: Mapping[str, str] | None = None) -> None:
    """Note `signals` from now on instead of their default action, inside a SLURM job only
    (`SLURM_JOB_ID` set) and only where the default is still in place."""
    env = os.environ if environ is None else environ
    if not env.get("SLURM_JOB_ID") or threading.current_thread() is not threading.main_thread():
        return
    for signum in signals:
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _note)
                _installed.add(signum)
        except (ValueError, OSError):  # an interpreter without signals, or one we may not set
            pass


def adopt(signals: Iterable[signal.Signals]) -> None:
    """A Trainer handles `signals` as the warning signal: note them too from now on (SIGUSR1
    is noted from `import trainer` on, or not at all), and give every other signal noted so
    far its default back (delivering it again if it already arrived)."""
    wanted = set(signals)
    install(wanted - {signal.SIGUSR1})
    for signum in sorted(_installed - wanted):
        if signal.getsignal(signum) is not _note or threading.current_thread() is not threading.main_thread():
            continue
        signal.signal(signum, signal.SIG_DFL)
        _installed.discard(signum)
        if signum in _pending:
            _pending[:] = [s for s in _pending if s != signum]
            os.kill(os.getpid(), signum)  # what it would have done had it arrived now


def take(signals: Iterable[signal.Signals]) -> signal.Signals | None:
    """The first of `signals` noted since the last call (forgotten once taken), else None."""
    wanted = set(signals)
    found = next((s for s in _pending if s in wanted), None)
    if found is not None:
        _pending[:] = [s for s in _pending if s not in wanted]
    return found
