"""Lightning's run-wide Trainer flags, with Lightning's meaning: `deterministic`, `benchmark`,
`detect_anomaly` (process-wide torch switches, set while the Trainer runs and restored after,
where Lightning sets them for good), `barebones`, `overfit_batches` and `sync_batchnorm`.

Example:
    >>> import torch
    >>> from trainer._args import TrainerArgs
    >>> with torch_flags(TrainerArgs(deterministic="warn")):
    ...     torch.is_deterministic_algorithms_warn_only_enabled()
    True
    >>> torch.is_deterministic_algorithms_warn_only_enabled()
    False
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer._args import TrainerArgs

__all__ = ["torch_flags", "check_flags", "barebones_args", "overfit_loader", "sync_batchnorm"]

log = logging.getLogger("trainer")


def check_flags(args: TrainerArgs) -> TrainerArgs:
    """At construction: Lightning's warnings and `barebones`/`overfit_batches` applied to the other arguments."""
    if args.benchmark and args.deterministic:
        warnings.warn(
            "You passed `deterministic=True` and `benchmark=True`. Note that PyTorch ignores "
            "torch.backends.cudnn.deterministic=True when torch.backends.cudnn.benchmark=True.", stacklevel=3,
        )
    if args.deterministic and "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        # cuBLAS reads it once, at the process's first CUDA matmul: set at construction (as
        # Lightning does), before the script's own first forward, not when fit starts.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            log.warning(
                "Trainer(deterministic=%r): CUDA is already in use in this process, so cuBLAS may have read "
                "CUBLAS_WORKSPACE_CONFIG already, without it; a CUDA matmul under deterministic algorithms then "
                "raises. Set CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment before the process starts, or "
                "build the Trainer before running anything on the GPU.", args.deterministic,
            )
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if args.barebones:
        args = barebones_args(args)
    bars = [type(cb).__name__ for cb in args.callbacks or [] if callable(getattr(cb, "make_progress_bar", None))]
    if len(bars) > 1:
        raise ValueError(f"Trainer(callbacks=[...]) has {len(bars)} progress-bar callbacks ({', '.join(bars)}); "
                         "only one progress bar is supported (Lightning's rule). Expected at most one.")
    if bars and not args.enable_progress_bar:
        raise ValueError(f"Trainer was configured with enable_progress_bar=False but found {bars[0]} in the callbacks "
                         "list (Lightning's rule). Expected one of them, not both.")
    if args.overfit_batches:  # Lightning: n batches of the training and of the validation loader
        args = args.model_copy(update={"limit_train_batches": args.overfit_batches, "limit_val_batches": args.overfit_batches})
    return args


@contextlib.contextmanager
def torch_flags(args: TrainerArgs) -> Iterator[None]:
    """`deterministic`, `benchmark` and `detect_anomaly` in force while the block runs."""
    deterministic, benchmark = args.deterministic, args.benchmark
    saved = (
        torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled(),
    )
    try:
        if deterministic is not None:
            torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
            if deterministic:
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # what deterministic cuBLAS needs (Lightning sets it too)
        if benchmark is not None:
            torch.backends.cudnn.benchmark = benchmark
        elif deterministic:
            torch.backends.cudnn.benchmark = False
        if args.detect_anomaly:
            torch.autograd.set_detect_anomaly(True)
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]
        if saved[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[3]
        torch.autograd.set_detect_anomaly(saved[4], check_nan=saved[5])


def barebones_args(args: TrainerArgs) -> TrainerArgs:
    """`barebones=True`: no logger, progress bar, model summary, checkpointing or sanity check.

    An argument that asks for one of them explicitly (a logger object, a profiler, a checkpoint,
    progress-bar or summary callback, `detect_anomaly`, `fast_dev_run`) is an error, as in Lightning.
    """
    asked = [f"logger={type(args.logger).__name__}(...)"] if args.logger not in (True, False, None) else []
    asked += [f"{name}={getattr(args, name)!r}" for name in ("profiler", "detect_anomaly", "fast_dev_run") if getattr(args, name)]
    for callback in args.callbacks or []:
        names = {cls.__name__ for cls in type(callback).__mro__}
        if hasattr(callback, "best_model_path") or callable(getattr(callback, "make_progress_bar", None)) or "ModelSummary" in names:
            asked.append(f"callbacks=[{type(callback).__name__}(...)]")
    if asked:
        raise ValueError(
            f"Trainer(barebones=True) turns off logging, progress bars, the model summary and checkpointing, so "
            f"it can't be combined with {', '.join(asked)}. Expected barebones=True without them, or barebones=False."
        )
    log.info("Running in Trainer(barebones=True) mode: no logger, progress bar, model summary, checkpointing or sanity check.")
    return args.model_copy(update={
        "logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False,
        "num_sanity_val_steps": 0,
    })


def overfit_loader(loader: Any, which: str) -> Any:
    """`loader` reading its dataset in order (Lightning turns the shuffle off for `overfit_batches`)."""
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

    from trainer.strategies.sampler import rebuild_loader

    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    batch_sampler = loader.batch_sampler
    inner = batch_sampler.sampler if isinstance(batch_sampler, BatchSampler) else loader.sampler
    if isinstance(inner, SequentialSampler):
        return loader
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        warnings.warn(f"overfit_batches: the {which} loader has a custom batch_sampler, so its order is kept.", stacklevel=3)
        return loader
    warnings.warn(
        f"You requested to overfit but enabled {which} dataloader shuffling. We are turning off the {which} "
        "dataloader shuffling for you.", stacklevel=3,
    )
    return rebuild_loader(loader, SequentialSampler(loader.dataset))  # type: ignore[arg-type]


def sync_batchnorm(module: torch.nn.Module, world_size: int) -> None:
    """Under several processes, turn the module's BatchNorm layers into SyncBatchNorm (in place)."""
    if world_size <= 1:
        return
    plain = (torch.nn.modules.batchnorm._BatchNorm,)
    if any(isinstance(m, plain) and not isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules()):
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        assert converted is module  # the root is the user's Module: only its children change
