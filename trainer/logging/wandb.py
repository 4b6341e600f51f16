"""`WandbLogger`: a thin adapter over `wandb.init` / `Run.log` / `Run.config`.

`wandb` is imported when the run starts (the first value written), and needed only then:
`pip install 'loopwright[wandb]'` (or `pip install wandb`).

Steps: every value is logged with `step=global_step`, so W&B's own step axis is the
Trainer's optimizer step; the training scalars and the validation metrics of one step
share one history row.

A resumed run (a checkpoint written while this logger had a run) continues the same W&B
run: `wandb.init(id=<saved id>, resume="allow")`. Online, W&B continues the run's history
after its last step and refuses values for steps it already has (written after the
checkpoint by a run that was then killed): they are skipped here, once, with one INFO line,
instead of W&B's warning per call, so those steps keep the killed run's values. Offline
(`WANDB_MODE=offline`), each process writes its own `offline-run-*-<id>` folder with the
same run id; the resumed one starts at the step after the checkpoint's, and `wandb sync`
uploads the folders into the one run.

Example:
    >>> import importlib.util
    >>> from trainer.loggers import WandbLogger
    >>> if importlib.util.find_spec("wandb"):  # nothing starts until the first value is written
    ...     logger = WandbLogger(project="mnist", mode="offline")
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.logging.extras import plain_params, require
from trainer.logging.tensorboard import with_prefix

__all__ = ["WandbLogger"]

log = logging.getLogger("trainer")


class WandbLogger:
    """Logs scalars, hyperparameters and the run's config to Weights & Biases.

    Args:
        project: the W&B project (None: W&B's default, e.g. `WANDB_PROJECT`).
        name: the run's display name.
        id: continue this W&B run (`resume="allow"`); None: a new run, or on a resume
            the run saved in the checkpoint.
        save_dir: W&B's local folder (`wandb.init(dir=...)`; None: `WANDB_DIR` or the
            working directory).
        mode: `"online"`, `"offline"` or `"disabled"` (None: W&B's default, e.g. `WANDB_MODE`).
        version, offline, dir, anonymous, prefix, experiment, log_model: Lightning's
            `WandbLogger` arguments: `version` is `id`, `offline=True` is `mode="offline"`,
            `dir` is `save_dir`, `anonymous=True` is `wandb.init(anonymous="allow")`,
            `prefix` makes names `<prefix>-<name>`, `experiment` is a run already started
            (used as it is). `log_model` must stay False: checkpoints are not uploaded here
            (so `checkpoint_name` and `add_file_policy`, which shape those uploads, change nothing).
        **init_kwargs: passed to `wandb.init` as they are (`entity`, `tags`, `group`, ...).
    """

    def __init__(  # Lightning's order of the arguments, so positional calls mean the same
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,  # noqa: A002 - Lightning's name
        id: str | None = None,  # noqa: A002 - Lightning's name
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: bool | str = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: str = "mutable",
        *,
        mode: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        require("wandb", "WandbLogger")
        if log_model is not False:
            raise ValueError(
                f"WandbLogger(log_model={log_model!r}): checkpoints are not uploaded to W&B here. Expected "
                "log_model=False; to keep a checkpoint in W&B, log it yourself after fit: "
                "logger.experiment.log_model(path=trainer.checkpoint_callback.best_model_path)."
            )
        if add_file_policy not in ("mutable", "immutable"):
            raise ValueError("WandbLogger(add_file_policy=...) expected 'mutable' or 'immutable'. "
                             f"Received: {add_file_policy!r}.")
        # Lightning's: both only shape the model artifacts log_model uploads (never here); kept as given
        self.checkpoint_name, self.add_file_policy = checkpoint_name, add_file_policy
        if offline and mode not in (None, "offline"):
            raise ValueError(f"WandbLogger(offline=True, mode={mode!r}) disagree. Expected one of them.")
        id = id if id is not None else version
        mode = "offline" if offline else mode
        save_dir = save_dir if save_dir is not None else dir
        if anonymous:
            init_kwargs.setdefault("anonymous", "allow")
        self.prefix = prefix
        reserved = sorted({"resume", "reinit", "config"} & set(init_kwargs))
        if reserved:
            raise ValueError(
                f"WandbLogger(**init_kwargs) sets {', '.join(reserved)} itself (the run is resumed by its id; the "
                "hyperparameters come from the Trainer). Received them as arguments; remove them."
            )
        self.project = project
        self.name = name
        self.save_dir = Path(save_dir) if save_dir is not None else None
        self.mode = mode
        self.init_kwargs = init_kwargs
        self._id = id
        self._explicit_id = id is not None
        self._run: Any = experiment  # Lightning's `experiment=`: a run already started
        self._given = experiment is not None
        if experiment is not None:
            self._id = experiment.id
        self._skip_below = 0  # W&B refuses steps below the resumed run's current step
        self._skipped = 0

    @property
    def version(self) -> str | None:
        """The run's id (Lightning's `version`): the started run's, else the one given."""
        return self._run.id if self._run is not None else self._id

    @property
    def experiment(self) -> Any:
        """The `wandb` Run (started on first use): for images, tables, artifacts, ..."""
        if self._run is None:
            import wandb

            if self.save_dir is not None:
                self.save_dir.mkdir(parents=True, exist_ok=True)
            self._run = wandb.init(
                project=self.project, name=self.name, id=self._id, dir=self.save_dir, mode=self.mode,  # type: ignore[arg-type]
                resume="allow" if self._id is not None else None, reinit="create_new", **self.init_kwargs,
            )
            self._id = self._run.id
            self._skip_below = int(getattr(self._run, "step", 0) or 0) if self._run.resumed else 0
        return self._run

    @property
    def log_dir(self) -> Path | None:
        """None: W&B keeps its own files (`save_dir`), so the Trainer's run folder
        (`last.ckpt`, `config.yaml`) is `root_dir/default/version_N`."""
        return None

    @property
    def run_id(self) -> str | None:
        """The W&B run id (None until the run started)."""
        return self._id

    def run_identity(self) -> dict[str, Any] | None:
        if self._id is None:
            return None
        return {"id": self._id, "project": self.project if self._run is None else self._run.project}

    def continue_run(self, identity: Mapping[str, Any], step: int | None) -> bool:
        """Take the saved run id, unless this logger was given its own (`id=`) or already
        started another run."""
        saved = identity.get("id")
        if not isinstance(saved, str) or not saved:
            return False
        if self._id is not None and self._id != saved:
            log.info("WandbLogger keeps its run %s; the checkpoint's run was %s.", self._id, saved)
            return False
        self._id = saved
        return True

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if not metrics:
            return
        run = self.experiment
        if step < self._skip_below:
            if not self._skipped:
                log.info("WandbLogger: run %s already has steps up to %d (logged before this resume); W&B keeps "
                         "those values, so this run's values for them are not sent.", self._id, self._skip_below - 1)
            self._skipped += 1
            return
        run.log({name: float(value) for name, value in with_prefix(metrics, self.prefix).items()}, step=int(step))

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        """`run.config.update(params)`, nested as given; a resume may change values."""
        self.experiment.config.update(plain_params(dict(params)), allow_val_change=True)
        if metrics:
            self.log_metrics(metrics, step=0)

    def flush(self) -> None:
        """Nothing to do: W&B sends values from its own process."""

    def close(self) -> None:
        """Finish the run (`exit_code` 1 when `fit` ends with an exception); a later write
        starts it again with the same id."""
        if self._run is not None and not self._given:  # a run passed in as `experiment=` is the caller's to finish
            failed = sys.exc_info()[0] is not None  # inside fit's cleanup while an exception propagates
            run, self._run = self._run, None
            run.finish(exit_code=1 if failed else 0)

    def __repr__(self) -> str:
        return f"WandbLogger(project={self.project!r}, id={self._id!r})"
