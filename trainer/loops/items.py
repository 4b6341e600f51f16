"""Accumulation weighted by items: a `training_step` that returns
`{"loss": summed_loss, "num_items": n}` (a loss summed over `n` items, e.g. the valid tokens
of a padded batch) gets the gradient of `sum(summed_loss) / sum(num_items)` over its window's
micro-batches and, under DDP/FSDP, over all ranks.

The divisor must be known before the window's first backward to equal a hand-written loop
that divides each loss before its backward (dividing the gradients afterwards rounds
differently), so such a window keeps its micro-batches' graphs until its last forward:

    each micro-batch:  forward under autocast, gradient sync off; the graph is held
    window's last:     total = sum of the counts (summed over ranks: one collective);
                       one host read (total > 0, every count a whole number >= 0, and the
                       per-item loss for the non-finite guard);
                       each held micro-batch in order: on_before_backward;
                       backward(summed_loss / total * world_size) (DDP/FSDP average over ranks;
                       scaled under amp; synced on the last only); on_after_backward

Forwards draw random numbers in the same order as a loop that runs forward and backward
alternately (backward draws none), and the gradients accumulate in the same order, so the
weights equal that loop's bit for bit. The cost: the window's activations are held at once.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer.loops.batches import extract_loss

__all__ = ["HeldWindow", "is_item_output"]


def is_item_output(output: Any) -> bool:
    """Whether a training_step output asks for item-weighted accumulation."""
    return isinstance(output, dict) and "num_items" in output


def item_count(output: dict[str, Any], batch_idx: int) -> torch.Tensor:
    """The `num_items` of one micro-batch as a 0-dim tensor (no host read)."""
    count = output["num_items"]
    if isinstance(count, int) and not isinstance(count, bool):
        if count < 0:
            raise ValueError(
                f"training_step (batch {batch_idx}) returned num_items={count}. Expected the number of items "
                "the summed loss covers: an int or a 0-dim tensor, at least 0."
            )
        return torch.tensor(count)
    if (
        isinstance(count, torch.Tensor)
        and count.numel() == 1
        and count.dtype != torch.bool
        and not count.dtype.is_complex
    ):
        return count.detach().reshape(())
    shown = f"a tensor of shape {tuple(count.shape)} and dtype {count.dtype}" if isinstance(count, torch.Tensor) else (
        f"{count!r} of type {type(count).__name__}"
    )
    raise ValueError(
        f"training_step (batch {batch_idx}) returned num_items as {shown}. Expected the number of items the "
        "summed 'loss' covers: an int or a 0-dim tensor (e.g. mask.sum())."
    )


def mixed_window_error(batch_idx: int, first_item_batch: int | None, window_start: int | None) -> ValueError:
    """Plain and item-weighted losses in one window: an error naming the batch."""
    if first_item_batch is not None:  # an item window, then a plain loss
        detail = (
            f"batch {batch_idx} returned a plain loss, but batch {first_item_batch} of the same accumulation "
            "window returned {'loss': ..., 'num_items': ...}"
        )
    else:
        detail = (
            f"batch {batch_idx} returned {{'loss': ..., 'num_items': ...}}, but an earlier micro-batch of the same "
            f"accumulation window (batches {window_start}..{batch_idx - 1}) returned a plain loss"
        )
    return ValueError(
        f"training_step: {detail}. Expected every micro-batch of a window to return the same kind: a loss "
        "summed over its items with 'num_items' (item-weighted accumulation), or a mean loss without it."
    )


class HeldWindow:
    """The micro-batches of one item-weighted window: held losses, counts and the last output."""

    def __init__(self, optimization: Any, first_batch: int) -> None:
        self.optimization = optimization
        self.context = optimization.context
        self.first_batch = first_batch
        self.losses: list[torch.Tensor] = []
        self.counts: list[torch.Tensor] = []
        self.batches: list[int] = []  # the batch index of each count, for an error naming it
        self.last_output: Any = None
        self.synced = False  # the last held forward ran with gradient sync on (DDP armed its reducer)

    def add(self, output: dict[str, Any], loss: torch.Tensor, batch_idx: int, synced: bool) -> None:
        self.counts.append(item_count(output, batch_idx))
        self.batches.append(batch_idx)
        self.losses.append(loss)
        self.last_output, self.synced = output, synced

    def forward(self, batch: Any, batch_idx: int) -> Any:
        """A later micro-batch of the window: its forward, with gradient sync off; held."""
        context = self.context
        with context.strategy.no_sync(False):
            with context.precision.autocast():
                output = context.train_step(batch, batch_idx)
        loss = extract_loss(output, batch_idx)
        if loss is None:  # None skips the batch, as in any window
            return output
        if not is_item_output(output):
            raise mixed_window_error(batch_idx, self.first_batch, None)
        self.add(output, loss, batch_idx, synced=False)
        return output

    def close(self, batches_done: int) -> tuple[torch.Tensor, bool]:
        """The window's backward passes; returns its per-item loss and whether it is finite."""
        context = self.context
        strategy, precision = context.strategy, context.precision
        losses, world = self.losses, strategy.world_size
        device = losses[-1].device
        # summed in int64 or float64 whatever the counts' own dtype: a window of uint8/int16 counts
        # would wrap around, one of bfloat16/float16 counts would round
        # A count given as an int (or a CPU tensor) is read on the host and filled on the device:
        # `.to(device)` would copy it from pageable memory, a stream sync per count.
        wide = [_on(count, torch.float64 if count.is_floating_point() else torch.int64, device) for count in self.counts]
        total = wide[0]
        for count in wide[1:]:
            total = total + count
        total = total.to(device)
        loss_sum = losses[0].detach()
        for loss in losses[1:]:
            loss_sum = loss_sum + loss.detach()
        # Each count must be a whole number, at least 0: checked on the device, read with the total
        counts = torch.stack([_on(count, torch.float64, device) for count in self.counts])
        bad = (counts < 0) | (counts != counts.floor()) | ~torch.isfinite(counts)  # nan, inf, 2.5, -2
        first_bad = bad.to(torch.int64).argmax()
        stats = torch.stack([total.to(torch.float64), loss_sum.to(torch.float64), bad.sum(dtype=torch.float64)])
        if world > 1:  # one collective: every rank's count, loss sum and malformed counts
            stats = strategy.sum_over_ranks(stats)
            divisor = stats[0].to(total.dtype)  # exact: a count below 2**53
            window_loss = stats[1] / stats[0]
        else:
            divisor = total
            window_loss = loss_sum / total
        # the one host read of the window: the totals, and this rank's first malformed count
        first_value = counts.gather(0, first_bad.reshape(1))  # gather: indexing by a tensor would read it
        local = torch.cat([bad.sum(dtype=torch.float64).reshape(1), first_bad.to(torch.float64).reshape(1), first_value])
        total_seen, sum_seen, bad_seen, bad_here, bad_index, bad_value = torch.cat([stats, local]).tolist()
        if bad_seen:
            self._malformed(bad_here > 0, int(bad_index), bad_value)
        self.total_seen = total_seen  # the window's items over all ranks (items/s)
        if not total_seen > 0:
            state = context.state
            raise ValueError(
                f"training_step returned num_items adding up to {total_seen:g} over the accumulation window of "
                f"batches {state.batches_done}..{batches_done - 1} (epoch {state.epoch}"
                f"{', all ranks' if strategy.world_size > 1 else ''}), so the per-item loss is undefined. Expected "
                "a positive total: a window with at least one item, e.g. one valid token."
            )
        optimization = self.optimization
        want_before, want_after = optimization.want_before_backward, optimization.want_after_backward
        last = len(losses) - 1
        for i, loss in enumerate(losses):
            scaled = loss / divisor
            if scaled.dtype != loss.dtype:  # a float64 count: divide in the loss's own dtype
                scaled = loss / divisor.to(loss.dtype)
            if world > 1:  # DDP and FSDP average the ranks' gradients: undo it, so they add up
                scaled = scaled * world
            if i == last and not self.synced:
                strategy.prepare_synced_backward(self.last_output)
            with strategy.no_sync(i == last):
                if want_before:
                    context.call("on_before_backward", scaled)
                precision.backward(scaled)
                if want_after:
                    context.call("on_after_backward")
        self.losses, self.counts, self.batches, self.last_output = [], [], [], None
        return window_loss, math.isfinite(sum_seen)

    def _malformed(self, here: bool, index: int, value: float) -> None:
        """A count below 0, fractional or non-finite (on this rank, or on another: every rank raises)."""
        self.losses, self.counts, self.last_output = [], [], None
        if not here:
            raise ValueError(
                "training_step returned a malformed num_items on another rank in this accumulation window (see "
                "that rank's error). Expected the number of items each summed loss covers: a whole number, at least 0."
            )
        shown = str(int(value)) if math.isfinite(value) and value == int(value) else f"{value:g}"
        raise ValueError(
            f"training_step (batch {self.batches[index]}) returned num_items={shown} (as a tensor). Expected the "
            "number of items the summed loss covers: a whole number, at least 0 (e.g. mask.sum() of a 0/1 mask)."
        )


def _on(count: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`count.to(device, dtype)`, with no host-to-device copy for a count that lives on the host."""
    if count.device.type == "cpu" and device.type != "cpu":
        return torch.full((), count.item(), dtype=dtype, device=device)
    return count.to(device=device, dtype=dtype)
