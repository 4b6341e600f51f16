"""The Trainer's stateful parts, registered once (`trainer_parts`), in restore order.

| key | part | restored |
|---|---|---|
| `module` | the weights, read and written through the strategy (a sharded folder's tensors through `sharded.py`, whatever the strategy) | first |
| `callbacks` | each callback's `state_dict`, by `state_key` | before the optimizers (a callback may reshape them) |
| `optimizers` | the optimizer states, through the strategy | |
| `schedulers` | the LR schedulers | |
| `precision` | the precision's name and state (AMP: the GradScaler's) | |
| `loop` | epoch, global step, batch within the epoch, pending validation | |
| `loggers` | each tracker's run, continued after the restored step | after `loop` |
| `datamodule` | a DataModule's `state_dict`, when it has one | |
| `data` | the data order of the epoch, per rank | |
| `rng` | every random stream, per rank (during a validation: the one it began with) | last |
| `module_class`, `config`, `hparams`, `tuned_hparams`, `experiment`, `datamodule_hyper_parameters` | what the run was (saved, not restored; `tuned_hparams`: the values a learning-rate sweep replaced) | |

The keys and their contents are the file format (`format.py` checks the core ones before
anything is touched), so a part's key never changes.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from trainer._utils import first_line, rng_state, set_rng_state
from trainer.checkpoint.format import CheckpointError, plain_state
from trainer.checkpoint.host import CallbackState, StateHost, module_of
from trainer.checkpoint.registry import Restoring, StateRegistry
from trainer.checkpoint.trackers import continue_loggers, logger_identities

__all__ = ["trainer_parts", "callback_keys", "check_classes", "restore_module"]

log = logging.getLogger("trainer")


def trainer_parts(context: StateHost) -> StateRegistry:
    """The registry of everything a Trainer's checkpoint holds (module table above).

    The run's context holds the registry, so the parts reach the context and the registry
    only through weak references: a finished run is freed at once, without the garbage collector.
    """
    host = cast(StateHost, weakref.proxy(context))
    parts = StateRegistry()
    registry = weakref.ref(parts)

    def restoring() -> Restoring:
        current = registry()
        return current.restoring if current is not None else Restoring("The checkpoint", {})

    source = lambda: restoring().source  # noqa: E731 - the file being restored, for messages
    weights = _Weights(host, restoring)
    parts.register("module", weights.save_module, weights.load_module)
    # Callbacks before the optimizers, as Lightning: one may reshape them (BaseFinetuning's groups).
    parts.register("callbacks", lambda: _callbacks(host.callbacks), lambda saved: _load_callbacks(host, saved, source()),
                   optional=True)
    parts.register("optimizers", weights.save_optimizers, weights.load_optimizers, optional=True)
    parts.register("schedulers", lambda: _schedulers(host), lambda saved: _load_schedulers(host, saved, source()), optional=True)
    parts.register("precision", lambda: {"name": host.precision.name, "state": host.precision.state_dict()},
                   lambda saved: _load_precision(host, saved, source()))
    parts.register("loop", lambda: host.state.state_dict(), lambda saved: host.state.load_state_dict(saved))
    parts.register("loggers", lambda: _as_text(logger_identities(host.loggers)),
                   lambda saved: continue_loggers(host.loggers, saved, host.state.global_step), optional=True)
    parts.register("datamodule", lambda: _datamodule_state(host), lambda saved: _load_datamodule(host, saved),
                   optional=True)
    parts.register("data", lambda: host.data_order.state_dict(),
                   lambda saved: host.data_order.load_state_dict(saved or {}), per_rank=True, optional=True)
    parts.register("rng", lambda: _rng_to_save(host), set_rng_state, per_rank=True, restore_last=True)
    module_class = lambda: f"{type(module_of(host)).__module__}.{type(module_of(host)).__qualname__}"  # noqa: E731
    parts.register("module_class", module_class, None)
    parts.register("config", lambda: _as_text(host.args.model_dump(  # storage_options may hold credentials
        exclude={"callbacks", "logger", "precision", "storage_options"})), None)
    parts.register("hparams", lambda: _as_text(dict(getattr(module_of(host), "hparams", {}) or {})), None)
    parts.register("tuned_hparams", lambda: _as_text(dict(vars(module_of(host)).get("_tuned_hparams") or {})), None)
    parts.register("experiment", lambda: _as_text(host.experiment_config), None)
    parts.register("datamodule_hyper_parameters", lambda: _datamodule_hparams(host), None)  # Lightning's key
    return parts


class _Weights:
    """The module's and optimizers' states: the strategy reads and writes them; a sharded
    folder (FSDP's) is read from its shards on any strategy, since DCP reshards."""

    def __init__(self, host: StateHost, restoring: Callable[[], Restoring]) -> None:
        self.host = host
        self.restoring = restoring

    def save_module(self) -> dict[str, Any]:
        return self.host.strategy.module_state(module_of(self.host))

    def save_optimizers(self) -> list[dict[str, Any]]:
        module, opt = module_of(self.host), self.host.optimizers
        optimizers = opt.optimizers if opt is not None else []
        return [{"class": _class_name(o), "state": self.host.strategy.optimizer_state(module, o)} for o in optimizers]

    def load_module(self, saved: Any) -> None:
        restoring = self.restoring()
        restore_module(module_of(self.host), restoring.checkpoint, restoring.source, self.host.strategy)

    def load_optimizers(self, saved: Any) -> None:
        opt, module = self.host.optimizers, module_of(self.host)
        if opt is None:
            return
        entries = list(saved or [])
        source, checkpoint = self.restoring().source, self.restoring().checkpoint
        if "_shards" in checkpoint:
            from trainer.checkpoint.sharded import restore_sharded_optimizers

            check_classes(source, "optimizer", opt.optimizers, entries)
            restore_sharded_optimizers(module, opt.optimizers, checkpoint)
            return
        load = lambda optimizer, state: self.host.strategy.load_optimizer_state(module, optimizer, state)  # noqa: E731
        _restore_list(source, "optimizer", opt.optimizers, entries, load)


def restore_module(module: Any, checkpoint: dict[str, Any], source: str, strategy: Any = None) -> None:
    """Load the weights; on a mismatch name every missing, unexpected and mis-shaped entry.

    A module with `strict_loading = False` (Lightning's attribute) loads what matches: its
    missing entries keep their values and unexpected ones are left out (a mis-shaped entry is
    still an error, as in `load_state_dict(strict=False)`). `strategy` loads whole weights into
    its model (FSDP shards them); None: `load_state_dict`.
    """
    if "_shards" in checkpoint:  # a sharded folder (FSDP): its tensors load from the shards
        from trainer.checkpoint.sharded import restore_sharded

        restore_sharded(module, None, checkpoint)
        return
    saved = checkpoint["module"]
    own = module.state_dict()
    strict = getattr(module, "strict_loading", True) is not False
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(saved)
        if isinstance(saved[k], torch.Tensor) and isinstance(own[k], torch.Tensor) and saved[k].shape != own[k].shape
    )
    found = (("missing", missing), ("unexpected", unexpected)) if strict else ()
    parts = [f"{label}: {', '.join(items)}" for label, items in (*found, ("mis-shaped", misshaped)) if items]
    if parts:
        raise CheckpointError(
            f"{source} does not fit {type(module).__name__} (it was saved from "
            f"{checkpoint.get('module_class', 'an unknown class')}). " + "; ".join(parts) + "."
        )
    if not strict:  # what matches loads; every other entry torch's load_state_dict wants keeps its value
        # torch's own state_dict: a module's state_dict override may leave entries out (a frozen backbone)
        whole = torch.nn.Module.state_dict(module)
        kept = {k: v.full_tensor() if callable(getattr(v, "full_tensor", None)) else v  # FSDP: every rank gathers
                for k, v in whole.items() if k not in saved}
        if kept or unexpected:
            log.info("%s: strict_loading=False, so %s keep their values and %s are left out.", source,
                     sorted(kept) or "no entries", unexpected or "no entries")
        saved = {k: saved[k] if k in saved else kept[k] for k in whole}
    if strategy is not None:
        strategy.load_module_state(module, saved)
    else:
        module.load_state_dict(saved)


def _schedulers(host: StateHost) -> list[dict[str, Any]]:
    opt = host.optimizers
    return [{"class": _class_name(c.scheduler), "state": c.scheduler.state_dict()} for c in (opt.schedulers if opt else [])]


def _load_schedulers(host: StateHost, saved: Any, source: str) -> None:
    if host.optimizers is not None:
        _restore_list(source, "LR scheduler", [c.scheduler for c in host.optimizers.schedulers], list(saved or []))


def _load_precision(host: StateHost, saved: dict[str, Any], source: str) -> None:
    if saved["name"] == host.precision.name:
        host.precision.load_state_dict(saved["state"])
    elif saved["state"]:
        warnings.warn(
            f"{source} was saved with precision={saved['name']!r}; this run uses "
            f"{host.precision.name!r}, so the saved GradScaler state (loss scale and growth "
            "tracker) is dropped.",
            stacklevel=6,
        )


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


def _callbacks(callbacks: Sequence[CallbackState]) -> dict[str, Any]:
    """Each callback's state by key; as in Lightning, an empty state is left out, so that
    callback's `load_state_dict` is not called on resume."""
    states = ((key, callback.state_dict()) for key, callback in zip(callback_keys(callbacks), callbacks))
    return {key: state for key, state in states if state}


def _load_callbacks(host: StateHost, saved: Any, source: str) -> None:
    remaining = dict(saved or {})
    for key, callback in zip(callback_keys(host.callbacks), host.callbacks):
        # the key earlier versions of a callback wrote (`_legacy_state_keys`) still finds its state
        older = [k for k in getattr(callback, "_legacy_state_keys", ()) if k in remaining and key not in remaining]
        if key in remaining or older:
            callback.load_state_dict(remaining.pop(key if key in remaining else older[0]))
    if remaining:
        log.info("%s holds state of callbacks this run does not have: %s.", source, ", ".join(remaining))


def _datamodule_state(host: StateHost) -> Any:
    datamodule: Any = host.datamodule
    return datamodule.state_dict() if callable(getattr(datamodule, "state_dict", None)) else None


def _datamodule_hparams(host: StateHost) -> Any:
    """The DataModule's hyperparameters (what `DataModule.load_from_checkpoint` rebuilds it from)."""
    hparams = getattr(host.datamodule, "hparams", None)
    return _as_text(dict(hparams)) if isinstance(hparams, dict) and hparams else None


def _load_datamodule(host: StateHost, saved: Any) -> None:
    datamodule: Any = host.datamodule
    if saved is not None and callable(getattr(datamodule, "load_state_dict", None)):
        datamodule.load_state_dict(saved)


def _rng_to_save(host: StateHost) -> dict[str, Any]:
    """The random state a resume must start from: during a validation inside fit, the one it
    began with (the resume runs that validation again); otherwise the current one."""
    pending = host.fit_loop.rng_for_checkpoint() if host.fit_loop is not None else None
    return pending if pending is not None else rng_state()


def _class_name(obj: Any) -> str:
    return type(obj).__qualname__


def _restore_list(source: str, what: str, targets: list[Any], saved: list[dict[str, Any]], load: Any = None) -> None:
    check_classes(source, what, targets, saved)
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


def check_classes(source: str, what: str, targets: list[Any], saved: list[dict[str, Any]]) -> None:
    """The saved optimizers (or schedulers) are as many, and of the same classes, as this run's."""
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


def _as_text(value: Any) -> Any:
    """What describes a run (arguments, hyperparameters, a YAML config) as plain data."""
    return plain_state(value, as_text=True)
