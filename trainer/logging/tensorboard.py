"""`TensorBoardLogger`, the default logger; with it the helpers the other loggers share
(`with_prefix`, `flatten_params`, `hparam_value`; the `Logger` type is in `base.py`).

`torch.utils.tensorboard` (and so tensorboard itself) is imported only when the first
event is written, so `import trainer` stays fast, and a logger that never writes creates
no folder.

Folder scheme: each run writes into `root_dir/<name>/version_N`, N being one more than the
highest version already there; the folder is created atomically, so two runs (two
Trainers, two processes) never share one. A named run (`version="exp1"`), and inside a
SLURM batch job a run without a name (`slurm-<job id>`), reuses its folder on every rerun
(`trainer/logging/runs.py`).

Hyperparameters: `log_hyperparams` writes TensorBoard's HParams record that starts a run
into the run's own event file (no sub-run), plus a readable table under the Text tab.
The HParams dashboard then lists every run under the log dir side by side, and its metric
columns are the last value of each scalar of the run (for example the final `val/loss`).

Example:
    >>> import tempfile
    >>> from trainer.loggers import TensorBoardLogger
    >>> logger = TensorBoardLogger(tempfile.mkdtemp())
    >>> logger.log_metrics({"train/loss": 0.5}, step=1)
    >>> logger.log_dir.name
    'version_0'
    >>> logger.close()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainer.logging.base import Logger
from trainer.logging.identity import folder_to_continue, same_folder
from trainer.logging.params import flatten_params, hparam_value, write_hparams_yaml
from trainer.logging.runs import RunFolder, next_version_dir, planned_run_dir

__all__ = ["Logger", "TensorBoardLogger", "next_version_dir", "flatten_params", "hparam_value", "with_prefix"]

log = logging.getLogger("trainer")


class TensorBoardLogger(RunFolder):
    """Writes TensorBoard event files with `torch.utils.tensorboard.SummaryWriter`.

    Nothing touches the disk until the first value is written (or `log_dir` is read).

    Args:
        root_dir: the folder runs go under.
        name: a sub-folder for this experiment; each run gets `root_dir/name/version_N` (a name
            with `/` is a nested folder, as in Lightning).
        version: name the run's folder, so that running the same command again continues
            it (`root_dir/name/<version>`; an int `n` gives `version_n`, as in Lightning).
            None: a new `version_N`, or `slurm-<job id>` inside a SLURM batch job.
        version_dir: write into exactly this folder instead of a new version folder
            (for example to continue a run's curves in its old folder).
        flush_secs: how often the writer flushes on its own (it also flushes at epoch ends).
        save_dir: Lightning's name of `root_dir` (`TensorBoardLogger(save_dir=..., name=..., version=...)`);
            `name=None` or `""` puts the runs directly in it, as Lightning does.
        log_graph: Lightning's: add the module's graph (traced on its `example_input_array`)
            when fit, validate, test or predict start.
        default_hp_metric: Lightning's: with the hyperparameters, write an `hp_metric` scalar
            of -1 at step 0 (the HParams dashboard's placeholder). False by default here.
        prefix: Lightning's: written names become `<prefix>-<name>`.
        sub_dir: Lightning's: the event files go into this sub-folder of the run's folder.
        **writer_kwargs: passed on to `SummaryWriter` (Lightning's `**kwargs`).

    Example:
        >>> import tempfile
        >>> from trainer import Trainer, TensorBoardLogger
        >>> trainer = Trainer(logger=TensorBoardLogger(tempfile.mkdtemp(), name="mlp"))
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str] = "runs",
        name: str | None = "default",
        *,
        version: int | str | None = None,
        version_dir: str | os.PathLike[str] | None = None,
        flush_secs: int = 30,
        save_dir: str | os.PathLike[str] | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = False,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **writer_kwargs: Any,
    ) -> None:
        if save_dir is not None:  # Lightning's name of root_dir
            root_dir = save_dir
        for flag, value in (("log_graph", log_graph), ("default_hp_metric", default_hp_metric)):
            if not isinstance(value, bool):
                raise ValueError(f"TensorBoardLogger({flag}=...) expected True or False. Received: {value!r}.")
        if not isinstance(prefix, str):
            raise ValueError(f"TensorBoardLogger(prefix=...) expected a string. Received: {prefix!r}.")
        reserved = sorted({"log_dir", "logdir", "purge_step"} & set(writer_kwargs))
        if reserved:
            raise ValueError(
                f"TensorBoardLogger(**writer_kwargs) got {', '.join(reserved)}, which the logger sets itself "
                "(the folder from root_dir/name/version, the purge step on resume). Remove them."
            )
        if name is None or name == "":  # Lightning: no experiment sub-folder, runs go in save_dir/version_N
            name = ""
        elif not isinstance(name, str):  # "tb/" or "exp/run" are sub-folders, as in Lightning
            raise ValueError(
                f"TensorBoardLogger(name=...) expected a folder name such as 'mlp' (or 'exp/mlp'), or None. "
                f"Received: {name!r} of type {type(name).__name__}."
            )
        self._set_folder(root_dir, name, version, version_dir, "TensorBoardLogger")
        self.flush_secs = flush_secs
        self.log_graph_on_start = log_graph
        self.default_hp_metric = default_hp_metric
        self.prefix = prefix
        self.sub_dir = sub_dir
        self.writer_kwargs = writer_kwargs
        self._writer: Any = None
        self._purge_step: int | None = None  # a resume: TensorBoard hides the folder's later steps
        self._continued: tuple[str, int | None] | None = None  # the run a resume continues, and after which step

    @property
    def _log_graph(self) -> bool:
        """Lightning's private name of `log_graph`: `trainer.logger._log_graph = True` (a habit of
        Lightning's tutorials) turns the graph on here too."""
        return self.log_graph_on_start

    @_log_graph.setter
    def _log_graph(self, value: bool) -> None:
        self.log_graph_on_start = bool(value)

    @property
    def _default_hp_metric(self) -> bool:
        """Lightning's private name of `default_hp_metric` (`trainer.logger._default_hp_metric = None`: off)."""
        return self.default_hp_metric

    @_default_hp_metric.setter
    def _default_hp_metric(self, value: bool) -> None:
        self.default_hp_metric = bool(value)

    @property
    def save_dir(self) -> Path:
        """Lightning's name of `root_dir`."""
        return self.root_dir

    @property
    def experiment(self) -> Any:
        """The `SummaryWriter` (Lightning's name): `self.logger.experiment.add_image(...)` in a module."""
        return self.writer

    @property
    def writer(self) -> Any:
        """The underlying `SummaryWriter` (opened on first use), for images, histograms, ..."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            purge, self._purge_step = self._purge_step, None  # once: a writer opened again later keeps everything
            folder = self.log_dir / self.sub_dir if self.sub_dir is not None else self.log_dir
            self._writer = SummaryWriter(log_dir=str(folder), flush_secs=self.flush_secs, purge_step=purge,
                                         **self.writer_kwargs)
        return self._writer

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """With `log_graph=True`: the module's graph, traced on `input_array` (default: its
        `example_input_array`, moved to its device); without an input, a warning says so."""
        if not self.log_graph_on_start:
            return
        import torch

        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None:
            log.warning("TensorBoardLogger(log_graph=True) could not add the graph: set `example_input_array` on "
                        "%s (an input its forward takes) or call logger.log_graph(model, input_array).",
                        type(model).__name__)
            return
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        moved = torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, input_array)
        self.writer.add_graph(model, moved)

    def continue_run(self, identity: Mapping[str, Any], step: int | None) -> bool:
        """Continue the saved run's folder (`trainer/logging/identity.py`) unless this logger has
        a folder of its own (`version=`, `version_dir=`, or one already made).

        With `step`, the next event file starts with `purge_step=step + 1`: TensorBoard then
        hides what the folder's older event files hold for later steps (written after that
        checkpoint by a run that was killed), so the continued curves have one value per step.
        """
        target = folder_to_continue(identity, self.root_dir, self.name)
        own = self._log_dir
        if own is None and self.version is not None:
            own = planned_run_dir(self.root_dir, self.name, self.version)
        if target is None or (own is not None and not same_folder(own, target)):
            return False
        if (str(target), step) != self._continued:  # the same resume again (a second restore) changes nothing
            self.close()
            self._log_dir, self._continued = target, (str(target), step)
            if step is not None:
                self._purge_step = int(step) + 1
        return True

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Write each value as a scalar at `step` (the Trainer passes `global_step`).

        All values go into one event: one hand-off to the writer thread per call
        instead of one per tag (`add_scalar` each would cost ~10x more here).
        """
        if not metrics:
            return
        metrics = with_prefix(metrics, self.prefix)
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=name, simple_value=float(value)) for name, value in metrics.items()])
        self.writer.file_writer.add_summary(summary, int(step))

    def written_at(self, step: int, names: Iterable[str]) -> set[str]:
        """Which of `names` the run's event files already hold at `step` (a resumed run's
        first values, when the run it continues got further before it stopped)."""
        wanted = {f"{self.prefix}-{name}" if self.prefix else name: name for name in names}
        if self._log_dir is None or not wanted:
            return set()
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        self.flush()
        folder = self._log_dir / self.sub_dir if self.sub_dir is not None else self._log_dir
        found: set[str] = set()
        for path in sorted(folder.glob("*tfevents*")):
            for event in EventFileLoader(str(path)).Load():
                if event.step == step and event.HasField("summary"):
                    found.update(wanted[v.tag] for v in event.summary.value if v.tag in wanted)
        return found

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        """Record hyperparameters once per run (nested dicts become `a/b` names), and keep them
        nested in `hparams.yaml` beside the event files, as Lightning's logger does.

        `metrics`, when given, are written as scalars at step 0; the HParams dashboard
        shows the last value of every scalar of the run as its metric columns.
        """
        from torch.utils.tensorboard.summary import hparams

        flat = {name: hparam_value(value) for name, value in flatten_params(params).items()}
        _, session_start, _ = hparams(flat, {})
        writer = self.writer
        writer.file_writer.add_summary(session_start)
        if flat:
            rows = "\n".join(f"| {name} | {str(value).replace('|', '/')} |" for name, value in flat.items())
            writer.add_text("hparams", "| name | value |\n|---|---|\n" + rows)
        if metrics is None and self.default_hp_metric:
            metrics = {"hp_metric": -1}
        for name, value in with_prefix(metrics or {}, self.prefix).items():
            writer.add_scalar(name, value, global_step=0)
        self._yaml_params = {**getattr(self, "_yaml_params", {}), **params}  # later calls add to it, as Lightning's
        write_hparams_yaml(self.log_dir, self._yaml_params)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (a later write opens a new file in the same folder)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __repr__(self) -> str:
        where = str(self._log_dir) if self._log_dir is not None else str(self.root_dir / self.name / "version_?")
        return f"TensorBoardLogger({where!r})"


def with_prefix(metrics: Mapping[str, float], prefix: str) -> Mapping[str, float]:
    """Lightning's logger `prefix`: `{"loss": v}` -> `{"<prefix>-loss": v}` (unchanged when empty)."""
    return {f"{prefix}-{name}": value for name, value in metrics.items()} if prefix else metrics
