"""The Trainer's whole state as a checkpoint dict, and back (`trainer.checkpoint` re-exports
these): the registered parts (`trainer/checkpoint/parts.py`) with the format marker, the cut
and Lightning's keys. The file format, atomic writes and checked loads are in `format.py`."""

from __future__ import annotations

import warnings
from typing import Any

from trainer.checkpoint.format import FORMAT, FORMAT_VERSION, plain_state
from trainer.checkpoint.host import StateHost, module_of
from trainer.lightning.checkpoint import add_lightning_keys, adopt_streams, reunite
from trainer.checkpoint.parts import callback_keys, restore_module

__all__ = ["callback_keys", "cut_problem", "collect_state", "collect_weights", "restore_module", "restore_state"]


def cut_problem(trainer: StateHost) -> str | None:
    """Why the current state is not a cut at an optimizer-step boundary, or None if it is."""
    manual = trainer.manual
    inside = manual.cut_problem() if manual is not None else None
    if inside is not None:
        return inside
    order = trainer.data_order
    if order.fetching:
        return (
            "it was requested while the loader was producing a batch (an interrupt inside "
            "DataLoader.__next__): the random draws for that batch are already in the saved random state"
        )
    taken = order.unconsumed(trainer.state.epoch, trainer.state.batches_done)
    # Manual optimization judged its gradients above (left over after the module's own
    # opt.step() they are no window; see ManualOptimization.open_window).
    # Gradients an automatic step left for zero_grad at Lightning's place (an `optimizer_zero_grad`
    # override or an `on_before_zero_grad` hook) belong to the finished step: a clean cut.
    loop = trainer.fit_loop
    accumulated = manual is None and not (loop is not None and loop.gradients_spent()) and any(
        p.grad is not None for optimizer in (trainer.optimizers.optimizers if trainer.optimizers is not None else []) for group in optimizer.param_groups for p in group["params"]
    )
    if not taken and not accumulated:
        return None
    step = trainer.state.global_step + 1
    if taken:
        detail = f"{taken} micro-batch(es) of optimizer step {step} were already taken from the loader"
    else:
        detail = f"gradients for optimizer step {step} are accumulated"
    return f"it was requested inside an accumulation window ({detail}, but that step has not run)"


def collect_state(trainer: StateHost, *, allow_partial: bool = False, target: Any = None) -> dict[str, Any]:
    """Everything needed to continue exactly: a dict of `state_dict`s and plain data.

    Raises:
        RuntimeError: the state is inside an accumulation window and `allow_partial` is
            False (a checkpoint must be a cut at an optimizer-step boundary).
    """
    loop = trainer.fit_loop
    if loop is not None and trainer.module is not None:
        loop.reconcile(raise_now=False)  # skipped_steps exact in the file; any error waits for the loop
    problem = cut_problem(trainer)
    if problem is not None and not allow_partial:
        raise RuntimeError(
            f"Can't write checkpoint {str(target)!r}: {problem}. A checkpoint is a cut at an "
            "optimizer-step boundary, and accumulated gradients are not saved. Expected a call "
            "between steps: from Callback.on_train_batch_end of a window's last micro-batch, "
            "on_train_step_end, on_train_epoch_start/end, on_fit_end, or outside fit."
        )
    module_of(trainer)  # an error that says so when there is no module yet
    state: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION}
    state.update(trainer.state_parts.collect(gather=trainer.strategy.all_gather_object))
    state["cut"] = {"clean": problem is None, "reason": problem}
    add_lightning_keys(state, state["loop"])  # also read the Lightning way: the same objects, stored once
    before = dict(state)
    trainer.call("on_save_checkpoint", state)
    reunite(state, before)
    return plain_state(state, target)


def collect_weights(trainer: StateHost, target: Any = None) -> dict[str, Any]:
    """A weights-only checkpoint: the module's state dict with the format marker (for
    evaluation and export; it has no optimizer, loop or random state to resume from)."""
    module = module_of(trainer)
    state = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "weights_only": True,
        "module": trainer.strategy.module_state(module),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "hparams": plain_state(dict(getattr(module, "hparams", {}) or {}), as_text=True),
    }
    add_lightning_keys(state, trainer.state.state_dict())
    return plain_state(state, target)


def _source(checkpoint: dict[str, Any]) -> str:
    path = checkpoint.get("_path")
    return f"Checkpoint {path!r}" if path else "The checkpoint"


def restore_state(trainer: StateHost, checkpoint: dict[str, Any]) -> None:
    """Put the Trainer back exactly where `collect_state` found it: every registered part
    (`trainer/checkpoint/parts.py`), then the module's and callbacks' `on_load_checkpoint`."""
    source = _source(checkpoint)
    lightning = adopt_streams(checkpoint, source)  # a file Lightning wrote: this run's streams
    module_of(trainer)
    parts = trainer.state_parts
    world_size = trainer.strategy.world_size
    written = parts.per_rank_counts(checkpoint).get("rng", world_size)
    if written != world_size:
        warnings.warn(
            f"{source} was written by {written} process(es); this run has {world_size}. Each rank "
            f"takes the random streams and data-order state of the saved rank with its number (or "
            "the last one), so the run continues, but not bit-identically to an uninterrupted run "
            "(the data is split differently and the random streams differ). Expected the same "
            "number of processes for an exact resume.",
            stacklevel=4,
        )
    parts.restore(checkpoint, trainer.strategy.rank, source)
    cut = checkpoint.get("cut") or {}
    if cut.get("clean") is False:
        warnings.warn(
            f"{source} was not written at a clean cut "
            f"({cut.get('reason')}). Training continues from the last completed step "
            f"({trainer.state.global_step}) and re-reads that window's batches, but the random streams "
            "are those of the interrupt, so the result is not bit-identical to an uninterrupted run.",
            stacklevel=4,
        )
    trainer.call("on_load_checkpoint", checkpoint)
    if lightning is not None:  # what was taken over, and what this process's own streams stand in for
        warnings.warn(lightning, stacklevel=4)
