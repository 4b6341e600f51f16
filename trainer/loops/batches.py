"""Small pieces of the training loop: input checks, the loss contract of `training_step`,
how an epoch splits into accumulation windows, and the parameter order clipping uses."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

import torch

from trainer._utils import length_of
from trainer.loops.hooks import REFUSED_HOOKS
from trainer.module import Module
from trainer.module.transfer import batch_mover

log = logging.getLogger("trainer")

__all__ = [
    "batch_mover",
    "check_module",
    "check_loader",
    "empty_loader_message",
    "extract_loss",
    "micro_batches",
    "ordered_parameters",
]


def micro_batches(
    iterator: Iterator[Any], total: int | None, k: int, start: int, fewest: Callable[[int], int] | None = None
) -> Iterator[tuple[int, int, bool, Any]]:
    """Yield `(batch_idx, window_size, last_in_window, batch)` from `start` on.

    With a known epoch length (`len()`, or an int limit) the window sizes are arithmetic and
    batches are fetched one at a time, exactly when a hand-written loop would fetch them, and
    never past `total`: a batch the epoch will not train on is not asked for (its random
    augmentation would move the random streams). Without one, each window's
    batches are fetched before its first forward, so a short last window is known (and its
    loss divided by its own length) before any backward. Under DDP `fewest` makes every
    rank take the same window: the smallest any rank could fill, so when one rank runs out
    of data every rank ends the epoch there (the others' extra batches are dropped, with a
    warning) instead of waiting for it forever.
    """
    batch_idx = start
    if total is not None and k == 1:  # no accumulation: every batch is a window of its own
        while batch_idx < total:  # (`next`, not `for`: an iterator's own __iter__ may start it again)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch_idx, 1, True, batch
            batch_idx += 1
        return
    if total is not None:
        while batch_idx < total:  # a loader that yields more than its len(): the epoch ends at len()
            try:
                batch = next(iterator)
            except StopIteration:  # one that yields fewer: the caller closes the short window
                return
            window_start = start + (batch_idx - start) // k * k
            size = min(k, total - window_start)
            yield batch_idx, size, batch_idx - window_start == size - 1, batch
            batch_idx += 1
        return
    while True:
        window = list(itertools.islice(iterator, k))
        if fewest is not None:
            agreed = fewest(len(window))
            if agreed < len(window):
                log.warning(
                    "Another rank ran out of training batches at batch %d of this epoch: this rank drops its "
                    "remaining %d fetched batch(es) and every rank ends the epoch there (docs/distributed.md).",
                    batch_idx + agreed, len(window) - agreed,
                )
                window = window[:agreed]
        size = len(window)
        for offset, batch in enumerate(window):
            yield batch_idx, size, offset == size - 1, batch
            batch_idx += 1
        if size < k:
            return


def check_module(model: Any, stage: str = "fit") -> None:
    """A `Module`, without a hook of Lightning 1 that `stage` would silently skip.

    Raises:
        TypeError: `model` is not a `trainer.Module`.
        NotImplementedError: `model` defines `training_epoch_end`, `validation_epoch_end` or
            `test_epoch_end`, which `stage` runs no more (Lightning 2 raises the same).
    """
    if not isinstance(model, Module):
        raise TypeError(
            f"Expected a trainer.Module (a torch.nn.Module with training_step and configure_optimizers). "
            f"Received: {type(model).__name__}. Subclass trainer.Module instead of torch.nn.Module."
        )
    for hook in REFUSED_HOOKS.get(stage, ()):
        if callable(getattr(model, hook, None)):
            raise NotImplementedError(
                f"{type(model).__name__} defines `{hook}(self, outputs)`, a hook of Lightning 1 that Lightning 2 "
                f"removed and that is never called. Expected `on_{hook.replace('training', 'train')}(self)` (no "
                "outputs argument): keep what the steps return on the module (append to a list in the step), "
                "read it there and clear it."
            )


def one_loader(loader: Any) -> Any:
    """An evaluation loader given as a list (or dict) of one loader is that loader, as
    Lightning runs it; several become `EvalLoaders`, run one after the other (loops/loaders.py)."""
    from trainer.loops.loaders import as_eval_loaders

    return as_eval_loaders(loader)


def check_loader(loader: Any, name: str) -> None:
    from trainer.loops.combined import CombinedLoader
    from trainer.loops.loaders import EvalLoaders, loaders_in

    if isinstance(loader, EvalLoaders):
        for key, each in zip(loader.keys, loader.loaders):
            check_loader(each, f"{name}[{key!r}]")
        return
    if isinstance(loader, CombinedLoader):
        for index, each in enumerate(loader.flattened):
            check_loader(each, f"{name} (CombinedLoader's loader {index})")
        return
    items = loaders_in(loader)
    if items is not None:
        what = "a dict" if isinstance(loader, Mapping) else f"a {type(loader).__name__}"
        raise ValueError(
            f"{name} expected one loader. Received: {what} of {len(items)} loaders. Expected one loader, or "
            "a CombinedLoader (trainer.utilities.CombinedLoader) for several (docs/data.md)."
        )
    if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes)):
        raise TypeError(
            f"{name} expected an iterable of batches such as a torch.utils.data.DataLoader. "
            f"Received: {type(loader).__name__}."
        )
    if length_of(loader) == 0:
        raise ValueError(empty_loader_message(loader))


def empty_loader_message(loader: Any) -> str:
    detail = ""
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, Sized):
        detail = f" (dataset of {len(dataset)} samples, batch_size={getattr(loader, 'batch_size', None)}, drop_last={getattr(loader, 'drop_last', None)})"
    return (
        f"The loader yields no batches{detail}. Expected at least one batch per epoch: check the "
        "dataset, or lower batch_size / set drop_last=False."
    )


def extract_loss(output: Any, batch_idx: int) -> torch.Tensor | None:
    if type(output) is torch.Tensor and output.requires_grad and output.dim() == 0:
        return output  # the common case, checked cheaply
    loss = output.get("loss") if isinstance(output, dict) else output
    if output is None:
        return None
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
        return loss.reshape(()) if loss.dim() else loss
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        raise ValueError(
            f"training_step (batch {batch_idx}) returned a loss that does not require grad: it was "
            "computed without the model's parameters or under torch.no_grad(). Expected a scalar "
            "tensor connected to the parameters."
        )
    shown = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else f"{output!r} of type {type(output).__name__}"
    raise ValueError(
        f"training_step (batch {batch_idx}) expected to return a scalar loss tensor, a dict with a "
        f"scalar 'loss', or None to skip the batch. Received: {shown}."
    )



def ordered_parameters(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> list[torch.nn.Parameter]:
    """The parameters `optimizers` update, in `module.parameters()` order.

    A hand-written loop clips with `clip_grad_norm_(model.parameters(), ...)`; summing the
    norm in the optimizer's param-group order instead (decay/no-decay groups) changes the
    last bits of the weights. Parameters an optimizer holds outside the module come last.
    """
    wanted = {id(p) for optimizer in optimizers for group in optimizer.param_groups for p in group["params"]}
    ordered = [p for p in module.parameters() if id(p) in wanted]
    seen = {id(p) for p in ordered}
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in seen:
                    seen.add(id(p))
                    ordered.append(p)
    return ordered
