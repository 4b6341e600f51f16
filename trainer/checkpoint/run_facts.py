"""Which experiment a checkpoint belongs to: what it says of the run that wrote it (`run_facts`), the
same of this run (`facts_of_run`), and what differs between the two (`differences`), so that
`ckpt_path="last"` continues a run of the same experiment only.

Example:
    >>> differences({"model class": "train.Net", "precision": "32-true"},
    ...             {"model class": "__main__.Net", "precision": "bf16-mixed"})
    "precision '32-true' there, 'bf16-mixed' here"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from trainer.checkpoint.format import plain_state
from trainer.checkpoint.storage import Location

__all__ = ["RunOf", "differences", "facts_of_run", "run_facts"]


def run_facts(state: dict[str, Any], path: Location) -> dict[str, Any]:
    """What a checkpoint says of the run that wrote it, as far as "the same experiment" goes:
    the module's class and hyperparameters, a YAML run's data class, the precision, the number
    of processes and whether it is a sharded folder. Small entries only (no tensor is read)."""
    experiment = state.get("experiment")
    data = experiment.get("data") if isinstance(experiment, dict) else None
    precision = state.get("precision")
    rng = state.get("rng")
    sharded = state.get("sharded")
    world = sharded.get("world_size") if isinstance(sharded, dict) else len(rng) if isinstance(rng, list) else None
    return {
        "model class": state.get("module_class"),
        "hyperparameters": _as_built(state.get("hparams"), state.get("tuned_hparams")),
        "data class": data.get("class_path") if isinstance(data, dict) else None,
        "precision": precision.get("name") if isinstance(precision, dict) else None,
        "processes": world,
        "checkpoint kind": "sharded folder" if isinstance(sharded, dict) or path.is_dir() else "single file",
    }


def _as_built(hparams: Any, tuned: Any) -> Any:
    """The hyperparameters the module was built with: a learning-rate sweep's suggestion
    (`tuned_hparams` holds what it replaced) does not make the run another experiment."""
    if not isinstance(hparams, dict) or not isinstance(tuned, dict) or not tuned:
        return hparams
    return {**hparams, **{k: v for k, v in tuned.items() if k in hparams}}


def differences(saved: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    """What differs between a checkpoint's `run_facts` and this run's ('' when nothing does);
    a fact that either side does not know is not compared."""
    found = []
    for name, value in expected.items():
        there = saved.get(name)
        if value is None or there is None or _lists(there) == _lists(value) or _same_class(name, there, value):
            continue
        if isinstance(there, Mapping) and isinstance(value, Mapping):  # hyperparameters: the keys that differ
            keys = sorted(k for k in set(there) | set(value) if _lists(there.get(k, _UNSET)) != _lists(value.get(k, _UNSET)))
            found.append(f"{name}: " + ", ".join(
                f"{k} {there.get(k, '(unset)')!r} there, {value.get(k, '(unset)')!r} here" for k in keys))
        else:
            found.append(f"{name} {there!r} there, {value!r} here")
    return "; ".join(found)


_UNSET = object()


def _lists(value: Any) -> Any:
    """`value` with its tuples as lists: a checkpoint of an older version saved a tuple
    hyperparameter as a list, which is the same experiment."""
    if isinstance(value, Mapping):
        return {key: _lists(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(item) for item in value]
    return value


def _same_class(name: str, there: Any, here: Any) -> bool:
    """A script's class, `__main__.Net` (run as `python train.py`), is the class another script
    imports from it (`train.Net`): the same qualified name after the module."""
    if name not in ("model class", "data class") or not (isinstance(there, str) and isinstance(here, str)):
        return False
    main, other = (there, here) if there.startswith("__main__.") else (here, there)
    return main.startswith("__main__.") and other.endswith("." + main[len("__main__."):])


class RunOf(Protocol):
    """What `facts_of_run` reads of a Trainer."""

    @property
    def strategy(self) -> Any: ...
    @property
    def precision(self) -> Any: ...


def facts_of_run(trainer: RunOf, module: Any, evaluating: bool) -> dict[str, Any] | None:
    """This run as `run_facts` describes a checkpoint's (None without a module); what an
    evaluation reads (the weights) does not depend on the precision, the processes or the kind."""
    if module is None:
        return None
    experiment = getattr(trainer, "experiment_config", None)
    data = experiment.get("data") if isinstance(experiment, dict) else None
    facts: dict[str, Any] = {
        "model class": f"{type(module).__module__}.{type(module).__qualname__}",
        "hyperparameters": plain_state({**dict(getattr(module, "hparams", {}) or {}),
                                        **dict(vars(module).get("_tuned_hparams") or {})}, as_text=True),
        "data class": data.get("class_path") if isinstance(data, dict) else None,
    }
    if not evaluating:
        strategy = trainer.strategy
        facts.update({"precision": getattr(trainer.precision, "name", None), "processes": strategy.world_size,
                      "checkpoint kind": "sharded folder" if strategy.sharded_checkpoints else "single file"})
    return facts
