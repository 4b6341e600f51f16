"""Resuming inside an epoch.

* The position check: `batches_done` counts micro-batches of the loader the checkpoint was
  written with, so a run resumed with another batch size (over all ranks) would skip or
  repeat samples; the position is converted where that is exact and refused otherwise, and a
  changed accumulation is said.
* What the checkpoint restores wins over what the epoch-start hooks reset: after the resumed
  epoch's `on_train_epoch_start`, the module's state dict (a recurrent state in buffers), the
  callbacks', optimizers' and schedulers' states, the random streams and `on_load_checkpoint`
  are applied once more (once per resume, from the checkpoint already in memory).
"""

from __future__ import annotations

import warnings
from collections.abc import Sized
from typing import Any

from trainer.checkpoint import CheckpointError
from trainer.loops.context import RunContext
from trainer.loops.guard import apply_lr_backoff
from trainer.loops.data_order import loader_batch_size, rebatch_problem

__all__ = ["check_resume", "restore_after_epoch_start", "restore_streams_after_train_start"]


def check_resume(context: RunContext, checkpoint: dict[str, Any], loader: Any) -> None:
    """After `restore`, with the loader the run trains on: the saved position still
    names the same samples (converted to a new batch size, or refused), and warn where
    the resume can't be exact."""
    _check_position(context, checkpoint, loader)
    reason = context.data_order.fresh_worker_iterator_warning(loader)
    if reason is not None:
        warnings.warn(f"This resume is not bit-identical to an uninterrupted run: {reason}.", stacklevel=4)


def _check_position(context: RunContext, checkpoint: dict[str, Any], loader: Any) -> None:
    """`batches_done` counts micro-batches of the saved loader: with another batch size
    it would skip or repeat samples, so it is converted when that is exact, else refused."""
    context = context
    state, done = context.state, context.state.batches_done
    if done == 0:  # an epoch boundary: nothing of the epoch was consumed
        return
    name = repr(str(checkpoint.get("_path", "<in memory>")))
    where = f"{done} batches into epoch {state.epoch}"
    old, new = context.data_order.saved_batch_size(), loader_batch_size(loader)
    # Counted over all ranks: a run on N processes takes N batches per step (a change of
    # world size that keeps the global batch is the documented, not bit-exact, re-split).
    saved_world, world = len(checkpoint.get("rng") or [None]), context.strategy.world_size
    if old is not None and (new is None or old * saved_world != new * world):
        samples = done * old * saved_world
        problem = rebatch_problem(loader)
        sampler = getattr(loader, "sampler", None)
        if problem is None and new is not None and isinstance(sampler, Sized) and samples > len(sampler) * world:
            problem = "the epoch's last, partial batch was already consumed"
        if problem is None and new is not None and samples % (new * world):
            problem = f"{samples} samples are not a whole number of batches of {new * world}"
        if problem is not None or new is None:
            on = f" on {saved_world} processes" if saved_world != world else ""
            raise CheckpointError(
                f"Checkpoint {name} was written {where} with batch_size={old} ({samples} samples); this "
                f"run's loader has batch_size={new}, and the position can't be converted: {problem}. "
                "Resuming would skip or repeat samples. Resume with batch_size="
                f"{old}{on} (and change it at an epoch boundary), or from a checkpoint written at an epoch "
                "boundary (such as last.ckpt after an epoch ended)."
            )
        state.batches_done = samples // (new * world)
        context.data_order.rebatched(new)
        warnings.warn(
            f"Checkpoint {name} was written {where} with batch_size={old}; this run's loader has "
            f"batch_size={new}, so it resumes after batch {state.batches_done} of {new}: the same {samples} "
            "samples count as consumed and the epoch goes on in the same sample order. The run is not "
            f"the one that used batch_size={new} from the start.",
            stacklevel=4,
        )
    saved_k = (checkpoint.get("config") or {}).get("accumulate_grad_batches")
    k = context.args.accumulate_grad_batches
    if isinstance(saved_k, int) and saved_k != k:
        warnings.warn(
            f"Checkpoint {name} was written {where} with accumulate_grad_batches={saved_k}; this run "
            f"uses {k}. The position is counted in micro-batches, so the epoch resumes at the same "
            f"sample, but the windows of {k} micro-batches start at the resume point: this is not "
            f"the run that used accumulate_grad_batches={k} from the start (its optimizer steps group "
            "other batches).",
            stacklevel=4,
        )


def restore_after_epoch_start(context: RunContext) -> None:
    """On a resume inside an epoch, after that epoch's `on_train_epoch_start` hooks ran
    again: what the checkpoint restores wins over what they reset. Once more, with the same
    checkpoint dict (then it is let go; only the first resumed epoch), in the checkpoint's
    restore order: the module's state dict (weights and buffers such as a recurrent state,
    through the strategy; a sharded folder from its shards), the callbacks' states (before the
    optimizers: one may reshape them), the optimizers' and schedulers' states where they are
    still the objects the checkpoint describes (a callback that swapped one in at the epoch's
    start, as StochasticWeightAveraging swaps in its SWALR, restores that one from its own
    state), the random streams last, then `on_load_checkpoint` (module, then callbacks).
    Not the loop position, the loggers, the data order or the precision, which no epoch-start
    hook resets. A resume costs one more copy of these states; a step costs nothing."""
    checkpoint = context.checkpoints.take_resumed_checkpoint()
    if checkpoint is None:
        return
    path = checkpoint.get("_path")
    source = f"Checkpoint {path!r}" if path else "The checkpoint"
    parts = ["module", "callbacks"]
    opt = context.optimizers
    if opt is not None and _still_fits(opt.optimizers, checkpoint.get("optimizers")):
        parts.append("optimizers")
    if opt is not None and _still_fits([config.scheduler for config in opt.schedulers], checkpoint.get("schedulers")):
        parts.append("schedulers")
    context.state_parts.restore(checkpoint, context.strategy.rank, source, only=(*parts, "rng"))
    saved_backoff = float((checkpoint.get("loop") or {}).get("lr_backoff", 1.0))
    if context.state.lr_backoff != saved_backoff:  # a rollback's learning-rate backoff (guard.py), once more
        apply_lr_backoff(context, context.state.lr_backoff / saved_backoff,
                         optimizers="optimizers" in parts, schedulers="schedulers" in parts)
    context.hooks.call("on_load_checkpoint", context.trainer, context.module, checkpoint)


def restore_streams_after_train_start(context: RunContext) -> None:
    """On a resume at an epoch's start, after `on_train_start`: the checkpoint's random streams
    once more, so what the hooks before training drew (`setup`, `on_fit_start` or
    `on_train_start` building a callback's own model, whose weights then come from the
    checkpoint) leaves the training's draws those of the uninterrupted run. (A resume inside an
    epoch applies them after that epoch's `on_train_epoch_start`: `restore_after_epoch_start`.)"""
    streams = context.checkpoints.take_resumed_streams()
    if streams is not None:
        path = streams.get("_path")
        source = f"Checkpoint {path!r}" if path else "The checkpoint"
        context.state_parts.restore(streams, context.strategy.rank, source, only=("rng",))


def _still_fits(targets: list[Any], saved: Any) -> bool:
    """Whether the saved optimizer (or scheduler) entries describe `targets` as they are now:
    as many, of the same classes, an optimizer with as many parameter groups of the same sizes."""
    entries = list(saved or [])
    if len(entries) != len(targets):
        return False
    for target, entry in zip(targets, entries):
        if not isinstance(entry, dict) or entry.get("class") not in (None, type(target).__qualname__):
            return False
        groups = (entry.get("state") or {}).get("param_groups") if isinstance(entry.get("state"), dict) else None
        own = getattr(target, "param_groups", None)
        if groups is not None and own is not None and [len(g["params"]) for g in groups] != [len(g["params"]) for g in own]:
            return False
    return True
