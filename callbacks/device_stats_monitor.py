"""`DeviceStatsMonitor`: the device's statistics written to the loggers on logging steps (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["DeviceStatsMonitor", "cpu_stats", "device_stats"]

_PSUTIL_MISSING = ("DeviceStatsMonitor reads CPU statistics with `psutil`, which is not installed. Install it with "
                   "`pip install psutil`, or pass DeviceStatsMonitor(cpu_stats=False) to log none.")


def cpu_stats() -> dict[str, float]:
    """Lightning's CPU statistics from `psutil`: `cpu_percent`, `cpu_vm_percent`, `cpu_swap_percent`.

    Example:
        >>> sorted(cpu_stats())  # doctest: +SKIP
        ['cpu_percent', 'cpu_swap_percent', 'cpu_vm_percent']
    """
    try:
        import psutil
    except ImportError:
        raise ModuleNotFoundError(_PSUTIL_MISSING) from None
    return {"cpu_vm_percent": psutil.virtual_memory().percent, "cpu_percent": psutil.cpu_percent(),
            "cpu_swap_percent": psutil.swap_memory().percent}


def device_stats(device: torch.device) -> dict[str, Any]:
    """What Lightning's accelerator reports for `device`: `torch.cuda.memory_stats` on a GPU
    (the caching allocator's counters, no synchronisation), `cpu_stats()` on the CPU, else {}.

    Example:
        >>> device_stats(torch.device("meta"))
        {}
    """
    if device.type == "cuda":
        return dict(torch.cuda.memory_stats(device))
    if device.type == "cpu":
        return cpu_stats()
    return {}


class DeviceStatsMonitor(Callback):
    """Writes the device's statistics to every logger before and after each training,
    validation and test batch of a logging step (Lightning's rule: every `log_every_n_steps`-th
    step, and when a stop was requested), under `DeviceStatsMonitor.<hook>/<stat>`
    (`DeviceStatsMonitor.on_train_batch_start/cpu_percent`), at the training step Lightning
    uses. On a GPU the statistics are `torch.cuda.memory_stats` (bytes, allocation counts), on a
    CPU `psutil`'s utilisation percentages.

    Args:
        cpu_stats: None: CPU statistics only when training on the CPU; True: also beside a GPU's;
            False: never.

    Raises:
        ValueError: at `fit` without a logger.
        ModuleNotFoundError: CPU statistics wanted and `psutil` not installed.

    Example:
        >>> from callbacks import DeviceStatsMonitor
        >>> DeviceStatsMonitor(cpu_stats=False).cpu_stats
        False
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise ValueError(f"DeviceStatsMonitor(cpu_stats=...) expected None, True or False. Received: {cpu_stats!r}.")
        self.cpu_stats = cpu_stats
        self._train_step = 0  # the step of the current training batch, read when it starts
        self._training = False  # between on_train_start and on_train_end

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        # The Trainer's argument, the same on every rank (`trainer.loggers` is [] off rank 0 under DDP/FSDP).
        logger = trainer.args.logger
        if logger is False or logger is None or (isinstance(logger, (list, tuple)) and not logger):
            raise ValueError("DeviceStatsMonitor writes to the loggers: it cannot run with Trainer(logger=False). "
                             "Expected a logger, or remove the callback.")
        if self.cpu_stats is not False and trainer.strategy.device.type == "cpu":
            try:
                import psutil  # noqa: F401
            except ImportError:
                raise ModuleNotFoundError(_PSUTIL_MISSING) from None

    def _should_log(self, trainer: Trainer, step: int) -> bool:
        every = trainer.log_every_n_steps
        return bool(every) and (step % every == 0 or trainer.should_stop)

    def _log(self, trainer: Trainer, hook: str, step: int) -> None:
        if not trainer.loggers:  # ranks other than 0 under DDP/FSDP write nothing
            return
        device = trainer.strategy.device
        if self.cpu_stats is False and device.type == "cpu":
            return
        stats = device_stats(device)
        if self.cpu_stats and device.type != "cpu":
            stats.update(cpu_stats())
        for logger in trainer.loggers:
            separator = getattr(logger, "group_separator", "/")
            logger.log_metrics({f"{type(self).__qualname__}.{hook}{separator}{k}": v for k, v in stats.items()}, step)

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        self._train_step, self._training = trainer.global_step, True

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._training = False

    def _eval_step(self, trainer: Trainer) -> int:
        # inside fit, Lightning counts the batch that runs the validation only after it
        return self._train_step if self._training else trainer.global_step

    # Training: Lightning counts the step from the batches that stepped, before this one's step.
    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self._train_step = trainer.global_step
        if self._should_log(trainer, self._train_step + 1):
            self._log(trainer, "on_train_batch_start", self._train_step)

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._should_log(trainer, self._train_step + 1):
            self._log(trainer, "on_train_batch_end", self._train_step)

    # Evaluation: the batch's position in the pass decides; the training step is the logger's.
    def on_validation_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_log(trainer, batch_idx + 1):
            self._log(trainer, "on_validation_batch_start", self._eval_step(trainer))

    def on_validation_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_log(trainer, batch_idx + 1):
            self._log(trainer, "on_validation_batch_end", self._eval_step(trainer))

    def on_test_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_log(trainer, batch_idx + 1):
            self._log(trainer, "on_test_batch_start", trainer.global_step)

    def on_test_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._should_log(trainer, batch_idx + 1):
            self._log(trainer, "on_test_batch_end", trainer.global_step)
