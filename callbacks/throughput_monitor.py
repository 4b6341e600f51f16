"""`ThroughputMonitor`: Lightning's `<stage>/device/samples_per_sec`-style throughput metrics."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainer import Callback
from trainer.logging.throughput import peak_tflops
from trainer.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["ThroughputMonitor", "Throughput"]


class Throughput:
    """Rolling throughput over the last `window_size` updates (Lightning's `Throughput`): `time`,
    `batches`, `samples`, `lengths`, `device/batches_per_sec`, `device/samples_per_sec`,
    `device/items_per_sec`, `device/flops_per_sec`, `device/mfu`, and with several processes the
    totals `batches_per_sec`, `samples_per_sec`, `items_per_sec`, `flops_per_sec`.

    Example:
        >>> meter = Throughput(window_size=2)
        >>> meter.update(time=1.0, batches=1, samples=4); meter.update(time=3.0, batches=2, samples=8)
        >>> meter.compute()["device/samples_per_sec"]
        2.0
    """

    def __init__(self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100,
                 separator: str = "/") -> None:
        if window_size < 2:
            raise ValueError(f"ThroughputMonitor(window_size=...) expected an int >= 2. Received: {window_size!r}.")
        self.available_flops, self.world_size, self.separator = available_flops, world_size, separator
        self._time: deque[float] = deque(maxlen=window_size)
        self._batches: deque[int] = deque(maxlen=window_size)
        self._samples: deque[int] = deque(maxlen=window_size)
        self._lengths: deque[int] = deque(maxlen=window_size)
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(self, *, time: float, batches: int, samples: int, lengths: int | None = None,
               flops: float | None = None) -> None:
        """Totals so far (time in seconds, batches, samples, lengths) and this update's FLOPs per device."""
        self._time.append(time)
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            self._lengths.append(lengths)
        if flops is not None:
            self._flops.append(flops * self.world_size)

    @property
    def times(self) -> deque[float]:
        """The times of the updates in the window (seconds since the meter's start)."""
        return self._time

    def reset(self) -> None:
        """Empty every window (a new stage starts counting from zero)."""
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()

    def compute(self) -> dict[str, float]:
        sep, size = self.separator, self.world_size
        metrics: dict[str, float] = {"time": self._time[-1], "batches": self._batches[-1], "samples": self._samples[-1]}
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        elapsed = self._time[-1] - self._time[0]
        if len(self._time) == self._time.maxlen and elapsed > 0:
            batches = (self._batches[-1] - self._batches[0]) / elapsed
            samples = (self._samples[-1] - self._samples[0]) / elapsed
            metrics[f"device{sep}batches_per_sec"] = batches
            metrics[f"device{sep}samples_per_sec"] = samples
            if size > 1:
                metrics.update(batches_per_sec=batches * size, samples_per_sec=samples * size)
            if len(self._lengths) == self._lengths.maxlen:
                items = (self._lengths[-1] - self._lengths[0]) / elapsed
                metrics[f"device{sep}items_per_sec"] = items
                if size > 1:
                    metrics["items_per_sec"] = items * size
        if len(self._flops) == self._flops.maxlen and elapsed > 0:
            flops = (sum(self._flops) - self._flops[0]) / elapsed
            if size > 1:
                metrics["flops_per_sec"] = flops
            metrics[f"device{sep}flops_per_sec"] = flops / size
            if self.available_flops:
                metrics[f"device{sep}mfu"] = flops / size / self.available_flops
        return metrics


class ThroughputMonitor(Callback):
    """Logs Lightning's throughput metrics, prefixed with the stage (`train/device/samples_per_sec`,
    `validate/...`, `test/...`, `predict/...`): a rolling average over `window_size` batches
    (default 100) of batches, samples (`batch_size_fn(batch)`), items (`length_fn(batch)`) and
    FLOPs (the module's `flops_per_batch` attribute) per second, with MFU on GPUs of known peak.
    Written on Lightning's logging steps (training: after the optimizer step of every
    `log_every_n_steps`-th step; evaluation: every `log_every_n_steps`-th batch), from rank 0.

    Unlike Lightning's, it does not synchronise the GPU after every batch: the clock is read on
    the host, and the GPU is synchronised only on logging steps, so the rates are exact at a
    logging step and average over the window. The Trainer's own `train/samples_per_sec`
    (`performance_metrics`) stays; with several processes this callback writes that name too.

    Example:
        >>> from callbacks import ThroughputMonitor
        >>> monitor = ThroughputMonitor(batch_size_fn=lambda batch: batch[0].size(0), window_size=50)
        >>> monitor.kwargs
        {'window_size': 50}
    """

    def __init__(self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None,
                 **kwargs: Any) -> None:
        unknown = set(kwargs) - {"window_size", "separator"}
        if unknown:
            raise ValueError(f"ThroughputMonitor({', '.join(sorted(unknown))}=...): not supported. "
                             "Expected batch_size_fn, length_fn, window_size, separator.")
        Throughput(**kwargs)  # checks window_size now
        self.kwargs = kwargs
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.available_flops: float | None = None
        self._meters: dict[str, Throughput] = {}
        self._t0: dict[str, float] = {}
        self._totals: dict[str, list[int]] = {}  # stage: [batches, samples, lengths]
        self._module_has_flops: bool | None = None
        self._fitting = False
        self._step_before = 0  # global_step when the current training batch started

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        device = trainer.strategy.device
        peak = None
        if device.type == "cuda":
            peak = peak_tflops(torch.cuda.get_device_name(device), trainer.precision.name)
        self.available_flops = None if peak is None else peak * 1e12
        self._fitting = stage == "fit"
        names = ["train", "validate"] if stage == "fit" else ["validate" if stage == "validate" else stage]
        for name in names:
            self._meters[name] = Throughput(self.available_flops, trainer.world_size, **self.kwargs)

    def _start(self, stage: str) -> None:
        if self._fitting or stage not in self._totals:
            self._meters[stage].reset()
            self._totals[stage] = [0, 0, 0]
        self._t0[stage] = time.perf_counter()

    def _update(self, trainer: Trainer, module: Any, stage: str, batch: Any, exact: bool) -> None:
        if exact and trainer.strategy.device.type == "cuda":
            torch.cuda.synchronize(trainer.strategy.device)  # a logging step: its time is exact
        elapsed = time.perf_counter() - self._t0[stage]
        totals = self._totals[stage]
        with torch.inference_mode():
            if self.length_fn is not None:
                totals[2] += self.length_fn(batch)
            totals[1] += self.batch_size_fn(batch)
        totals[0] += 1
        if self._module_has_flops is None:
            self._module_has_flops = hasattr(module, "flops_per_batch")
            if not self._module_has_flops:
                rank_zero_warn(f"ThroughputMonitor: define a `flops_per_batch` attribute or property in "
                               f"{type(module).__name__} to compute the FLOPs.")
        flops = module.flops_per_batch if self._module_has_flops else None
        self._meters[stage].update(time=elapsed, batches=totals[0], samples=totals[1],
                                   lengths=None if self.length_fn is None else totals[2], flops=flops)

    def _compute(self, trainer: Trainer, stage: str, step: int) -> None:
        meter = self._meters[stage]
        metrics = {f"{stage}{meter.separator}{k}": float(v) for k, v in meter.compute().items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step)

    def _should_log(self, trainer: Trainer, step: int) -> bool:
        every = trainer.log_every_n_steps
        return bool(every) and (step % every == 0 or trainer.should_stop)

    # ------------------------------------------------------------------------ training
    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        if trainer.is_global_zero:
            self._start("train")

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self._step_before = trainer.global_step

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not trainer.is_global_zero:
            return
        stepped = trainer.global_step != self._step_before  # the window's last micro-batch
        log = stepped and self._should_log(trainer, trainer.global_step)
        self._update(trainer, module, "train", batch, exact=log)
        if log:
            self._compute(trainer, "train", trainer.global_step - 1)  # Lightning's step for this batch

    # ---------------------------------------------------------------------- evaluation
    def _eval_start(self, trainer: Trainer, stage: str) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking and stage in self._meters:
            self._start(stage)

    def _eval_batch(self, trainer: Trainer, module: Any, stage: str, batch: Any, batch_idx: int) -> None:
        if not trainer.is_global_zero or trainer.sanity_checking or stage not in self._meters:
            return
        log = self._should_log(trainer, batch_idx + 1)
        self._update(trainer, module, stage, batch, exact=log)
        if log:
            self._compute(trainer, stage, batch_idx + 1)  # Lightning's step: the batch's number in the pass

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        self._eval_start(trainer, "validate")

    def on_validation_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_batch(trainer, module, "validate", batch, batch_idx)

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        if not trainer.is_global_zero or trainer.sanity_checking or not self._fitting or "train" not in self._t0:
            return
        # the validation's time is not training time: move the training clock's origin past it
        train_times, val_times = self._meters["train"].times, self._meters["validate"].times
        train_finished = self._t0["train"] + (train_times[-1] if train_times else 0.0)
        gap = self._t0["validate"] - train_finished
        self._t0["train"] += gap + (val_times[-1] if val_times else 0.0)

    def on_test_start(self, trainer: Trainer, module: Any) -> None:
        self._eval_start(trainer, "test")

    def on_test_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_batch(trainer, module, "test", batch, batch_idx)

    def on_predict_start(self, trainer: Trainer, module: Any) -> None:
        self._eval_start(trainer, "predict")

    def on_predict_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_batch(trainer, module, "predict", batch, batch_idx)
