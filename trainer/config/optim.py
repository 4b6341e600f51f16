"""LightningCLI's automatic `optimizer:` and `lr_scheduler:` sections.

    optimizer:
      class_path: torch.optim.SGD            # or `optimizer: SGD`, `--optimizer SGD --optimizer.lr 0.1`
      init_args: {lr: 0.1, momentum: 0.9}
    lr_scheduler:
      class_path: StepLR                     # a name in torch.optim.lr_scheduler, or a dotted path
      init_args: {step_size: 1}

A bare name is looked up in `torch.optim` (`torch.optim.lr_scheduler`), then among the imported
subclasses of `Optimizer` (`LRScheduler`); `ReduceLROnPlateau` is this module's, which takes
the `monitor` its steps read, as Lightning's does. The `init_args` are checked against the
class's signature like any other section; `params` (the scheduler's `optimizer`) is filled in.

When the config has an `optimizer:` section, the module's `configure_optimizers` is replaced
by one returning that optimizer (and scheduler), as LightningCLI does, with LightningCLI's
warning when the module defines its own. An `lr_scheduler:` without an `optimizer:` is not used.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from trainer._utils import first_line
from trainer.config.classpath import ConfigError, Problem, ResolvedSpec, check_spec, import_target, instantiate, received, suggest

__all__ = ["OPTIMIZER_SECTIONS", "ReduceLROnPlateau", "configure_optimizers", "check_optimizers", "check_strategy",
           "attach_optimizers",
           "set_section", "as_spec", "add_optimizer_options"]

#: The top-level sections this module adds to a config.
OPTIMIZER_SECTIONS = ("optimizer", "lr_scheduler")


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """`torch.optim.lr_scheduler.ReduceLROnPlateau` that knows the metric it steps on (`monitor`).

    What `lr_scheduler: ReduceLROnPlateau` builds (Lightning's `lightning.pytorch.cli.ReduceLROnPlateau`
    in a config means this class too): the automatic `configure_optimizers` hands `monitor` to the
    Trainer, which steps the scheduler with that logged metric.

    Args:
        optimizer: the optimizer whose learning rates it reduces (filled in from `optimizer:`).
        monitor: the logged metric to watch, e.g. `val/loss`.
        mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps: PyTorch's.
    """

    __module__ = "trainer.config"  # its public home, and the class_path a resolved config records

    def __init__(
        self, optimizer: Optimizer, monitor: str, mode: Literal["min", "max"] = "min", factor: float = 0.1,
        patience: int = 10, threshold: float = 1e-4, threshold_mode: Literal["rel", "abs"] = "rel", cooldown: int = 0,
        min_lr: list[float] | float = 0.0, eps: float = 1e-8,
    ) -> None:
        super().__init__(optimizer, mode=mode, factor=factor, patience=patience, threshold=threshold,
                         threshold_mode=threshold_mode, cooldown=cooldown, min_lr=min_lr, eps=eps)
        self.monitor = monitor


_OURS = "trainer.config.ReduceLROnPlateau"
#: Class paths of Lightning's ReduceLROnPlateau, read as this module's (a config moved over unchanged).
_ALIASES = {name: _OURS for name in ("ReduceLROnPlateau", "lightning.pytorch.cli.ReduceLROnPlateau",
                                     "pytorch_lightning.cli.ReduceLROnPlateau", "trainer.cli.ReduceLROnPlateau")}
_KINDS: dict[str, tuple[Any, tuple[type, ...], str, str]] = {
    # section: (module of short names, accepted base classes, the argument we fill, what it is)
    "optimizer": (torch.optim, (Optimizer,), "params", "optimizer"),
    "lr_scheduler": (torch.optim.lr_scheduler, (LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau), "optimizer",
                     "LR scheduler"),
}


def configure_optimizers(lightning_module: Any, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
    """What the module's `configure_optimizers` returns when the config has an `optimizer:`.

    LightningCLI's `configure_optimizers` static method: the optimizer alone; a
    `ReduceLROnPlateau` with its `monitor` as a dict; any other scheduler as
    `([optimizer], [scheduler])` (stepped once per epoch). A `CLI` subclass may override it.
    """
    if lr_scheduler is None:
        return optimizer
    if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and hasattr(lr_scheduler, "monitor"):
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor}}
    return [optimizer], [lr_scheduler]


# ------------------------------------------------------------------------------ names
def _subclasses(bases: tuple[type, ...]) -> dict[str, type]:
    """Every imported subclass of `bases`, by its name (the first one found wins)."""
    found: dict[str, type] = {}
    stack = list(bases)
    while stack:
        current = stack.pop(0)
        found.setdefault(current.__name__, current)
        stack.extend(current.__subclasses__())
    return found


def _short_names(section: str) -> list[str]:
    module, bases, _, _ = _KINDS[section]
    own = [n for n, v in vars(module).items() if inspect.isclass(v) and issubclass(v, bases) and v not in bases]
    return sorted({*own, *(n for n in _subclasses(bases) if not n.startswith("_"))})


def resolve_name(section: str, name: str) -> str:
    """`Adam` as `torch.optim.Adam`, `StepLR` as `torch.optim.lr_scheduler.StepLR`, Lightning's
    ReduceLROnPlateau as ours; a dotted path or an unknown name is returned as it is."""
    if section == "lr_scheduler" and name in _ALIASES:
        return _ALIASES[name]
    if "." in name:
        return name
    module, bases, _, _ = _KINDS[section]
    value = getattr(module, name, None)
    if inspect.isclass(value) and issubclass(value, bases):
        return f"{module.__name__}.{name}"
    cls = _subclasses(bases).get(name)
    return f"{cls.__module__}.{cls.__qualname__}" if cls is not None else name


def as_spec(value: Any) -> Any:
    """`optimizer: Adam` (a class name) as `{class_path: Adam}`; anything else as it is."""
    return {"class_path": value} if isinstance(value, str) else value


def set_section(config: dict[str, Any], section: str, value: Any) -> None:
    """`--optimizer NAME` (or a later file's `optimizer:`) on top of a config's section: merged key
    by key, and a new class keeps only the `init_args` it accepts, as LightningCLI keeps them
    when the class changes. Any other value (null, a number) replaces the section."""
    current = as_spec(config.get(section))
    if not isinstance(current, dict) or not isinstance(value, (str, dict)):
        config[section] = value
        return
    update = as_spec(value)
    init_args = dict(current["init_args"]) if isinstance(current.get("init_args"), dict) else {}
    class_path = update.get("class_path", current.get("class_path"))
    if isinstance(class_path, str) and class_path != current.get("class_path"):
        target, _ = import_target(resolve_name(section, class_path), section)
        accepted = _signature(target) if target is not None else {}
        if accepted and not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            init_args = {k: v for k, v in init_args.items() if k in accepted}
    if isinstance(update.get("init_args"), dict):
        init_args.update(update["init_args"])
    config[section] = {**current, **update, "init_args": init_args}


def _signature(target: Any) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return {}


# ---------------------------------------------------------------------------- checking
def check_optimizers(config: dict[str, Any]) -> tuple[ResolvedSpec | None, ResolvedSpec | None, list[Problem]]:
    """Check the `optimizer:` and `lr_scheduler:` sections; None where a section is absent or null."""
    problems: list[Problem] = []
    specs: list[ResolvedSpec | None] = []
    for section in OPTIMIZER_SECTIONS:
        spec, found = _check_section(section, config.get(section))
        specs.append(spec)
        problems += found
    return specs[0], specs[1], problems


def _check_section(section: str, value: Any) -> tuple[ResolvedSpec | None, list[Problem]]:
    module, bases, filled, what = _KINDS[section]
    value = as_spec(value)
    if value is None:
        return None, []
    if not isinstance(value, dict):
        return None, [Problem(section, f"Expected a class name (e.g. {'Adam' if section == 'optimizer' else 'StepLR'}), "
                              f"{{class_path: ..., init_args: {{...}}}} or null. {received(value)}")]
    if "class_path" not in value:
        return None, [Problem(f"{section}.class_path", f"required: the {what}'s class. Expected `{section}: NAME` or "
                              f"{{class_path: ..., init_args: {{...}}}} (--{section} NAME on the command line).")]
    name = value["class_path"]
    spec = {**value, "class_path": resolve_name(section, name) if isinstance(name, str) else name}
    init_args = spec.get("init_args")
    problems: list[Problem] = []
    if isinstance(init_args, dict) and filled in init_args:
        spec["init_args"] = {k: v for k, v in init_args.items() if k != filled}
        problems.append(Problem(f"{section}.init_args.{filled}", f"is filled in by the trainer "
                                f"({'the module parameters' if filled == 'params' else 'the optimizer: section'}). "
                                "Expected it left out."))
    if isinstance(name, str) and "." not in spec["class_path"]:
        return None, problems + [Problem(f"{section}.class_path", f"unknown {what} {name!r}.{suggest(name, _short_names(section))} "
                                         f"Expected a class of {module.__name__} (or an imported subclass of "
                                         f"{bases[0].__qualname__}) by its name, or a dotted path.")]
    resolved, found = check_spec(spec, section, skip=(filled,))
    problems += found
    if resolved is None:
        return None, problems
    target = resolved.target
    if not (inspect.isclass(target) and issubclass(target, bases)):
        expected = "torch.optim.Optimizer" if section == "optimizer" else "torch.optim.lr_scheduler.LRScheduler"
        problems.append(Problem(f"{section}.class_path", f"Expected a subclass of {expected}. Received: {spec['class_path']!r}."))
    elif section == "lr_scheduler" and issubclass(target, torch.optim.lr_scheduler.ReduceLROnPlateau) \
            and "monitor" not in _signature(target):
        problems.append(Problem(f"{section}.class_path", f"{spec['class_path']} does not know the metric it steps on. Expected "
                                "`lr_scheduler: ReduceLROnPlateau` (trainer.config.ReduceLROnPlateau) with "
                                "init_args: {monitor: NAME}."))
    return resolved, problems


def check_strategy(optimizer: ResolvedSpec | None, strategy: Any) -> list[Problem]:
    """An `optimizer:` is built on the module's parameters before the Trainer runs, and FSDP
    replaces those parameters with sharded ones: the optimizer would train nothing."""
    from trainer.strategies.fsdp import FSDP

    target = strategy.target if isinstance(strategy, ResolvedSpec) else None
    if optimizer is None or not (strategy == "fsdp" or (inspect.isclass(target) and issubclass(target, FSDP))):
        return []
    return [Problem("optimizer", "is built on the module's parameters before the Trainer starts, and strategy fsdp "
                    "replaces them with sharded ones, so this optimizer would update nothing. Expected "
                    "configure_optimizers() in the module for fsdp (it runs after sharding), or another strategy.")]


# ---------------------------------------------------------------------------- building
def attach_optimizers(
    model: Any, optimizer: ResolvedSpec | None, lr_scheduler: ResolvedSpec | None, *,
    configure: Callable[..., Any] = configure_optimizers, owner: str = "the config's optimizer: section",
) -> None:
    """Build the config's optimizer (and scheduler) on `model`'s parameters and make the module's
    `configure_optimizers` return them, as LightningCLI does. No optimizer: nothing changes."""
    from trainer.module import Module

    if optimizer is None:
        if lr_scheduler is not None:
            warnings.warn(f"lr_scheduler: {lr_scheduler.class_path} is not used: the config has no optimizer: section, "
                          f"so {type(model).__name__}.configure_optimizers decides (as LightningCLI does). Add an "
                          "optimizer: section to use it.", UserWarning, stacklevel=2)
        return
    if getattr(type(model), "configure_optimizers", None) is not Module.configure_optimizers:
        warnings.warn(f"`{type(model).__name__}.configure_optimizers` will be overridden by `{owner}`.",
                      UserWarning, stacklevel=2)
    built = _call("optimizer", optimizer, model.parameters())
    scheduler = _call("lr_scheduler", lr_scheduler, built) if lr_scheduler is not None else None
    function = functools.partial(configure, optimizer=built, lr_scheduler=scheduler)
    functools.update_wrapper(function, configure)
    model.configure_optimizers = types.MethodType(function, model)


def _call(section: str, spec: ResolvedSpec, first: Any) -> Any:
    """`Class(first, **init_args)`; an exception from it is a config error naming the section."""
    kwargs = {name: instantiate(v) if isinstance(v, ResolvedSpec) else v for name, v in spec.kwargs.items()}
    try:
        return spec.target(first, **kwargs)
    except Exception as error:  # noqa: BLE001 - e.g. torch's "Invalid learning rate"
        detail = first_line(error, empty="(no message)")
        raise ConfigError([Problem(f"{section}.init_args", f"{spec.class_path}(**init_args) raised {type(error).__name__}: "
                                   f"{detail}. Fix the value it names in the config.")]) from error


def add_optimizer_options(parser: argparse.ArgumentParser) -> None:
    """List `--optimizer` and `--lr_scheduler` in a command's help (the overrides are parsed apart)."""
    group = parser.add_argument_group("LightningCLI's automatic optimizer and LR scheduler (replace the module's configure_optimizers)")
    group.add_argument("--optimizer", metavar="CLASS", help="a name in torch.optim (Adam, SGD, ...) or a dotted path; "
                       "then --optimizer.NAME VALUE (e.g. --optimizer.lr 0.01)")
    group.add_argument("--lr_scheduler", metavar="CLASS", help="a name in torch.optim.lr_scheduler (StepLR, ...), "
                       "ReduceLROnPlateau (with --lr_scheduler.monitor NAME) or a dotted path; then --lr_scheduler.NAME VALUE")
