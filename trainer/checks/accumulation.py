"""`check_accumulation`: does `training_step` give one batch of B the gradient of k
micro-batches of B/k, accumulated the Trainer's way?

The Trainer's two rules (docs/accumulation.md): a plain loss is divided by the number of
micro-batches in the window before its backward; a `{"loss": summed, "num_items": n}` return
is divided by the window's total count. One batch is one window of one micro-batch, so its
gradient is that of the loss itself (or `summed / n`). The check computes both gradients on
copies of the module and compares them; the values of the losses say which reduction the
loss uses.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trainer.checks.state import RandomStreams

__all__ = ["AccumulationReport", "check_accumulation", "split_batch"]


@dataclasses.dataclass
class AccumulationReport:
    """What `check_accumulation` found.

    Attributes:
        ok: the accumulated gradient equals the whole batch's (within `tolerance`).
        kind: what the loss is: "item-weighted (num_items)", "a mean per micro-batch", "a sum",
            or "a mean over a varying number of items".
        ratio: |accumulated gradient| / |whole batch's gradient| (1.0 when they agree).
        cosine: the cosine between the two gradients (1.0 when they point the same way).
        relative_error: |accumulated - whole| / |whole|.
        micro_batches: how many micro-batches the batch was split into.
        advice: what to change, when something should change.
    """

    ok: bool
    kind: str
    ratio: float
    cosine: float
    relative_error: float
    micro_batches: int
    advice: str = ""
    losses: list[float] = dataclasses.field(default_factory=list)
    whole_loss: float = math.nan
    ranks: int = 1  # > 1: every rank's micro-batches against all ranks' batches as one

    def __str__(self) -> str:
        verdict = "the same gradient" if self.ok else "a DIFFERENT gradient"
        where = f" on each of {self.ranks} ranks" if self.ranks > 1 else ""
        whole = "all ranks' batches as one" if self.ranks > 1 else "the whole batch"
        text = (f"accumulation check: {self.micro_batches} micro-batches{where} give {verdict} as {whole} "
                f"(gradient ratio {self.ratio:.6g}, cosine {self.cosine:.6g}, relative error {self.relative_error:.3g}); "
                f"the loss is {self.kind}.")
        return text + (f"\n  {self.advice}" if self.advice else "")


def split_batch(batch: Any, parts: int) -> list[Any]:
    """`batch` cut into `parts` micro-batches along the first dimension of every tensor (tuples,
    lists and dicts of them; other values are repeated in each)."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] < parts:
            raise ValueError(f"check_accumulation: a tensor of shape {tuple(batch.shape)} can't be split into {parts} "
                             "micro-batches. Expected at least one row per micro-batch along the first dimension.")
        return list(torch.tensor_split(batch, parts))
    if isinstance(batch, Mapping):
        pieces = {key: split_batch(value, parts) for key, value in batch.items()}
        return [type(batch)({key: pieces[key][i] for key in batch}) if type(batch) is not dict  # type: ignore[call-arg]
                else {key: pieces[key][i] for key in batch} for i in range(parts)]
    if isinstance(batch, (list, tuple)):
        columns = [split_batch(value, parts) for value in batch]
        rows = [[column[i] for column in columns] for i in range(parts)]
        if hasattr(batch, "_fields"):  # a namedtuple
            return [type(batch)(*row) for row in rows]
        return [type(batch)(row) for row in rows]
    return [batch] * parts


def _output(output: Any, where: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(loss, num_items or None) of a training_step return."""
    if isinstance(output, torch.Tensor):
        return output, None
    if isinstance(output, Mapping) and isinstance(output.get("loss"), torch.Tensor):
        count = output.get("num_items")
        return output["loss"], None if count is None else torch.as_tensor(count).detach().to(torch.float64)
    raise ValueError(f"check_accumulation: training_step returned {type(output).__name__} for {where}. Expected a loss "
                     "tensor or {'loss': tensor, 'num_items': n}.")


def _gradient(module: torch.nn.Module) -> torch.Tensor:
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).to(torch.float64).cpu()
             for p in module.parameters() if p.requires_grad]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-12)


def check_accumulation(
    module: torch.nn.Module,
    batch: Any,
    micro_batches: int | Sequence[Any] = 2,
    *,
    batch_idx: int = 0,
    tolerance: float = 1e-5,
    train_mode: bool = False,
    across_ranks: bool = True,
) -> AccumulationReport:
    """Compare the gradient `training_step` gives `batch` with the gradient the Trainer
    accumulates over its micro-batches (`accumulate_grad_batches=k`).

    Args:
        module: your `Module` (copied; its weights and gradients are left as they are).
        batch: one batch, as your loader yields it.
        micro_batches: k, to cut `batch` into k pieces along the first dimension of every tensor,
            or the micro-batches themselves (which together must be `batch`).
        batch_idx: passed to `training_step`.
        tolerance: the relative gradient error still counted as equal (rounding).
        train_mode: run in training mode (dropout on: the two sides then draw other masks and
            rarely agree). By default the copies run in eval mode, so only the loss's reduction shows.
        across_ranks: under several processes (an initialised process group), compare the
            gradient DDP makes of every rank's accumulated micro-batches with that of all ranks'
            batches joined into one (each rank passes its own batch; the copies take rank 0's
            weights). False: each rank checks its own batch alone.

    Returns:
        an `AccumulationReport`: `ok`, what kind of loss it is, the gradient ratio, and advice.
        Every random stream is as it was before the call.
    """
    if isinstance(micro_batches, int) and (isinstance(micro_batches, bool) or micro_batches < 2):
        raise ValueError(f"check_accumulation(micro_batches={micro_batches!r}): expected at least 2 micro-batches.")
    parts = split_batch(batch, micro_batches) if isinstance(micro_batches, int) else list(micro_batches)
    if len(parts) < 2:
        raise ValueError(f"check_accumulation(micro_batches={micro_batches!r}): expected at least 2 micro-batches.")
    k = len(parts)
    world = _world() if across_ranks else 1
    streams = RandomStreams()
    try:
        whole_model, acc_model = copy.deepcopy(module), copy.deepcopy(module)
        if world > 1:  # one model on every rank, as DDP makes it: rank 0's weights
            weights = _gather({k_: v.detach().cpu() for k_, v in module.state_dict().items()})[0]
        for model in (whole_model, acc_model):
            if world > 1:
                model.load_state_dict(weights)
            model.train(train_mode)
            model.zero_grad(set_to_none=True)
        whole_batch = _joined(_gather(_to_cpu(batch)), _device_of(batch)) if world > 1 else batch
        streams.restore()
        whole_loss, whole_count = _output(whole_model.training_step(whole_batch, batch_idx), "the whole batch")  # type: ignore[operator]
        whole_value = whole_loss / whole_count if whole_count is not None else whole_loss
        whole_value.backward()
        streams.restore()
        outputs = [_output(acc_model.training_step(part, batch_idx + i), f"micro-batch {i}")  # type: ignore[operator]
                   for i, part in enumerate(parts)]
        counted = [count is not None for _, count in outputs]
        if any(counted) and not all(counted):
            raise ValueError("check_accumulation: some micro-batches returned num_items and others a plain loss. "
                             "Expected every micro-batch to return the same kind, as the Trainer requires in a window.")
        if all(counted):  # the Trainer's rule: summed / the window's total (over all ranks)
            total = torch.stack([count for _, count in outputs if count is not None]).sum()
            if world > 1:
                total = torch.stack(_gather(total)).sum()
            for loss, count in outputs:
                (loss / total.to(loss.dtype)).backward()
            losses = [float(loss.detach() / count) for loss, count in outputs]  # type: ignore[operator]
        else:  # the Trainer's rule: each loss / the number of micro-batches
            for loss, _ in outputs:
                (loss / k).backward()
            losses = [float(loss.detach()) for loss, _ in outputs]
        g_whole, g_acc = _gradient(whole_model), _gradient(acc_model)
        if world > 1:  # DDP averages the ranks' gradients (num_items: scaled by the world size first)
            g_acc = torch.stack(_gather(g_acc)).sum(0) / (1 if all(counted) else world)
            losses = [value for rank in _gather(losses) for value in rank]
    finally:
        streams.restore()
    norm = float(g_whole.norm())
    ratio = float(g_acc.norm()) / norm if norm else (1.0 if float(g_acc.norm()) == 0 else math.inf)
    cosine = float(torch.dot(g_acc, g_whole)) / (norm * float(g_acc.norm())) if norm and float(g_acc.norm()) else 1.0
    error = float((g_acc - g_whole).norm()) / norm if norm else float((g_acc - g_whole).norm())
    ok = error <= tolerance
    whole = float(whole_value.detach())
    kind, advice = _judge(all(counted), ok, losses, whole, len(losses), ratio, tolerance)
    return AccumulationReport(ok=ok, kind=kind, ratio=ratio, cosine=cosine, relative_error=error, micro_batches=k,
                              advice=advice, losses=losses, whole_loss=whole, ranks=world)


def _world() -> int:
    from torch import distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather(value: Any) -> list[Any]:
    """Every rank's `value` (pickled: any backend, any object)."""
    from torch import distributed as dist

    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, value)
    return found


def _to_cpu(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.detach().cpu()
    if isinstance(batch, Mapping):
        return {key: _to_cpu(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        items = [_to_cpu(value) for value in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


def _device_of(batch: Any) -> torch.device:
    if isinstance(batch, torch.Tensor):
        return batch.device
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else []
    return next((_device_of(v) for v in values if _device_of(v).type != "cpu"), torch.device("cpu"))


def _joined(batches: list[Any], device: torch.device) -> Any:
    """The ranks' batches as one, joined along the first dimension of every tensor."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        try:
            return torch.cat(batches).to(device)
        except RuntimeError as error:
            raise ValueError(
                f"check_accumulation: the ranks' batches can't be joined into one ({error}). Expected tensors that "
                "differ only in their first dimension (pad to one length), or pass across_ranks=False to check "
                "each rank's batch alone."
            ) from None
    if isinstance(first, Mapping):
        return {key: _joined([b[key] for b in batches], device) for key in first}
    if isinstance(first, (list, tuple)):
        items = [_joined([b[i] for b in batches], device) for i in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    return first


def _judge(items: bool, ok: bool, losses: list[float], whole: float, k: int, ratio: float,
           tolerance: float) -> tuple[str, str]:
    """The kind of loss, from its values, and what to do."""
    check = max(tolerance, 1e-6)
    if items:
        kind = "item-weighted (num_items)"
        if ok:
            return kind, ""
        return kind, ("training_step returns num_items, yet the gradients differ: the loss depends on the batch "
                      "beyond its items (batch statistics such as BatchNorm in training mode, a normalisation by "
                      "the batch's own size). Keep the summed loss a plain sum over its items.")
    mean, total = sum(losses) / k, sum(losses)
    if _close(whole, mean, check):
        kind = "a mean per micro-batch"
        if ok:
            return kind, ""
        return kind, ("the losses agree but the gradients differ: training_step depends on the batch beyond its "
                      "loss value (batch statistics, a random draw that depends on the batch's size).")
    if _close(whole, total, check):
        return "a sum", (f"the loss is a sum over the batch's items: the Trainer divides each micro-batch's loss by "
                       f"k={k}, so the accumulated gradient is {ratio:.3g} times the whole batch's. Return "
                       "{'loss': summed, 'num_items': n} to weigh every item the same whatever k, or a mean.")
    return "a mean over a varying number of items", (
        f"the whole batch's loss {whole:.6g} is neither the mean ({mean:.6g}) nor the sum ({total:.6g}) of the "
        f"micro-batches' losses: it averages over a number of items that differs between micro-batches (valid "
        f"tokens of a padded batch, labelled pixels). Accumulated, every micro-batch weighs the same whatever "
        f"its count (gradient ratio {ratio:.4g}). Return {{'loss': loss_summed_over_items, 'num_items': n}} from "
        "training_step: the Trainer then divides by the window's total count (docs/accumulation.md).")
