"""`hparams`: the `__init__` arguments of a Module (or DataModule), captured automatically and
readable by attribute (Lightning's `save_hyperparameters` fills the same dict)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

__all__ = ["AttributeDict", "hparams_of_caller"]


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


def hparams_of_caller(owner: Any, caller: Any, names: tuple[Any, ...], ignore: str | list[str] | None) -> AttributeDict:
    """`save_hyperparameters(*names, ignore=...)`: the calling `__init__`'s arguments (frame `caller`).

    Lightning's other form, `save_hyperparameters(hparams)` with one dict or `argparse.Namespace`
    (older code's `__init__(self, hparams)`), records that object's items.
    """
    if len(names) == 1 and not isinstance(names[0], str):
        given = names[0]
        items = given if isinstance(given, dict) else vars(given) if hasattr(given, "__dict__") else None
        if items is None:
            raise ValueError(
                f"save_hyperparameters({given!r}): expected argument names, or one dict or argparse.Namespace of "
                f"hyperparameters. Received: {type(given).__name__}."
            )
        dropped = {ignore} if isinstance(ignore, str) else set(ignore or [])
        return AttributeDict({k: v for k, v in dict(items).items() if k not in dropped})
    local = dict(caller.f_locals)
    code = caller.f_code
    arg_names = list(code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount])
    dropped = {ignore} if isinstance(ignore, str) else set(ignore or [])
    chosen = list(names) if names else arg_names
    unknown = [n for n in chosen if n not in arg_names]
    if unknown:
        raise ValueError(
            f"save_hyperparameters({', '.join(map(repr, unknown))}): not arguments of {type(owner).__name__}.__init__. "
            f"Expected some of: {', '.join(arg_names)}."
        )
    values = {n: local[n] for n in chosen if n in local and n not in dropped}
    if code.co_flags & inspect.CO_VARKEYWORDS and not names:
        extra = code.co_varnames[code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)]
        values.update({k: v for k, v in dict(local.get(extra) or {}).items() if k not in dropped})
    return AttributeDict(values)
