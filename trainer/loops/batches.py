"""Small pieces of the training loop: input checks, the loss contract of `training_step`,
how an epoch splits into accumulation windows, and the parameter order clipping uses."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

import torch

from trainer._utils import length_of
from trainer.module import Module

log = logging.getLogger("trainer")

__all__ = [
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

    With a known epoch length the window sizes are arithmetic and batches are fetched one
    at a time, exactly when a hand-written loop would fetch them. Without one, each window's
    batches are fetched before its first forward, so a short last window is known (and its
    loss divided by its own length) before any backward. Under DDP `fewest` makes every
    rank take the same window: the smallest any rank could fill, so when one rank runs out
    of data every rank ends the epoch there (the others' extra batches are dropped, with a
    warning) instead of waiting for it forever.
    """
    batch_idx = start
    if total is not None:
        for batch in iterator:
            if batch_idx >= total:  # a loader that yields more than its len(): the epoch ends at len()
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


def check_module(model: Any) -> None:
    if not isinstance(model, Module):
        raise TypeError(
            f"Expected a trainer.Module (a torch.nn.Module with training_step and configure_optimizers). "
            f"Received: {type(model).__name__}. Subclass trainer.Module instead of torch.nn.Module."
        )


def check_loader(loader: Any, name: str) -> None:
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
