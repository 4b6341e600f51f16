"""The Trainer's whole state as a checkpoint dict, and back (`trainer.checkpoint` re-exports
these; the file format, atomic writes and checked loads are in `trainer/checkpoint/format.py`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from trainer._utils import first_line, rng_state, set_rng_state
from trainer.checkpoint.format import FORMAT, FORMAT_VERSION, CheckpointError, plain_state
from trainer.checkpoint.host import CallbackState, PendingWork, StateHost, module_of
from trainer.checkpoint.trackers import continue_loggers, logger_identities
from trainer.checkpoint.layout import add_lightning_keys, adopt_streams, reunite

__all__ = ["callback_keys", "cut_problem", "collect_state", "collect_weights", "restore_module", "restore_state"]

log = logging.getLogger("trainer")


def callback_keys(callbacks: Sequence[CallbackState]) -> list[str]:
    """Each callback's key in a checkpoint; repeated keys get `#2`, `#3`, ... in list order."""
    keys: list[str] = []
    for callback in callbacks:
        key = callback.state_key
        if key in keys:
            number = 2
            while f"{key}#{number}" in keys:
                number += 1
            key = f"{key}#{number}"
        keys.append(key)
    return keys


def cut_problem(trainer: StateHost) -> str | None:
    """Why the current state is not a cut at an optimizer-step boundary, or None if it is."""
    manual = trainer._manual
    inside = manual.cut_problem() if manual is not None else None
    if inside is not None:
        return inside
    order = trainer._data_order
    if order.fetching:
        return (
            "it was requested while the loader was producing a batch (an interrupt inside "
            "DataLoader.__next__): the random draws for that batch are already in the saved random state"
        )
    taken = order.unconsumed(trainer.state.epoch, trainer.state.batches_done)
    # Manual optimization judged its gradients above (left over after the module's own
    # opt.step() they are no window; see ManualOptimization.open_window).
    accumulated = manual is None and any(
        p.grad is not None for optimizer in trainer.optimizers for group in optimizer.param_groups for p in group["params"]
    )
    if not taken and not accumulated:
        return None
    step = trainer.global_step + 1
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
    loop = trainer._loop
    if loop is not None and trainer._module is not None:
        loop.reconcile(raise_now=False)  # skipped_steps exact in the file; any error waits for the loop
    problem = cut_problem(trainer)
    if problem is not None and not allow_partial:
        raise RuntimeError(
            f"Can't write checkpoint {str(target)!r}: {problem}. A checkpoint is a cut at an "
            "optimizer-step boundary, and accumulated gradients are not saved. Expected a call "
            "between steps: from Callback.on_train_batch_end of a window's last micro-batch, "
            "on_train_step_end, on_train_epoch_start/end, on_fit_end, or outside fit."
        )
    opt = trainer._opt
    module = module_of(trainer)
    strategy = trainer.strategy
    state: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "module": module.state_dict(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "optimizers": [
            {"class": _class_name(o), "state": o.state_dict()} for o in (opt.optimizers if opt is not None else [])
        ],
        "schedulers": [
            {"class": _class_name(c.scheduler), "state": c.scheduler.state_dict()}
            for c in (opt.schedulers if opt is not None else [])
        ],
        "precision": {"name": trainer.precision.name, "state": trainer.precision.state_dict()},
        "loop": trainer.state.state_dict(),
        "rng": strategy.all_gather_object(_rng_to_save(loop)),
        "data": strategy.all_gather_object(trainer._data_order.state_dict()),
        "cut": {"clean": problem is None, "reason": problem},
        "callbacks": {
            key: cb.state_dict() for key, cb in zip(callback_keys(trainer.callbacks), trainer.callbacks)
        },
        "config": _as_text(trainer.args.model_dump(exclude={"callbacks", "logger", "precision"})),
        "hparams": _as_text(dict(getattr(module, "hparams", {}) or {})),
        "experiment": _as_text(trainer.experiment_config),
        "loggers": _as_text(logger_identities(trainer.loggers)),  # each tracker's run, continued on resume
    }
    datamodule: Any = trainer._datamodule
    if callable(getattr(datamodule, "state_dict", None)):
        state["datamodule"] = datamodule.state_dict()
    add_lightning_keys(state, state["loop"])  # also read the Lightning way: the same objects, stored once
    before = dict(state)
    trainer._call("on_save_checkpoint", state)
    reunite(state, before)
    return plain_state(state, target)


def _rng_to_save(loop: PendingWork | None) -> dict[str, Any]:
    """The random state a resume must start from: during a validation inside fit, the one it
    began with (the resume runs that validation again); otherwise the current one."""
    pending = loop.rng_for_checkpoint() if loop is not None else None
    return pending if pending is not None else rng_state()


def collect_weights(trainer: StateHost, target: Any = None) -> dict[str, Any]:
    """A weights-only checkpoint: the module's state dict with the format marker (for
    evaluation and export; it has no optimizer, loop or random state to resume from)."""
    module = module_of(trainer)
    state = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "weights_only": True,
        "module": module.state_dict(),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "hparams": plain_state(dict(getattr(module, "hparams", {}) or {}), as_text=True),
    }
    add_lightning_keys(state, trainer.state.state_dict())
    return plain_state(state, target)


def restore_module(module: Any, checkpoint: dict[str, Any], source: str, strategy: Any = None) -> None:
    """Load the weights; on a mismatch name every missing, unexpected and mis-shaped entry.

    `strategy` loads whole weights into its model (FSDP shards them); None: `load_state_dict`.
    """
    if "_shards" in checkpoint:  # a sharded folder (FSDP): its tensors load from the shards
        from trainer.checkpoint.sharded import restore_sharded

        restore_sharded(module, None, checkpoint)
        return
    saved = checkpoint["module"]
    own = module.state_dict()
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(saved[k], torch.Tensor) and isinstance(own[k], torch.Tensor) and saved[k].shape != own[k].shape
    )
    if missing or unexpected or misshaped:
        parts = [
            f"{label}: {', '.join(items)}"
            for label, items in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
            if items
        ]
        raise CheckpointError(
            f"{source} does not fit {type(module).__name__} (it was saved from "
            f"{checkpoint.get('module_class', 'an unknown class')}). " + "; ".join(parts) + "."
        )
    if strategy is not None:
        strategy.load_module_state(module, saved)
    else:
        module.load_state_dict(saved)


def _source(checkpoint: dict[str, Any]) -> str:
    path = checkpoint.get("_path")
    return f"Checkpoint {path!r}" if path else "The checkpoint"


def restore_state(trainer: StateHost, checkpoint: dict[str, Any]) -> None:
    """Put the Trainer back exactly where `collect_state` found it."""
    source = _source(checkpoint)
    lightning = adopt_streams(checkpoint, source) if "lightning" in (checkpoint.get("origin") or {}) else None
    opt = trainer._opt
    module = module_of(trainer)
    if "_shards" in checkpoint:  # a sharded folder (FSDP): weights and optimizer states from the shards
        from trainer.checkpoint.sharded import restore_sharded

        optimizers = opt.optimizers if opt is not None else []
        _check_classes(source, "optimizer", optimizers, _saved_list(checkpoint, "optimizer"))
        restore_sharded(module, optimizers, checkpoint)
    else:
        restore_module(module, checkpoint, source, trainer.strategy)
        if opt is not None:
            load = lambda optimizer, state: trainer.strategy.load_optimizer_state(module, optimizer, state)  # noqa: E731
            _restore_list(source, "optimizer", opt.optimizers, _saved_list(checkpoint, "optimizer"), load)
    if opt is not None:
        _restore_list(source, "LR scheduler", [c.scheduler for c in opt.schedulers], _saved_list(checkpoint, "lr_scheduler"))
    _restore_precision(trainer, checkpoint["precision"], source)
    trainer.state.load_state_dict(checkpoint["loop"])
    continue_loggers(trainer.loggers, checkpoint.get("loggers"), trainer.global_step)  # before any logger writes
    saved_callbacks = dict(checkpoint.get("callbacks", {}))
    for key, callback in zip(callback_keys(trainer.callbacks), trainer.callbacks):
        if key in saved_callbacks:
            callback.load_state_dict(saved_callbacks.pop(key))
    if saved_callbacks:
        log.info("%s holds state of callbacks this run does not have: %s.", source, ", ".join(saved_callbacks))
    rank, world_size = trainer.strategy.rank, trainer.strategy.world_size
    rngs, data = checkpoint["rng"], checkpoint.get("data") or [{}]
    if len(rngs) != world_size:
        warnings.warn(
            f"{source} was written by {len(rngs)} process(es); this run has {world_size}. Each rank "
            f"takes the random streams and data-order state of the saved rank with its number (or "
            "the last one), so the run continues, but not bit-identically to an uninterrupted run "
            "(the data is split differently and the random streams differ). Expected the same "
            "number of processes for an exact resume.",
            stacklevel=4,
        )
    datamodule: Any = trainer._datamodule
    if checkpoint.get("datamodule") is not None and callable(getattr(datamodule, "load_state_dict", None)):
        datamodule.load_state_dict(checkpoint["datamodule"])
    trainer._data_order.load_state_dict(data[min(rank, len(data) - 1)])
    set_rng_state(rngs[min(rank, len(rngs) - 1)])
    cut = checkpoint.get("cut") or {}
    if cut.get("clean") is False:
        warnings.warn(
            f"{source} was not written at a clean cut "
            f"({cut.get('reason')}). Training continues from the last completed step "
            f"({trainer.global_step}) and re-reads that window's batches, but the random streams "
            "are those of the interrupt, so the result is not bit-identical to an uninterrupted run.",
            stacklevel=4,
        )
    trainer._call("on_load_checkpoint", checkpoint)
    if lightning is not None:  # what was taken over, and what this process's own streams stand in for
        warnings.warn(lightning, stacklevel=4)


def _class_name(obj: Any) -> str:
    return type(obj).__qualname__


def _saved_list(checkpoint: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The saved optimizers or schedulers as [{"class", "state"}] (`upgrade` gives older files these keys)."""
    return list(checkpoint.get({"optimizer": "optimizers", "lr_scheduler": "schedulers"}[kind], []))


def _restore_list(source: str, what: str, targets: list[Any], saved: list[dict[str, Any]], load: Any = None) -> None:
    _check_classes(source, what, targets, saved)
    for index, (target, entry) in enumerate(zip(targets, saved)):
        label = f"{what} {index}" if len(targets) > 1 else what
        try:
            if load is not None:
                load(target, entry["state"])
            else:
                target.load_state_dict(entry["state"])
        except (ValueError, LookupError, TypeError, RuntimeError) as error:
            raise CheckpointError(
                f"{source}: its {label} state does not fit this run's {_class_name(target)} "
                f"({first_line(error)}). Expected the configure_optimizers of the saved run."
            ) from None


def _check_classes(source: str, what: str, targets: list[Any], saved: list[dict[str, Any]]) -> None:
    if len(saved) != len(targets):
        raise CheckpointError(
            f"{source} holds {len(saved)} {what}(s); this run's configure_optimizers returned "
            f"{len(targets)}. Expected the configure_optimizers of the saved run."
        )
    for index, (target, entry) in enumerate(zip(targets, saved)):
        label = f"{what} {index}" if len(targets) > 1 else what
        saved_class = entry.get("class")
        if saved_class is not None and saved_class != _class_name(target):
            raise CheckpointError(
                f"{source}: {label} was saved from a {saved_class}, but this run's is a "
                f"{_class_name(target)}. Expected the configure_optimizers of the saved run."
            )


def _restore_precision(trainer: StateHost, saved: dict[str, Any], source: str) -> None:
    if saved["name"] == trainer.precision.name:
        trainer.precision.load_state_dict(saved["state"])
    elif saved["state"]:
        warnings.warn(
            f"{source} was saved with precision={saved['name']!r}; this run uses "
            f"{trainer.precision.name!r}, so the saved GradScaler state (loss scale and growth "
            "tracker) is dropped.",
            stacklevel=5,
        )


def _as_text(value: Any) -> Any:
    """What describes a run (arguments, hyperparameters, a YAML config) as plain data."""
    return plain_state(value, as_text=True)
