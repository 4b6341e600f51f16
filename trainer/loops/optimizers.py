"""What `configure_optimizers` returned, in one shape.

Accepted forms (Lightning's, plus our `(optimizer, scheduler)` tuple):

* an optimizer;
* `(optimizer, scheduler)`: a pair whose second element is a scheduler, never an optimizer;
* a list or tuple of optimizers (several optimizers: manual optimization);
* `([optimizers], [schedulers])`: each scheduler a scheduler or a config dict;
* `{"optimizer": opt, "lr_scheduler": sched | config, "monitor": name}`, or a list of such dicts.

A scheduler config dict holds `scheduler` and optionally `interval` ("epoch", the default,
or "step"), `frequency` (every n epochs / optimizer steps), `monitor` (the metric a
`ReduceLROnPlateau` steps on), `strict` (a missing monitor is an error; False: a warning and
no step), `name` (the LearningRateMonitor tag).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Literal

import torch

__all__ = ["SchedulerConfig", "OptimizerSetup", "parse_optimizers", "optimizers_or_none", "NoOptimizer"]

Interval = Literal["step", "epoch"]
_SCHEDULER_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name", "reduce_on_plateau", "opt_idx"}
_OPTIMIZER_KEYS = {"optimizer", "lr_scheduler", "monitor"}

_FORMS = (
    "an optimizer; (optimizer, scheduler); a list of optimizers; ([optimizers], [schedulers]); "
    "{'optimizer': opt, 'lr_scheduler': sched or {'scheduler': sched, 'interval': 'epoch' | 'step', "
    "'frequency': n, 'monitor': name}}; or a list of such dicts"
)


@dataclasses.dataclass
class SchedulerConfig:
    """One LR scheduler and when the Trainer steps it (automatic optimization only)."""

    scheduler: Any
    interval: Interval = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None

    @property
    def reduce_on_plateau(self) -> bool:
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)

    def step(self, count: int, read_metric: Callable[[str], float | None]) -> None:
        """Step if `count` (optimizer steps or finished epochs) is a multiple of `frequency`."""
        if count % self.frequency:
            return
        if self.monitor is None:
            self.scheduler.step()
            return
        value = read_metric(self.monitor)
        if value is None:
            if self.strict:
                from trainer.logging.metrics import MonitorError

                raise MonitorError(
                    f"The LR scheduler {type(self.scheduler).__name__} monitors {self.monitor!r}, which "
                    f"was not logged before its {self.interval} step. Expected self.log({self.monitor!r}, ...) "
                    "in training_step (interval 'step') or in validation (interval 'epoch'); or set "
                    "'strict': False in the lr_scheduler dict to skip the step with a warning."
                )
            warnings.warn(
                f"The LR scheduler monitors {self.monitor!r}, which was not logged; its step is skipped "
                "('strict': False).",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self.scheduler.step(value)


@dataclasses.dataclass
class OptimizerSetup:
    """The optimizers in the order `configure_optimizers` returned them, and their schedulers."""

    optimizers: list[torch.optim.Optimizer]
    schedulers: list[SchedulerConfig] = dataclasses.field(default_factory=list)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.optimizers[0]

    def step_schedulers(
        self, interval: Interval, count: int, read_metric: Callable[[str], float | None], monitored: bool | None = None
    ) -> None:
        """`monitored`: only those that read a metric (True), only the others (False), or all."""
        for config in plateaus_last(self.schedulers):
            if config.interval == interval and monitored in (None, config.monitor is not None):
                config.step(count, read_metric)

    def has_step_schedulers(self) -> bool:
        return any(config.interval == "step" for config in self.schedulers)


def plateaus_last(configs: Sequence[Any]) -> list[Any]:
    """The schedulers in the order Lightning steps them at a step's or an epoch's end: the
    others first, then those that read a monitored value (ReduceLROnPlateau), each group in the
    order configure_optimizers gave them. (The order shows: ReduceLROnPlateau ignores a cut
    smaller than its `eps`, so it matters which of two schedulers of one optimizer goes first.)"""
    return sorted(configs, key=lambda config: config.monitor is not None)


def _fail(detail: str) -> ValueError:
    return ValueError(f"configure_optimizers() expected {_FORMS}. Received: {detail}.")


def _is_optimizer(value: Any) -> bool:
    return isinstance(value, torch.optim.Optimizer)


def _is_scheduler(value: Any) -> bool:
    return not _is_optimizer(value) and hasattr(value, "step") and hasattr(value, "state_dict")


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(type(v).__name__ for v in value)
        return f"a {type(value).__name__} of ({inner})"
    return f"{value!r} of type {type(value).__name__}"


class NoOptimizer(torch.optim.Optimizer):
    """What a `configure_optimizers()` returning None trains with (Lightning's mock optimizer):
    training_step and backward run, the step changes nothing, `zero_grad` clears the gradients."""

    def __init__(self, params: Any) -> None:
        params = list(params) or [torch.zeros(1)]
        super().__init__(params, {"lr": 0.0})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        return closure() if closure is not None else None


def optimizers_or_none(module: Any) -> Any:
    """`module.configure_optimizers()`; None becomes a `NoOptimizer` with Lightning's warning
    (under manual optimization, one that says what still happens: the module's own steps)."""
    returned = module.configure_optimizers()
    if returned is None:
        name = type(module).__name__
        if getattr(module, "automatic_optimization", True):
            message = (f"configure_optimizers() of {name} returned None: this fit runs training_step and "
                       "backward with no optimizer (as in Lightning), so the Trainer steps nothing: the weights "
                       "change only where the module changes them itself (optimizers of its own stepped from "
                       "gradient hooks, register_post_accumulate_grad_hook). Return the optimizer from "
                       "configure_optimizers to have the Trainer step it.")
        else:
            message = (
                f"configure_optimizers() of {name} returned None: the Trainer has no optimizer, so under manual "
                "optimization the weights change only where training_step changes them itself (an optimizer it steps, "
                "an update by hand), and "
                "global_step stays 0 (it counts the steps of self.optimizers()): step-driven work such as "
                "ModelCheckpoint's saves, step-interval schedulers and max_steps never triggers, and no optimizer "
                "state goes into checkpoints (as in Lightning). Return the optimizer from configure_optimizers "
                "(a torch.optim.Optimizer) and step it through self.optimizers() to have them."
            )
        warnings.warn(message, UserWarning, stacklevel=3)
        return NoOptimizer(p for p in module.parameters() if p.requires_grad)
    return returned


def _hand_written(value: Any) -> bool:
    """An optimizer of the user's own that is not a `torch.optim.Optimizer` (it steps and zeroes
    gradients, but has none of param_groups, state_dict, ...)."""
    return not _is_optimizer(value) and callable(getattr(value, "step", None)) and callable(getattr(value, "zero_grad", None))


def _refuse_hand_written(returned: Any) -> None:
    """Name the fix when an optimizer the Trainer can't drive is anywhere in what was returned."""
    found = [returned] if not isinstance(returned, (list, tuple, dict)) else []
    items = list(returned.values()) if isinstance(returned, dict) else list(returned) if isinstance(returned, (list, tuple)) else []
    for item in items:
        if isinstance(item, dict):
            found.append(item.get("optimizer"))
        elif isinstance(item, (list, tuple)):
            found.extend(item)
        else:
            found.append(item)
    odd = next((value for value in found if _hand_written(value)), None)
    if odd is None:
        return
    name = type(odd).__name__
    raise ValueError(
        f"configure_optimizers() returned {name}, an optimizer that is not a torch.optim.Optimizer: the Trainer "
        "steps, zeroes, checkpoints and (under amp) unscales gradients through torch.optim.Optimizer's interface "
        "(param_groups, state, state_dict/load_state_dict), which it lacks. Expected a torch.optim.Optimizer. "
        f"To fix: make {name} subclass torch.optim.Optimizer (call super().__init__(params, defaults), keep "
        "per-parameter state in self.state, and define step(self, closure=None) that calls the closure when "
        "given), then return it as before; or set self.automatic_optimization = False, keep the optimizer on the "
        "module, return None here and call its zero_grad()/step() around self.manual_backward(loss) in "
        "training_step (global_step then stays 0 and its state is not checkpointed). "
        "See docs/manual_optimization.md, 'An optimizer of your own'."
    )


def parse_optimizers(returned: Any, manual: bool = False) -> OptimizerSetup:
    """Normalise every accepted form; raise a ValueError naming the form for anything else."""
    if _is_optimizer(returned):
        return OptimizerSetup([returned])
    _refuse_hand_written(returned)
    if isinstance(returned, dict):
        return _from_dicts([returned], manual)
    if isinstance(returned, (list, tuple)) and returned:
        if all(_is_optimizer(v) for v in returned):
            return OptimizerSetup(list(returned))
        if all(isinstance(v, dict) for v in returned):
            return _from_dicts(list(returned), manual)
        if len(returned) == 2 and _is_optimizer(returned[0]) and (_is_scheduler(returned[1]) or isinstance(returned[1], dict)):
            return _build([returned[0]], [returned[1]], manual)
        if len(returned) == 2 and isinstance(returned[0], (list, tuple)):
            optimizers, schedulers = returned
            if not isinstance(schedulers, (list, tuple)) and (_is_scheduler(schedulers) or isinstance(schedulers, dict)):
                schedulers = [schedulers]  # `([optimizer], scheduler)`: one scheduler outside a list (Lightning)
            if optimizers and all(_is_optimizer(v) for v in optimizers) and isinstance(schedulers, (list, tuple)):
                return _build(list(optimizers), list(schedulers), manual)
    raise _fail(_describe(returned))


def _from_dicts(items: list[dict[str, Any]], manual: bool) -> OptimizerSetup:
    optimizers: list[torch.optim.Optimizer] = []
    specs: list[Any] = []
    for item in items:
        unknown = set(item) - _OPTIMIZER_KEYS
        if unknown or not _is_optimizer(item.get("optimizer")):
            raise _fail(f"a dict with keys {sorted(item)} (expected 'optimizer' and optionally 'lr_scheduler', 'monitor')")
        optimizers.append(item["optimizer"])
        spec = item.get("lr_scheduler")
        if spec is None:
            continue
        if item.get("monitor") is not None:  # Lightning's top-level monitor
            spec = dict(spec) if isinstance(spec, dict) else {"scheduler": spec}
            spec.setdefault("monitor", item["monitor"])
        specs.append(spec)
    return _build(optimizers, specs, manual)


def _build(optimizers: list[torch.optim.Optimizer], specs: list[Any], manual: bool) -> OptimizerSetup:
    configs = [_scheduler_config(spec, manual) for spec in specs]
    owned = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    for config in configs:
        target = getattr(config.scheduler, "optimizer", None)
        if target is not None and not any(target is opt for opt in optimizers) and not any(
            id(p) in owned for group in getattr(target, "param_groups", []) for p in group["params"]
        ):
            raise _fail(f"a scheduler {type(config.scheduler).__name__} whose optimizer was not returned")
    return OptimizerSetup(optimizers, configs)


def _scheduler_config(spec: Any, manual: bool = False) -> SchedulerConfig:
    if isinstance(spec, dict):
        unknown = set(spec) - _SCHEDULER_KEYS
        if unknown or "scheduler" not in spec:
            raise _fail(f"an lr_scheduler dict with keys {sorted(spec)} (accepted: {', '.join(sorted(_SCHEDULER_KEYS))})")
        scheduler = spec["scheduler"]
        interval = spec.get("interval", "epoch")
        frequency = spec.get("frequency", 1)
        monitor, strict, name = spec.get("monitor"), spec.get("strict", True), spec.get("name")
    else:
        scheduler, interval, frequency, monitor, strict, name = spec, "epoch", 1, None, True, None
    if interval not in ("step", "epoch"):
        raise _fail(f"lr_scheduler interval {interval!r} (expected 'epoch' or 'step')")
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
        raise _fail(f"lr_scheduler frequency {frequency!r} (expected a positive int)")
    # manual optimization: the module steps it, in its own way (Lightning asks for no step()); its state is saved
    stateful = not _is_optimizer(scheduler) and hasattr(scheduler, "state_dict") and hasattr(scheduler, "load_state_dict")
    if not (_is_scheduler(scheduler) or (manual and stateful)):
        raise _fail(f"a scheduler {scheduler!r} without step()/state_dict()")
    is_plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if is_plateau and monitor is None and not manual:  # manual optimization: the module steps it with the value
        raise _fail(
            "ReduceLROnPlateau without a 'monitor' metric name (add 'monitor': 'val/loss' to the "
            "lr_scheduler dict or to the dict returned with the optimizer)"
        )
    if monitor is not None and not is_plateau:
        monitor = None  # Lightning reads the monitor only for ReduceLROnPlateau
    if manual and isinstance(spec, dict):  # the module steps its schedulers: nothing to monitor (Lightning)
        ignored = [key for key in spec if key in ("monitor", "strict", "reduce_on_plateau")]
        if ignored:
            warnings.warn(f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored. You need "
                          "to call `lr_scheduler.step()` manually in manual optimization.", RuntimeWarning, stacklevel=2)
        monitor = None
    return SchedulerConfig(scheduler, interval, frequency, monitor, bool(strict), name)
