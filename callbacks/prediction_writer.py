"""`BasePredictionWriter`: write predictions per batch and/or per epoch from your subclass (Lightning's)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from trainer import Callback
from trainer.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["BasePredictionWriter"]

_INTERVALS = ("batch", "epoch", "batch_and_epoch")


def _to_cpu(value: Any) -> Any:
    """`value` with its tensors on the CPU (a tensor already there is the same object)."""
    if isinstance(value, torch.Tensor):
        return value.to("cpu")
    if isinstance(value, Mapping):
        return type(value)({k: _to_cpu(v) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_to_cpu(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


class _RecordingSampler:
    """Wraps a batch sampler's sampler and keeps every index it hands out, in order."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.seen: list[int] = []

    def __iter__(self) -> Iterator[int]:
        self.seen = []
        for index in self.sampler:
            self.seen.append(int(index))
            yield index

    def __len__(self) -> int:
        return len(self.sampler)


class BasePredictionWriter(Callback):
    """Base class of callbacks that store what `predict_step` returns. Override
    `write_on_batch_end` (`write_interval="batch"`), `write_on_epoch_end` (`"epoch"`), or both
    (`"batch_and_epoch"`); with `"epoch"`, call `trainer.predict(..., return_predictions=False)`
    so predictions are not kept twice.

    `batch_indices` are the dataset indices of each batch, read from the predict loader's
    `BatchSampler` (`[]` when the loader has none, as in Lightning); `write_on_epoch_end` gets
    `predictions` (one entry per batch, on the CPU; with several predict loaders, one such
    list per loader) and `batch_indices` as Lightning passes them: a list with one list of
    per-batch indices per dataloader. `write_on_batch_end` receives the batch's
    `dataloader_idx`.

    Example:
        >>> import torch
        >>> from callbacks import BasePredictionWriter
        >>> class Writer(BasePredictionWriter):
        ...     def __init__(self, path):
        ...         super().__init__(write_interval="epoch")
        ...         self.path = path
        ...     def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        ...         torch.save({"predictions": predictions, "indices": batch_indices}, self.path)
        >>> Writer("predictions.pt").interval
        'epoch'
    """

    def __init__(self, write_interval: str = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise ValueError(f"BasePredictionWriter(write_interval={write_interval!r}) is not supported. "
                             f"Expected one of {', '.join(map(repr, _INTERVALS))}.")
        self.interval = write_interval
        self._predictions: list[list[Any]] = []  # per loader
        self._epoch_indices: list[list[list[int]]] = []  # per loader, per batch
        self._recorders: list[_RecordingSampler | None] = []  # per loader
        self._batch_samplers: list[Any] = []  # whose sampler each recorder replaced while predict runs
        self._several = False
        self._warned = False

    @property
    def on_batch(self) -> bool:
        return self.interval in ("batch", "batch_and_epoch")

    @property
    def on_epoch(self) -> bool:
        return self.interval in ("epoch", "batch_and_epoch")

    def write_on_batch_end(self, trainer: Trainer, pl_module: Any, prediction: Any, batch_indices: Sequence[int] | None,
                           batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        """Override with the logic to write one batch's `prediction`."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval!r}) expected "
                                  "write_on_batch_end to be overridden.")

    def write_on_epoch_end(self, trainer: Trainer, pl_module: Any, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        """Override with the logic to write all of the epoch's `predictions`."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval!r}) expected "
                                  "write_on_epoch_end to be overridden.")

    # ----------------------------------------------------------------- batch indices
    def _start_recording(self, loaders: list[Any]) -> None:
        self._recorders, self._batch_samplers = [], []
        for loader in loaders:
            batch_sampler = getattr(loader, "batch_sampler", None)
            if isinstance(batch_sampler, torch.utils.data.BatchSampler) and batch_sampler.batch_size:
                recorder = _RecordingSampler(batch_sampler.sampler)
                batch_sampler.sampler = recorder
                self._recorders.append(recorder)
                self._batch_samplers.append(batch_sampler)
                continue
            self._recorders.append(None)
            self._batch_samplers.append(None)
            if not self._warned:
                self._warned = True
                rank_zero_warn(f"{type(self).__name__}: couldn't infer the batch indices fetched from your "
                               f"dataloader `{type(loader).__name__}` (it has no torch BatchSampler); batch_indices are [].")

    def _stop_recording(self) -> None:
        for batch_sampler, recorder in zip(self._batch_samplers, self._recorders):
            if batch_sampler is not None and recorder is not None:
                batch_sampler.sampler = recorder.sampler
        self._recorders, self._batch_samplers = [], []

    def _indices(self, batch_idx: int, dataloader_idx: int) -> list[int]:
        recorder = self._recorders[dataloader_idx] if dataloader_idx < len(self._recorders) else None
        if recorder is None:
            return []
        size = self._batch_samplers[dataloader_idx].batch_size
        start = batch_idx * size
        return recorder.seen[start:start + size]

    # ------------------------------------------------------------------------ hooks
    def on_predict_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self._stop_recording()
        given = trainer.predict_dataloaders
        loaders = list(given.values()) if isinstance(given, Mapping) else list(given) if isinstance(given, (list, tuple)) else [given]
        self._several = len(loaders) > 1
        self._predictions = [[] for _ in loaders]
        self._epoch_indices = [[] for _ in loaders]
        self._start_recording(loaders)

    def on_predict_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        indices = self._indices(batch_idx, dataloader_idx)
        if self.on_batch:
            self.write_on_batch_end(trainer, module, outputs, indices, batch, batch_idx, dataloader_idx)
        if self.on_epoch:
            if self._recorders[dataloader_idx] is not None:
                self._epoch_indices[dataloader_idx].append(indices)
            self._predictions[dataloader_idx].append(_to_cpu(outputs))

    def on_predict_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self.on_epoch:  # Lightning's shapes: one loader's list of predictions, or one list per loader
            predictions = self._predictions if self._several else self._predictions[0]
            self.write_on_epoch_end(trainer, module, predictions, self._epoch_indices)
        self._predictions, self._epoch_indices = [], []

    def on_predict_end(self, trainer: Trainer, module: Any) -> None:
        self._stop_recording()

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        self._stop_recording()  # also when predict failed: the loader gets its own sampler back
