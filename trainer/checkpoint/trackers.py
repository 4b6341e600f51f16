"""The loggers' run identities in a checkpoint (key `"loggers"`), so a resume continues the
same run in each tracker: the TensorBoard/CSV folder, the W&B run, the MLflow run.

Saved: one entry per logger that has a run (`{"class": "TensorBoardLogger", "identity": {...}}`,
plain data). Restored before any logger writes: each logger of the resumed run that can
continue a run (`continue_run`, see `trainer/logging/identity.py`) takes the first unused
saved entry of its class, with the checkpoint's optimizer step, after which the tracker's
steps are dropped or hidden as far as it allows. A checkpoint without the key (older files)
restores as before: the loggers start new runs.

Example:
    >>> class Folder:
    ...     def run_identity(self): return {"log_dir": "runs/default/version_0"}
    ...     def continue_run(self, identity, step):
    ...         print("continue", identity["log_dir"], "after step", step)
    ...         return True
    >>> saved = logger_identities([Folder()])
    >>> saved
    [{'class': 'Folder', 'identity': {'log_dir': 'runs/default/version_0'}}]
    >>> continue_loggers([Folder()], saved, step=40)
    continue runs/default/version_0 after step 40
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["logger_identities", "continue_loggers"]

log = logging.getLogger("trainer")


def logger_identities(loggers: Sequence[Any]) -> list[dict[str, Any]]:
    """`[{"class", "identity"}]` for each logger that names a run (`run_identity()` not None)."""
    saved = []
    for logger in loggers:
        identify = getattr(logger, "run_identity", None)
        identity = identify() if callable(identify) else None
        if identity is not None:
            saved.append({"class": type(logger).__name__, "identity": dict(identity)})
    return saved


def continue_loggers(loggers: Sequence[Any], saved: Any, step: int) -> None:
    """Hand each logger the saved run of its class (in order), to continue after `step`."""
    if not isinstance(saved, list) or not saved:
        return
    unused = [entry for entry in saved if isinstance(entry, dict) and isinstance(entry.get("identity"), dict)]
    for logger in loggers:
        continue_run = getattr(logger, "continue_run", None)
        if not callable(continue_run):
            continue
        entry = next((e for e in unused if e.get("class") == type(logger).__name__), None)
        if entry is None:
            continue
        unused.remove(entry)
        if continue_run(entry["identity"], step):
            log.info("%s continues the run of the checkpoint (%s) after step %d.", type(logger).__name__,
                     ", ".join(f"{k}={v}" for k, v in entry["identity"].items()), step)
