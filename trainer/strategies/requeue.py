"""Requeue a SLURM job that was told to stop: `Trainer(requeue=..., requeue_signal=...)`.

Inside a SLURM job, SLURM's warning signal (`#SBATCH --signal=USR1@90` sends SIGUSR1 90 s
before the end; `requeue_signal` names it) stops fit as SIGTERM does: the current step
finishes, every rank agrees on the stop, last.ckpt is written. Then, when requeueing is on
(`requeue=None`: on in a SLURM batch job), the ranks agree once more whether a stop signal
reached any of them while training was unfinished, and rank 0 alone runs
`scontrol requeue $SLURM_JOB_ID`, once per job and only after last.ckpt is complete; fit
returns normally. The requeued job runs the same script again, and `ckpt_path="last"`
continues the run.

Outside SLURM nothing here acts and the warning signal is left alone.

Example:
    >>> parse_signal("USR1")
    <Signals.SIGUSR1: 10>
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.strategies.cluster import slurm_job

__all__ = ["Requeue", "parse_signal"]

log = logging.getLogger("trainer")

#: Set in this process once it has requeued its job (never twice for one job).
REQUEUED_ENV = "TRAINER_REQUEUED_JOB"
#: Signals that can't be the warning signal: uncatchable, or Ctrl-C's own.
_REFUSED = ("SIGKILL", "SIGSTOP", "SIGINT")
#: How long `scontrol requeue` may take.
SCONTROL_TIMEOUT_S = 60.0


def parse_signal(name: str | None) -> signal.Signals | None:
    """`"SIGUSR1"`, `"USR1"` (SLURM's spelling) or `"usr1"` as a signal; None stays None.

    Raises:
        ValueError: a name this platform doesn't know, or SIGKILL/SIGSTOP/SIGINT, listing the accepted ones.
    """
    if name is None:
        return None
    if isinstance(name, str):
        upper = name.strip().upper()
        full = upper if upper.startswith("SIG") else f"SIG{upper}"
        if full not in _REFUSED and full in signal.Signals.__members__:
            return signal.Signals[full]
    raise ValueError(
        "expected the name of the signal SLURM sends before the job ends (#SBATCH --signal=USR1@90): "
        f"'SIGUSR1' (the default), 'SIGUSR2', 'SIGTERM', 'SIGHUP' or another catchable signal, with or "
        f"without the SIG prefix; or None to handle SIGTERM only. {', '.join(_REFUSED)} can't be used"
    )


class Requeue:
    """What `Trainer(requeue=..., requeue_signal=...)` does in this process (see the module)."""

    def __init__(self, requeue: bool | None, requeue_signal: str | None, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.job = slurm_job(env)  # a batch job's id; None outside SLURM or in an interactive allocation
        in_slurm = bool(env.get("SLURM_JOB_ID"))
        self.enabled = self.job is not None and requeue is not False
        warning = parse_signal(requeue_signal) if in_slurm else None
        #: Signals handled like SIGTERM while fit runs (inside a SLURM job only).
        self.signals: tuple[signal.Signals, ...] = (warning,) if warning is not None else ()
        self.in_slurm = in_slurm
        if requeue and self.job is None and in_slurm:
            log.warning(
                "Trainer(requeue=True) in an interactive SLURM allocation (job name %r): SLURM requeues batch "
                "jobs only, so this run is not requeued. Submit the script with sbatch.",
                env.get("SLURM_JOB_NAME"),
            )

    def after_fit(self, strategy: Any, *, stopped_by_signal: bool, unfinished: bool, checkpoint: Any,
                  trained: bool = True) -> bool:
        """After fit wrote last.ckpt: agree whether a stop signal reached any rank, then
        requeue the job from rank 0 when training is unfinished. Every rank calls this (the
        agreement is a collective); returns whether this process requeued the job. Without a
        checkpoint the job is requeued only when this fit took no step (`trained=False`): the
        requeued job then starts where this one did, and nothing is lost."""
        if not self.enabled:
            return False
        wanted = strategy.any_rank(stopped_by_signal)
        if not (wanted and unfinished and strategy.is_global_zero) or self.job is None:
            return False
        if os.environ.get(REQUEUED_ENV) == self.job:
            return False
        if (checkpoint is None or not checkpoint.exists()) and not trained:
            log.warning("SLURM job %s stopped before its first optimizer step, with no last.ckpt to write: the "
                        "requeued job starts where this one did.", self.job)
            return self._scontrol(None)
        if checkpoint is None or not checkpoint.exists():
            log.warning(
                "SLURM job %s is not requeued: no last.ckpt was written (enable_checkpointing=False?), so the "
                "requeued job would start from the beginning.", self.job,
            )
            return False
        return self._scontrol(checkpoint)

    def _scontrol(self, checkpoint: Path | None) -> bool:
        command = ["scontrol", "requeue", self.job or ""]
        where = f"last.ckpt is at {checkpoint}" if checkpoint is not None else "nothing was trained yet"
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            log.warning("Could not requeue SLURM job %s (`%s`): %s. %s.", self.job, " ".join(command), error, where)
            return False
        if done.returncode != 0:
            log.warning("`%s` failed (exit code %d): %s. %s; submit the job again to continue.",
                        " ".join(command), done.returncode, (done.stderr or done.stdout).strip(), where)
            return False
        os.environ[REQUEUED_ENV] = self.job or ""
        then = f"continues from {checkpoint} with ckpt_path='last'" if checkpoint is not None else "starts where this one did"
        log.warning("Requeued SLURM job %s (`%s`); the requeued run %s.", self.job, " ".join(command), then)
        return True
