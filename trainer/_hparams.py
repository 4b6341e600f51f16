"""`hparams`: the `__init__` arguments of a Module (or DataModule), captured automatically and
readable by attribute (Lightning's `save_hyperparameters` fills the same dict)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import os
import warnings
from argparse import Namespace
from collections.abc import MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import torch

__all__ = ["AttributeDict", "init_chain_arguments", "read_hparams_file", "save_hyperparameters"]


class AttributeDict(dict):  # type: ignore[type-arg]
    """A dict whose keys read as attributes too: `hparams.lr` is `hparams["lr"]`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"hparams has no {name!r}. It holds: {', '.join(self) or 'nothing'}.") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


class _Captured(AttributeDict):
    """The `hparams` Module.__init__ starts with: still empty means "capture the arguments"."""


def _capturing_init(init: Callable[..., None]) -> Callable[..., None]:
    """`init`, plus: the outermost call records its bound arguments as `self.hparams`.

    Defaults are filled in; `**kwargs` are merged in by name. A subclass that fills
    `self.hparams` itself keeps its own value. Capturing never fails the constructor and
    costs one `Signature.bind` per instance.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(init)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        current = self.__dict__.get("hparams")
        if type(self).__init__ is not wrapper or not (type(current) is _Captured and not current) or signature is None:
            return  # an inner super().__init__ call, hparams the user set (even {}), or no signature
        try:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
        except TypeError:
            return
        hparams: dict[str, Any] = {}
        for index, (name, value) in enumerate(bound.arguments.items()):
            kind = signature.parameters[name].kind
            if index == 0:
                continue  # self
            if kind is inspect.Parameter.VAR_KEYWORD:
                hparams.update(value)
            else:
                hparams[name] = value
        object.__setattr__(self, "hparams", AttributeDict(hparams))

    wrapper._captures_hparams = True  # type: ignore[attr-defined]
    return wrapper


_WRAPPER_CODE = _capturing_init(lambda self: None).__code__  # the frames of our own wrapper, skipped
_EXCLUDED = ("__class__", "frame", "frame_args")  # never hyperparameters (Lightning's rule)
_PRIMITIVES = (bool, int, float, str)


def _holds_hparams(obj: Any) -> bool:
    """`obj` is a Module or DataModule (their classes set `_saves_hyperparameters`)."""
    return getattr(type(obj), "_saves_hyperparameters", False) is True


def _init_arguments(frame: FrameType) -> tuple[Any, dict[str, Any]]:
    """(self, arguments) of an `__init__` frame whose function uses `super()`/`__class__`, as
    they are now: the signature's names but `self`, `*args` and `**kwargs`, the items of
    `**kwargs` merged in. (None, {}) for any other frame."""
    local = frame.f_locals
    if frame.f_code.co_name != "__init__" or "__class__" not in local:
        return None, {}
    try:
        parameters = inspect.signature(local["__class__"].__init__).parameters
    except (TypeError, ValueError):
        return None, {}
    if not parameters:
        return None, {}
    kinds = {p.kind: name for name, p in parameters.items()}
    self_name = next(iter(parameters))
    starred = {self_name, kinds.get(inspect.Parameter.VAR_POSITIONAL), kinds.get(inspect.Parameter.VAR_KEYWORD)}
    values = {name: local[name] for name in parameters if name in local}
    extra = kinds.get(inspect.Parameter.VAR_KEYWORD)
    if extra is not None and isinstance(values.get(extra), dict):
        values.update(values[extra])
    return local.get(self_name), {k: v for k, v in values.items() if k not in starred and k not in _EXCLUDED}


def init_chain_arguments(frame: FrameType) -> dict[str, Any]:
    """The arguments of the chain of `__init__` frames from `frame` outwards, the outer ones winning.

    Lightning's rule: from `frame` up the stack, skip frames until the first `__init__` (one that
    calls `super()`) of a Module or DataModule; from there collect each such frame until one that
    is not. A child's `super().__init__(lr=lr)` therefore contributes the child's arguments, and an
    `__init__` that builds another Module contributes its own arguments to that module too (as in
    Lightning). The innermost frame's names come first.
    """
    levels: list[dict[str, Any]] = []
    current: FrameType | None = frame
    while current is not None and current.f_back is not None:
        if current.f_code is _WRAPPER_CODE:  # our capturing wrapper between a child's and a parent's __init__
            current = current.f_back
            continue
        owner, arguments = _init_arguments(current)
        if owner is not None and _holds_hparams(owner):
            levels.append(arguments)
        elif levels:
            break
        current = current.f_back
    collected: dict[str, Any] = {}
    for arguments in levels:
        collected.update(arguments)
    return collected


def _as_hparams(owner: Any, given: Any) -> Any:
    """One object given to `save_hyperparameters`: a dict (as an AttributeDict), a Namespace's
    items, or another mapping (an OmegaConf config) kept as it is."""
    if isinstance(given, Namespace):
        given = vars(given)
    if isinstance(given, dict):
        return AttributeDict(given)
    if isinstance(given, MutableMapping):
        return given
    what = "a primitive value" if isinstance(given, _PRIMITIVES) else f"a {type(given).__name__}"
    raise ValueError(
        f"{type(owner).__name__}.save_hyperparameters({given!r}): {what} can't hold hyperparameters. Expected "
        "argument names (strings), or one dict, argparse.Namespace or other mutable mapping."
    )


def save_hyperparameters(owner: Any, frame: FrameType, names: tuple[Any, ...], ignore: Any) -> None:
    """`owner.save_hyperparameters(*names, ignore=ignore)` called from `frame`: Lightning's rules.

    The arguments are those of the whole chain of `__init__` calls (`init_chain_arguments`), or a
    dataclass's init fields. No names: all of them; names: those; one dict/Namespace: its items.
    They update `owner.hparams` (a second call adds to the first), then every ignored name is
    removed from it, also one an earlier call saved. `hparams_initial` becomes a copy.
    """
    if len(names) == 1 and not names[0]:
        return  # an empty container (or name): nothing to save, as Lightning
    if dataclasses.is_dataclass(owner):
        arguments = {f.name: getattr(owner, f.name) for f in dataclasses.fields(owner) if f.init}
    else:
        arguments = init_chain_arguments(frame)
    dropped = [ignore] if isinstance(ignore, str) else [n for n in ignore if isinstance(n, str)] if ignore else []
    arguments = {k: v for k, v in arguments.items() if k not in dropped}
    objects = [n for n in names if not isinstance(n, str)]
    if not names:
        chosen: Any = AttributeDict(arguments)
        name = "kwargs" if arguments else None
    elif len(objects) == 1:
        chosen = _as_hparams(owner, objects[0])
        name = next((k for k, v in arguments.items() if _same(v, objects[0])), None)
    else:
        unknown = [n for n in names if isinstance(n, str) and n not in arguments]
        if unknown:
            raise ValueError(
                f"{type(owner).__name__}.save_hyperparameters({', '.join(map(repr, unknown))}): not arguments of "
                f"its __init__ (or they are ignored). Expected some of: {', '.join(arguments) or 'none'}."
            )
        chosen, name = AttributeDict({n: arguments[n] for n in names if isinstance(n, str)}), "kwargs"
    current = owner.__dict__.get("hparams")
    if isinstance(chosen, dict) and isinstance(current, dict):
        if type(current) is _Captured:  # not yet captured automatically: from now on, what is saved here
            current = AttributeDict(current)
        current.update(chosen)
        chosen = current
    for key in dropped:
        chosen.pop(key, None)
    object.__setattr__(owner, "hparams", chosen)
    object.__setattr__(owner, "_hparams_name", name)
    modules = [k for k, v in chosen.items() if isinstance(v, torch.nn.Module)]
    if modules:
        warnings.warn(
            f"{type(owner).__name__}.hparams holds {', '.join(map(repr, modules))}, a torch.nn.Module: its weights are "
            f"in the checkpoint already. Expected plain values; to leave it out, call "
            f"`self.save_hyperparameters(ignore={modules!r})`.",
            stacklevel=3,
        )
    object.__setattr__(owner, "_hparams_initial", _copied(chosen))


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a value that can't be compared (a tensor) is not the one given
        return False


def _copied(values: Any) -> Any:
    try:
        return copy.deepcopy(values)
    except Exception:  # noqa: BLE001 - a value that can't be deep-copied is kept as is
        return copy.copy(values)


def read_hparams_file(path: str | os.PathLike[str], what: str = "load_from_checkpoint", *,
                      module_part: bool = True) -> dict[str, Any]:
    """The hyperparameters in a YAML file: Lightning's `hparams.yaml` (the module's, flat) or, with
    `module_part`, the module's part of one written here (under `module`, beside the Trainer's
    under `trainer`; for a YAML run, the `model` arguments under `experiment`)."""
    file = Path(path)
    if file.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"{what}(hparams_file={str(file)!r}): expected a .yaml or .yml file of names and values "
                         "(Lightning's `hparams.yaml`); a tags .csv is not read: write its rows as YAML.")
    import yaml

    loaded = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"hparams_file {str(file)!r} holds {type(loaded).__name__}; expected a mapping of names to values.")
    if module_part and isinstance(loaded.get("trainer"), dict) and set(loaded) <= {"module", "trainer", "experiment"}:
        if isinstance(loaded.get("module"), dict):  # written by this package's loggers
            return dict(loaded["module"])
        model = (loaded.get("experiment") or {}).get("model")
        if isinstance(model, dict):
            return dict(model.get("init_args", {}) if "class_path" in model else model)
    return loaded
