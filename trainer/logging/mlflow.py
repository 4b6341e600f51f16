"""`MLflowLogger`: a thin adapter over `mlflow.tracking.MlflowClient`.

`mlflow` is imported when the run starts (the first value written), and needed only then:
`pip install 'loopwright[mlflow]'` (or `pip install mlflow`).

Metrics go in with `step=global_step` (`log_batch`, one call per logging interval);
hyperparameters are flattened to `a/b` params. MLflow refuses to change a param's value
in a run, so a params call logs only the keys the run does not have yet; a key whose value
changed (a resume with another `max_epochs`) is recorded as the tag
`changed_on_resume/<key>` holding the new value, and the run goes on.

A resumed run (a checkpoint written while this logger had a run) continues the same MLflow
run (`run_id` saved in the checkpoint, looked up in this logger's tracking store). MLflow
keeps every value logged for a step and has no call to delete one: steps that a killed run
wrote after the checkpoint hold both its values and the resumed run's (the later
timestamp); a chart shows both points. A saved run that the store does not have (another
tracking URI) gives a new run, with a warning.

Example:
    >>> import importlib.util
    >>> from trainer.loggers import MLflowLogger
    >>> if importlib.util.find_spec("mlflow"):  # nothing starts until the first value is written
    ...     logger = MLflowLogger("mnist", tracking_uri="sqlite:///mlflow.db")
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainer.logging.extras import plain_params, require
from trainer.logging.tensorboard import flatten_params, with_prefix

__all__ = ["MLflowLogger", "MLFlowLogger"]

log = logging.getLogger("trainer")

_BAD_NAME = re.compile(r"[^\w\-. :/]")  # MLflow's allowed characters in metric and param names
_PARAM_LENGTH = 6000  # MLflow's longest param value
_PARAMS_PER_CALL = 100
_METRICS_PER_CALL = 1000


class MLflowLogger:
    """Logs scalars and hyperparameters to an MLflow run.

    Args:
        experiment_name: the MLflow experiment (created when missing).
        run_name: the run's display name.
        tracking_uri: where runs are stored (`"sqlite:///mlflow.db"`, `"http://host:5000"`, ...);
            None: MLflow's default (`MLFLOW_TRACKING_URI`, else its local default).
        run_id: continue this run; None: a new run, or on a resume the run saved in the checkpoint.
        tags: tags of a new run.
        artifact_location: where a new experiment keeps artifacts (MLflow's default if None).
        save_dir: Lightning's: without `tracking_uri`, a local store in this folder (a SQLite
            database `mlflow.db`: MLflow 3 refuses new file stores by default).
        prefix: Lightning's: metric names become `<prefix>-<name>`.
        synchronous: passed to MLflow's `log_batch` (None: MLflow's default).
        log_model: Lightning's; must stay False: checkpoints are not uploaded here.
    """

    def __init__(
        self,
        experiment_name: str = "default",
        run_name: str | None = None,
        *,
        tracking_uri: str | None = None,
        run_id: str | None = None,
        tags: Mapping[str, Any] | None = None,
        artifact_location: str | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        prefix: str = "",
        synchronous: bool | None = None,
        log_model: bool | str = False,
    ) -> None:
        require("mlflow", "MLflowLogger")
        if log_model is not False:
            raise ValueError(
                f"MLflowLogger(log_model={log_model!r}): checkpoints are not uploaded to MLflow here. Expected "
                "log_model=False; to keep a checkpoint in MLflow, log it yourself after fit: "
                "logger.experiment.log_artifact(logger.run_id, trainer.checkpoint_callback.best_model_path)."
            )
        if tracking_uri is None and save_dir is not None:
            # Lightning makes a file store there, which MLflow 3 refuses by default: a SQLite store in it
            folder = Path(save_dir).resolve()
            folder.mkdir(parents=True, exist_ok=True)
            tracking_uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.prefix = prefix
        self.synchronous = synchronous
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri
        self.tags = tags  # as given (Lightning's); text when the run is made
        self.save_dir = str(Path(save_dir).resolve()) if save_dir is not None else None
        self.artifact_location = artifact_location
        self._run_id = run_id
        self._client: Any = None
        self._active = False  # the run is open (RUNNING) in this process

    @property
    def experiment(self) -> Any:
        """The `MlflowClient` (created on first use); the run is `run_id`."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        if not self._active:
            self._start(self._client)
        return self._client

    @property
    def run_id(self) -> str | None:
        """The MLflow run id (None until the run started)."""
        return self._run_id

    @property
    def log_dir(self) -> None:
        """None: MLflow keeps its own store, so the Trainer's run folder (`last.ckpt`,
        `config.yaml`) is `root_dir/default/version_N`."""
        return None

    def run_identity(self) -> dict[str, Any] | None:
        return None if self._run_id is None else {"run_id": self._run_id, "experiment_name": self.experiment_name}

    def continue_run(self, identity: Mapping[str, Any], step: int | None) -> bool:
        """Take the saved run id, unless this logger was given its own (`run_id=`)."""
        saved = identity.get("run_id")
        if not isinstance(saved, str) or not saved:
            return False
        if self._run_id is not None and self._run_id != saved:
            log.info("MLflowLogger keeps its run %s; the checkpoint's run was %s.", self._run_id, saved)
            return False
        self._run_id = saved
        return True

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if not metrics:
            return
        from mlflow.entities import Metric

        client = self.experiment
        now = int(time.time() * 1000)
        entries = [Metric(_name(key), float(value), now, int(step)) for key, value in with_prefix(metrics, self.prefix).items()]
        options = {} if self.synchronous is None else {"synchronous": self.synchronous}
        for start in range(0, len(entries), _METRICS_PER_CALL):
            client.log_batch(self._run_id, metrics=entries[start:start + _METRICS_PER_CALL], **options)

    def written_at(self, step: int, names: Iterable[str]) -> set[str]:
        """Which of `names` the run already holds at `step` (MLflow keeps every value logged)."""
        if self._run_id is None:
            return set()
        client, found = self.experiment, set()
        for name in names:
            key = _name(f"{self.prefix}-{name}" if self.prefix else name)
            if any(m.step == step for m in client.get_metric_history(self._run_id, key)):
                found.add(name)
        return found

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        """New keys as params; changed values as `changed_on_resume/<key>` tags."""
        from mlflow.entities import Param, RunTag

        client = self.experiment
        flat = {_name(key): _text(value) for key, value in flatten_params(plain_params(dict(params))).items()}
        existing = client.get_run(self._run_id).data.params
        new = [Param(key, value) for key, value in flat.items() if key not in existing]
        changed = [RunTag(f"changed_on_resume/{key}", value) for key, value in flat.items()
                   if key in existing and existing[key] != value]
        for start in range(0, len(new), _PARAMS_PER_CALL):
            client.log_batch(self._run_id, params=new[start:start + _PARAMS_PER_CALL])
        for start in range(0, len(changed), _PARAMS_PER_CALL):
            client.log_batch(self._run_id, tags=changed[start:start + _PARAMS_PER_CALL])
        if changed:
            log.info("MLflowLogger: run %s already has other values for %s (MLflow keeps a param's first value); "
                     "the new ones are its tags changed_on_resume/<name>.", self._run_id, ", ".join(t.key.removeprefix("changed_on_resume/") for t in changed))
        if metrics:
            self.log_metrics(metrics, step=0)

    def flush(self) -> None:
        """Nothing to do: every call is sent when made."""

    def close(self) -> None:
        """Mark the run FINISHED (KILLED after Ctrl-C, FAILED after another exception in
        `fit`); a later write opens it again."""
        if self._active and self._client is not None:
            error = sys.exc_info()[0]  # inside fit's cleanup while an exception propagates
            status = "FINISHED" if error is None else "KILLED" if issubclass(error, KeyboardInterrupt) else "FAILED"
            self._active = False
            self._client.set_terminated(self._run_id, status=status)

    def __repr__(self) -> str:
        return f"MLflowLogger(experiment_name={self.experiment_name!r}, run_id={self._run_id!r})"

    def _start(self, client: Any) -> None:
        from mlflow.exceptions import MlflowException

        if self._run_id is not None:
            try:
                client.get_run(self._run_id)
            except MlflowException:
                log.warning("MLflowLogger: run %s is not in the tracking store %s; starting a new run.",
                            self._run_id, client.tracking_uri)
                self._run_id = None
            else:
                client.update_run(self._run_id, status="RUNNING")
        if self._run_id is None:
            found = client.get_experiment_by_name(self.experiment_name)
            experiment_id = (found.experiment_id if found is not None
                             else client.create_experiment(self.experiment_name, artifact_location=self.artifact_location))
            self._run_id = client.create_run(experiment_id, run_name=self.run_name,
                                           tags={str(k): str(v) for k, v in (self.tags or {}).items()}).info.run_id
        self._active = True


def _name(key: str) -> str:
    """A metric or param name MLflow accepts (other characters become `_`)."""
    return _BAD_NAME.sub("_", str(key))



MLFlowLogger = MLflowLogger  # Lightning's spelling (`from trainer.loggers.mlflow import MLFlowLogger`)

def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _PARAM_LENGTH else text[: _PARAM_LENGTH - 3] + "..."
