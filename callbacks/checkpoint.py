"""`ModelCheckpoint`: keep the best (or latest) checkpoints of a run, every n steps or epochs.

Files are written with `trainer.save_checkpoint`, which is atomic; a file that falls out
of the top k is deleted only after the new one is safely on disk. The callback's
bookkeeping (the kept files, their scores, the best one) is part of every checkpoint, so
a run resumed with `fit(..., ckpt_path=...)` keeps ranking against the same files.

Epoch-end saves are decided at `on_train_epoch_end` (after validation, so `val/...`
metrics can be monitored) and written at the next clean cut of the loop, the start of the
next epoch or the end of fit: there the epoch is complete in the saved loop state, so
resuming from such a file continues exactly.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainer import Callback, MonitorError
from trainer.checkpoint import remove_checkpoint

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["ModelCheckpoint"]

log = logging.getLogger("trainer")

_PLACEHOLDER = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")
_BUILTIN = ("epoch", "step")


class ModelCheckpoint(Callback):
    """Save checkpoints during `fit`, keeping the `save_top_k` best by `monitor`.

    Args:
        dirpath: folder of the files; default `trainer.log_dir / "checkpoints"`.
        filename: name without extension; `{epoch}`, `{step}` and any logged metric,
            with an optional format spec (`"{epoch}-{val_loss:.2f}"` writes
            `epoch=0-val_loss=5.00.ckpt`, Lightning's names). A `/` in the result (as in
            metric names) becomes `_`, so no subfolder appears. `.ckpt` is appended.
        monitor: metric to rank files by (a key of `trainer.callback_metrics`); None
            ranks by recency.
        mode: "min" or "max": which direction of `monitor` is better.
        save_top_k: how many files to keep; -1 keeps all, 0 none. Without `monitor`
            only 1 (the latest), 0 or -1 are meaningful.
        save_last: also keep `last.ckpt` in `dirpath`, updated at every save.
        every_n_train_steps: save after every n optimizer steps (None: never by steps).
        every_n_epochs: save after every n finished epochs (None or 0: never by epochs).
        auto_insert_metric_name: write `{name}` as `name=value` (Lightning's default).
        save_weights_only: files hold only the module's weights (load them with
            `module.load_state_dict(torch.load(path, weights_only=True)["module"])`, or
            `trainer.validate/test(..., ckpt_path=path)`); they can't resume a run.
        verbose: log every save.
        save_on_train_epoch_end: Lightning's choice between saving at the training epoch's end
            and at the validation's end; here the epoch-end save is decided after the epoch's
            validation either way (the same moment), so every value saves the same files, except
            that Lightning also saves after each mid-epoch validation (`val_check_interval`).
        enable_version_counter: a file name that already exists (from an earlier run, or a
            constant `filename` with `save_top_k=-1`) gets `-v1`, `-v2`, ... (Lightning's);
            False overwrites it.

    Without `monitor`, files are ranked by recency and `best_model_score` stays None (Lightning's).

    Example:
        >>> import callbacks
        >>> best = callbacks.ModelCheckpoint(monitor="val/loss", mode="min", save_top_k=2,
        ...                                  filename="{epoch}-{val/loss:.3f}")
        >>> best.best_model_path
        ''
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str = "{epoch}-{step}",
        monitor: str | None = None,
        mode: Literal["min", "max"] = "min",
        save_top_k: int = 1,
        save_last: bool = False,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = 1,
        auto_insert_metric_name: bool = True,
        save_weights_only: bool = False,
        verbose: bool = False,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        if every_n_epochs == 0:  # Lightning's spelling of "never by epochs"
            every_n_epochs = None
        _validate(filename, monitor, mode, save_top_k, every_n_train_steps, every_n_epochs)
        self.auto_insert_metric_name = auto_insert_metric_name
        self.save_weights_only = save_weights_only
        self.verbose = verbose
        self.save_on_train_epoch_end = save_on_train_epoch_end  # accepted: epoch saves come after the epoch's validation either way
        self.enable_version_counter = enable_version_counter
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_train_steps = every_n_train_steps
        self.every_n_epochs = every_n_epochs
        self.best_k_models: dict[str, float] = {}  # path -> score (recency rank without monitor)
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.last_model_path = ""
        self._last_saved_step: int | None = None
        self._pending: dict[str, Any] | None = None  # an epoch-end save waiting for a clean cut
        self._warned_missing = False

    @property
    def state_key(self) -> str:
        return (
            f"ModelCheckpoint{{monitor={self.monitor!r}, mode={self.mode!r}, "
            f"every_n_train_steps={self.every_n_train_steps}, every_n_epochs={self.every_n_epochs}}}"
        )

    # -------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self.dirpath is None:  # rank 0's run folder (other ranks must not create one)
            strategy = trainer.strategy
            log_dir = str(trainer.log_dir) if strategy.is_global_zero else None
            self.dirpath = Path(strategy.broadcast_object(log_dir)) / "checkpoints"

    def on_train_step_end(self, trainer: Trainer, module: Any, stepped: bool) -> None:
        n = self.every_n_train_steps
        if n is not None and trainer.global_step % n == 0:
            request = self._request(trainer, trainer.current_epoch, strict=False)
            if request is not None:
                self._save(trainer, request)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        n = self.every_n_epochs
        if n is not None and (trainer.current_epoch + 1) % n == 0:
            self._pending = self._request(trainer, trainer.current_epoch, strict=True)

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self._flush(trainer)

    def on_fit_end(self, trainer: Trainer, module: Any) -> None:
        self._flush(trainer)

    # ---------------------------------------------------------------------- decisions
    def _request(self, trainer: Trainer, epoch: int, *, strict: bool) -> dict[str, Any] | None:
        """What to save now (or None): rank 0 decides and every rank follows.

        Under DDP per-step metrics are each rank's own, and a save is a collective, so all
        ranks must make the same decision: rank 0's.
        """
        strategy = trainer.strategy
        local = self._decide(trainer, epoch, strict=strict) if strategy.is_global_zero else None
        request: dict[str, Any] | None = strategy.broadcast_object(local)
        return request

    def _decide(self, trainer: Trainer, epoch: int, *, strict: bool) -> dict[str, Any] | None:
        """The name and score of a save now, from the metrics of this moment."""
        metrics = dict(trainer.callback_metrics)
        needed = [n for n in _placeholders(self.filename) if n not in _BUILTIN]
        if self.monitor is not None:
            needed.append(self.monitor)
        missing = sorted({n for n in needed if n not in metrics})
        if missing:
            message = (
                f"ModelCheckpoint expected the metric(s) {', '.join(map(repr, missing))} (monitor / "
                f"filename) in trainer.callback_metrics. Received: {sorted(metrics) or 'no metrics'}. "
                "Log them with self.log(name, value), or fix monitor/filename."
            )
            if strict:
                raise MonitorError(message)
            if not self._warned_missing:
                log.warning("%s Skipping step-based saves until they are logged.", message)
                self._warned_missing = True
            return None
        values = {"epoch": epoch, "step": trainer.global_step, **metrics}
        score = float(metrics[self.monitor]) if self.monitor is not None else float(trainer.global_step)
        name = self._versioned(_render(self.filename, values, self.auto_insert_metric_name))
        return {"name": name, "score": score, "step": trainer.global_step}

    def _versioned(self, name: str) -> str:
        """`name`, or `name-vN` when a file of that name exists and is not the one this save replaces."""
        if not self.enable_version_counter or self.dirpath is None:
            return name
        full = self.save_top_k != -1 and self.best_k_models and len(self.best_k_models) >= self.save_top_k
        replaced = self._worst() if full else None
        candidate, version = name, 1
        while (self.dirpath / f"{candidate}.ckpt").exists() and str(self.dirpath / f"{candidate}.ckpt") != replaced:
            candidate, version = f"{name}-v{version}", version + 1
        return candidate

    def _flush(self, trainer: Trainer) -> None:
        if self._pending is not None:
            request, self._pending = self._pending, None
            self._save(trainer, request)

    def _worst(self) -> str:
        return max(self.best_k_models, key=lambda p: _ordering_key(self.best_k_models[p], self._minimising()))

    def _minimising(self) -> bool:
        return self.monitor is not None and self.mode == "min"

    # -------------------------------------------------------------------------- saving
    def _save(self, trainer: Trainer, request: dict[str, Any]) -> None:
        assert self.dirpath is not None
        path = str(self.dirpath / f"{request['name']}.ckpt")
        before = self.state_dict()
        evicted: list[str] = []
        keep = self.save_top_k != 0 and self._admit(path, request["score"], evicted)
        self._last_saved_step = request["step"]
        if save_last := self.save_last:
            self.last_model_path = str(self.dirpath / "last.ckpt")
        if trainer.fast_dev_run:  # a quick check of the whole run writes nothing
            return
        try:
            if keep:
                trainer.save_checkpoint(path, weights_only=self.save_weights_only)
                if self.verbose:
                    log.info("ModelCheckpoint: saved %s (%s=%s).", path, self.monitor or "step", request["score"])
            if save_last:
                trainer.save_checkpoint(self.last_model_path, weights_only=self.save_weights_only)
        except BaseException:
            self.load_state_dict(before)  # the bookkeeping never names a file that isn't there
            raise
        if not trainer.strategy.is_global_zero:  # only rank 0 touches files
            return
        for stale in evicted:  # only once the new file is safely written (async_checkpointing: later)
            if stale != path and stale != self.last_model_path:
                trainer.remove_checkpoint(stale)

    def _admit(self, path: str, score: float, evicted: list[str]) -> bool:
        """Update the top-k bookkeeping for a new file; list the files it pushes out."""
        models = self.best_k_models
        models.pop(path, None)
        if self.save_top_k != -1 and len(models) >= self.save_top_k:
            worst = self._worst()
            if self.monitor is not None and not _improves(score, models[worst], self._minimising()):
                return False
            evicted.append(worst)
            del models[worst]
        models[path] = score
        best = min(models, key=lambda p: _ordering_key(models[p], self._minimising()))
        self.best_model_path = best
        self.best_model_score = models[best] if self.monitor is not None else None  # no monitor: no score (Lightning)
        return True

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "dirpath": str(self.dirpath) if self.dirpath is not None else None,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "last_model_path": self.last_model_path,
            "last_saved_step": self._last_saved_step,
            "pending": dict(self._pending) if self._pending is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_k_models = {str(k): float(v) for k, v in state.get("best_k_models", {}).items()}
        self.best_model_path = str(state.get("best_model_path", ""))
        score = state.get("best_model_score")
        self.best_model_score = float(score) if score is not None and self.monitor is not None else None
        self.last_model_path = str(state.get("last_model_path", ""))
        self._last_saved_step = state.get("last_saved_step")
        pending = state.get("pending")
        self._pending = dict(pending) if pending is not None else None


def _ordering_key(score: float, minimising: bool) -> float:
    """Smaller is better; NaN is worst. Without a monitor the newest (largest step) is best."""
    if math.isnan(score):
        return math.inf
    return score if minimising else -score


def _improves(score: float, worst: float, minimising: bool) -> bool:
    return _ordering_key(score, minimising) < _ordering_key(worst, minimising)


def _placeholders(filename: str) -> list[str]:
    return [m.group(1) for m in _PLACEHOLDER.finditer(filename)]


def _render(filename: str, values: dict[str, Any], insert_names: bool = False) -> str:
    def substitute(match: re.Match[str]) -> str:
        text = format(values[match.group(1)], match.group(2) or "")
        return f"{match.group(1)}={text}" if insert_names else text

    return _PLACEHOLDER.sub(substitute, filename).replace("/", "_").replace(os.sep, "_")


def _validate(
    filename: str,
    monitor: str | None,
    mode: str,
    save_top_k: int,
    every_n_train_steps: int | None,
    every_n_epochs: int | None,
) -> None:
    if mode not in ("min", "max"):
        raise ValueError(f"ModelCheckpoint(mode=...) expected 'min' or 'max'. Received: {mode!r}.")
    if not isinstance(save_top_k, int) or isinstance(save_top_k, bool) or save_top_k < -1:
        raise ValueError(
            f"ModelCheckpoint(save_top_k=...) expected an int >= -1 (-1: keep all, 0: none). Received: {save_top_k!r}."
        )
    if monitor is None and save_top_k > 1:
        raise ValueError(
            f"ModelCheckpoint(save_top_k={save_top_k}) needs monitor=... to rank files. Expected "
            "save_top_k in (-1, 0, 1) without a monitor, or pass monitor='val/loss' (for example)."
        )
    if monitor is not None and (not isinstance(monitor, str) or not monitor):
        raise ValueError(f"ModelCheckpoint(monitor=...) expected a metric name or None. Received: {monitor!r}.")
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"ModelCheckpoint({name}=...) expected an int >= 1 or None. Received: {value!r}.")
    if every_n_train_steps is None and every_n_epochs is None:
        raise ValueError(
            "ModelCheckpoint(every_n_train_steps=None, every_n_epochs=None) would never save. "
            "Expected at least one of them to be an int >= 1."
        )
    if not isinstance(filename, str) or not filename or filename.count("{") != filename.count("}"):
        raise ValueError(f"ModelCheckpoint(filename=...) expected a non-empty name with balanced braces. Received: {filename!r}.")
    for match in _PLACEHOLDER.finditer(filename):
        sample: float | int = 0 if match.group(1) in _BUILTIN else 0.0
        try:
            format(sample, match.group(2) or "")
        except ValueError:
            raise ValueError(
                f"ModelCheckpoint(filename={filename!r}): the format spec {match.group(2)!r} of "
                f"{{{match.group(1)}}} does not apply to a {type(sample).__name__}. Expected e.g. '{{val/loss:.3f}}'."
            ) from None

