"""`class_path` + `init_args`: import a target and check its arguments against its signature.

A spec names a class or callable by its dotted path and the keyword arguments to call it
with. Checking a spec imports the target (with a close-match suggestion when the module
or name does not exist) and validates every argument against the target's own type hints
with pydantic, so `lr: 1e-4` becomes a float and `hidden: "x"` is refused. Nothing is
called until `instantiate`, so every problem of a file is found before any work starts.
The problems are `Problem`s, gathered into one `ConfigError` (public as `trainer.config.ConfigError`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import logging
import os
import pkgutil
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pydantic
from pydantic import ConfigDict, TypeAdapter

from trainer.strategies.rank_zero import rank_zero_info

__all__ = [
    "Problem", "ConfigError", "ResolvedSpec", "check_spec", "instantiate", "is_spec", "suggest", "USER_FOLDERS",
    "LOGGER_HOMES", "homes_of", "short_name",
]

log = logging.getLogger("trainer")

#: The folders the `trainer` command reads the user's modules from (the working folder and the
#: config's), after the installed packages: a class_path found there is reported with its file.
USER_FOLDERS: list[str] = []
_REPORTED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mistake in a config: where (dotted YAML path), what, and what was received."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """A config with mistakes; `problems` lists every one with its YAML path."""

    __module__ = "trainer.config"  # its public home

    def __init__(self, problems: Iterable[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        count, name = len(self.problems), source or "the config"
        if count == 1 and not self.problems[0].path:
            super().__init__(f"{name}: {self.problems[0]}")
            return
        head = f"{name} has {count} problem{'s' if count != 1 else ''}:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


@dataclasses.dataclass
class ResolvedSpec:
    """A checked spec: the target, its validated keyword arguments and their plain form."""

    class_path: str
    target: Callable[..., Any]
    kwargs: dict[str, Any]
    plain: dict[str, Any]

    def as_plain(self) -> dict[str, Any]:
        return {"class_path": self.class_path, "init_args": self.plain}


def is_spec(value: Any) -> bool:
    """A mapping with a `class_path` key (and at most `init_args` besides)."""
    return isinstance(value, dict) and "class_path" in value


def suggest(name: Any, choices: Any) -> str:
    """' Did you mean 'x'?' for the closest of `choices`, or ''."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def received(value: Any) -> str:
    return f"Received: {value!r} of type {type(value).__name__}."


# ----------------------------------------------------------------------------- importing
def import_target(class_path: Any, path: str) -> tuple[Any, list[Problem]]:
    """Import `package.module.Name`; on failure return a problem with a suggestion."""
    where = f"{path}.class_path"
    if not isinstance(class_path, str) or "." not in class_path.strip("."):
        return None, [Problem(where, f"Expected a dotted import path such as 'mypkg.models.Classifier'. {received(class_path)}")]
    parts = class_path.split(".")
    module: Any = None
    index = len(parts) - 1
    while index >= 1:
        name = ".".join(parts[:index])
        try:
            module = importlib.import_module(name)
            break
        except ModuleNotFoundError as error:
            if error.name is not None and not name.startswith(error.name) and error.name != name:
                return None, [_import_failed(where, name, error)]  # the module imports something missing
            index -= 1
        except Exception as error:  # the user's module raised while importing
            return None, [_import_failed(where, name, error)]
    if module is None:
        top = parts[0]
        names = sorted(m.name for m in pkgutil.iter_modules())
        close = difflib.get_close_matches(top, names, n=1, cutoff=0.8)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return None, [Problem(where, f"cannot import {class_path!r}: no module named {top!r}.{hint} "
                              "Expected an importable module: is its folder on PYTHONPATH (or the package installed)?")]
    target: Any = module
    for depth, attribute in enumerate(parts[index:]):
        owner = target
        if not hasattr(owner, attribute):
            owner_name = ".".join(parts[: index + depth])
            choices = [n for n in dir(owner) if not n.startswith("_")]
            if inspect.ismodule(owner) and hasattr(owner, "__path__"):
                choices += [m.name for m in pkgutil.iter_modules(owner.__path__)]
            return None, [Problem(where, f"cannot import {class_path!r}: {owner_name!r} has no {attribute!r}."
                                  f"{suggest(attribute, choices)}{_shadowed(parts[0])}")]
        target = getattr(owner, attribute)
    if not callable(target):
        return None, [Problem(where, f"Expected a class or callable. Received: {class_path!r}, a {type(target).__name__}.")]
    _report_user_file(class_path, module)  # only once found: never above the error that says it is not there
    return target, []


#: Where a logger's `class_path` without a dot is found (`class_path: CSVLogger`).
LOGGER_HOMES = ("trainer.loggers",)


def homes_of(base: type | None) -> tuple[str, ...]:
    """The modules a short `class_path` of a `base` subclass is looked up in, as LightningCLI
    looks up `EarlyStopping` in its callbacks module: this trainer's `callbacks` for a callback."""
    from trainer.callback import Callback

    return ("callbacks",) if inspect.isclass(base) and issubclass(base, Callback) else ()


def short_name(name: str, path: str, base: type | None, homes: Sequence[str]) -> tuple[str | None, list[Problem]]:
    """The dotted path of a class given by its name alone (`EarlyStopping`): a class of that name
    in one of `homes` (`callbacks.EarlyStopping`), else an imported subclass of `base` of that
    name (a callback defined in the script), as LightningCLI resolves one."""
    where = f"{path}.class_path"
    choices: dict[str, str] = {}
    for home in homes:
        try:
            module = importlib.import_module(home)
        except Exception as error:  # noqa: BLE001 - a broken or shadowed home: reported, not raised
            return None, [_import_failed(where, home, error)]
        if not _ours(module):
            return None, [Problem(where, f"the name {name!r} is looked up in this trainer's `{home}` package, but "
                                  f"`{home}` is imported from {module.__file__}, a file of the same name. Expected "
                                  f"this trainer's own: rename that file (e.g. my_{home.split('.')[0]}.py), or give "
                                  "a dotted class_path.")]
        for attribute in getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]):
            value = getattr(module, attribute, None)
            if inspect.isclass(value) and not getattr(value, "_is_protocol", False) and (base is None or issubclass(value, base)):
                choices.setdefault(attribute, f"{home}.{attribute}")
    searchable = inspect.isclass(base) and typing.get_origin(base) is None and not getattr(base, "_is_protocol", False)
    if searchable and base is not None:
        stack: list[type] = list(base.__subclasses__())
        while stack:
            current = stack.pop()
            stack.extend(current.__subclasses__())
            if not current.__name__.startswith("_"):
                choices.setdefault(current.__name__, f"{current.__module__}.{current.__qualname__}")
    if name in choices:
        return choices[name], []
    listed = sorted({n for n, full in choices.items() if full.rsplit(".", 1)[0] in homes})
    shadowed = "".join(dict.fromkeys(_shadowed(home.split(".")[0]) for home in homes))
    return None, [Problem(where, f"cannot find a class named {name!r} in {' or '.join(map(repr, homes))}."
                          f"{suggest(name, choices)} Expected one of {', '.join(listed)}"
                          f"{' (or the name of an imported subclass)' if searchable else ''}, or a dotted import path "
                          f"such as 'mypkg.module.{name}'.{shadowed}")]


def _ours(module: Any) -> bool:
    """Whether `module` belongs to one of this trainer's packages (installed beside `trainer`),
    not to a user's file of the same name."""
    top = sys.modules.get(module.__name__.split(".")[0], module)
    file = getattr(top, "__file__", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return file is None or os.path.realpath(file) == os.path.join(root, top.__name__, "__init__.py")


def _in_user_folder(file: str) -> str | None:
    for folder in USER_FOLDERS:
        try:
            if os.path.commonpath([os.path.realpath(file), os.path.realpath(folder)]) == os.path.realpath(folder):
                return folder
        except ValueError:  # another drive (Windows)
            continue
    return None


def _report_user_file(class_path: str, module: Any) -> None:
    """A class_path read from the user's own folder: say which file (once per file, from rank 0:
    every process of a torchrun or SLURM job reads the same config)."""
    file = getattr(module, "__file__", None)
    if file and file not in _REPORTED and _in_user_folder(file) is not None:
        _REPORTED.add(file)
        rank_zero_info("class_path %s: imported from %s", class_path, file)


def _shadowed(top: str) -> str:
    """When a top-level package of this trainer hides a user's module of the same name."""
    if top not in ("trainer", "callbacks"):
        return ""
    for folder in USER_FOLDERS:
        for candidate in (os.path.join(folder, f"{top}.py"), os.path.join(folder, top, "__init__.py")):
            if os.path.isfile(candidate):
                return (f" Your {candidate} has the name of this trainer's own `{top}` package, which is read first; "
                        f"rename your file (e.g. my_{top}.py) and its class_path.")
    return ""


def _import_failed(where: str, name: str, error: BaseException) -> Problem:
    location = ""
    trace = error.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    if trace is not None:
        location = f" (at {trace.tb_frame.f_code.co_filename}:{trace.tb_lineno})"
    return Problem(where, f"importing {name!r} raised {type(error).__name__}: {error}{location}.")


# ----------------------------------------------------------------------------- checking
def _parameters(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """Keyword-passable parameters, their type hints (Any where unknown), and **kwargs."""
    signature = inspect.signature(target)
    function = target.__init__ if inspect.isclass(target) else target
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:  # an annotation that can't be resolved: resolve one by one
        hints = {}
        namespace = getattr(sys.modules.get(getattr(function, "__module__", "")), "__dict__", {})
        for name, parameter in signature.parameters.items():
            annotation = parameter.annotation
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, dict(namespace))  # noqa: S307 - the user's own annotation
                except Exception:
                    annotation = Any
            hints[name] = annotation
    keyword = {
        name: p for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    annotated = {name: hints.get(name, Any) if p.annotation is not p.empty else Any for name, p in keyword.items()}
    return keyword, annotated, var_keyword


def _classes_of(hint: Any) -> list[type]:
    """The classes a hint accepts (`A`, `A | B | None`), or [] when it is not that simple."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    classes = [m for m in members if m is not type(None)]
    if all(inspect.isclass(m) and m is not object and typing.get_origin(m) is None for m in classes):
        return classes
    return []


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    try:
        try:
            return TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
        except pydantic.PydanticUserError:  # the type carries its own config (a model, a TypedDict)
            return TypeAdapter(annotation)
    except Exception:  # a hint pydantic can't check: accept any value
        return None


def _plain(adapter: TypeAdapter[Any] | None, value: Any) -> Any:
    if adapter is not None:
        try:
            return adapter.dump_python(value, mode="json", warnings=False)  # a default outside its own hint (`0` for list[float] | float)
        except Exception:
            pass
    return value


def _signature_text(target: Any, parameters: dict[str, inspect.Parameter], hints: dict[str, Any]) -> str:
    parts = []
    for name, parameter in parameters.items():
        hint = hints.get(name, Any)
        text = name if hint is Any else f"{name}: {hint.__name__ if isinstance(hint, type) else str(hint).replace('typing.', '')}"
        parts.append(text if parameter.default is parameter.empty else f"{text} = {parameter.default!r}")
    return f"{getattr(target, '__qualname__', target)}({', '.join(parts)})"


def check_spec(
    spec: Any, path: str, base: type | None = None, *, allow_callable: bool = False, skip: Iterable[str] = (),
    homes: Sequence[str] | None = None,
) -> tuple[ResolvedSpec | None, list[Problem]]:
    """Import the target of `spec` and validate its `init_args`; collect every problem.

    With `base`, a class target must subclass it; `allow_callable` also accepts a function
    (whose result is checked when it is called). The parameters in `skip` are filled in by
    the caller (an optimizer's `params`): they are neither required nor accepted. A
    `class_path` without a dot is a class's name, looked up in `homes` (by default those of
    `base`: `callbacks` for a callback) and among the imported subclasses of `base`.
    """
    if not isinstance(spec, dict):
        return None, [Problem(path, f"Expected a mapping {{class_path: ..., init_args: {{...}}}}. {received(spec)}")]
    problems = [Problem(f"{path}.{key}", f"unknown key.{suggest(key, ['class_path', 'init_args'])} Expected only class_path and init_args.")
                for key in spec if key not in ("class_path", "init_args")]
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        problems.append(Problem(f"{path}.init_args", f"Expected a mapping of argument names to values. {received(init_args)}"))
        init_args = {}
    class_path: Any = spec.get("class_path")
    homes = homes_of(base) if homes is None else homes
    if isinstance(class_path, str) and class_path and "." not in class_path and homes:
        class_path, found = short_name(class_path, path, base, homes)
        if class_path is None:
            return None, problems + found
    target, import_problems = import_target(class_path, path)
    if target is None:
        return None, problems + import_problems
    if base is not None and not (inspect.isclass(target) and issubclass(target, base)):
        if inspect.isclass(target) or not allow_callable:
            kind = "a class" if inspect.isclass(target) else "a function"
            problems.append(Problem(f"{path}.class_path", f"Expected a subclass of {base.__module__}.{base.__qualname__}"
                                    f"{' or a function returning one' if allow_callable else ''}. "
                                    f"Received: {class_path!r}, {kind} that is not."))
    try:
        parameters, hints, var_keyword = _parameters(target)
    except (TypeError, ValueError):  # no introspectable signature (some builtins): no checks
        parameters, hints, var_keyword = {}, {}, True
    parameters = {name: p for name, p in parameters.items() if name not in skip}
    kwargs: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for name, value in init_args.items():
        where = f"{path}.init_args.{name}"
        if name not in parameters and not var_keyword:
            accepted = ", ".join(parameters) or "no arguments"
            problems.append(Problem(where, f"unknown argument of {class_path}.{suggest(name, parameters)} Accepted: {accepted}."))
            continue
        if is_spec(value):
            nested, nested_problems = check_spec(value, where)
            problems += nested_problems
            classes = _classes_of(hints.get(name, Any))
            if nested is not None and classes and not (
                inspect.isclass(nested.target) and issubclass(nested.target, tuple(classes))
            ):
                expected = " or ".join(c.__qualname__ for c in classes)
                problems.append(Problem(f"{where}.class_path", f"Expected a subclass of {expected}. Received: {value['class_path']!r}."))
            if nested is not None:
                kwargs[name], plain[name] = nested, nested.as_plain()
            continue
        adapter = _adapter(hints.get(name, Any))
        if adapter is None:
            kwargs[name] = plain[name] = value
            continue
        try:
            kwargs[name] = adapter.validate_python(value)
        except pydantic.ValidationError as error:
            for item in error.errors():
                inner = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in item["loc"])
                problems.append(Problem(where + inner, f"{item['msg']}. {received(item.get('input', value))} "
                                        f"Signature: {_signature_text(target, parameters, hints)}"))
            continue
        plain[name] = _plain(adapter, kwargs[name])
    for name, parameter in parameters.items():
        if name in init_args:
            continue
        if parameter.default is parameter.empty:
            problems.append(Problem(f"{path}.init_args.{name}", f"missing required argument of {class_path}. "
                                    f"Signature: {_signature_text(target, parameters, hints)}"))
        elif _is_plain(parameter.default) or isinstance(parameter.default, tuple):
            plain[name] = _plain(_adapter(hints.get(name, Any)), parameter.default)
    return ResolvedSpec(class_path, target, kwargs, plain), problems


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def instantiate(spec: ResolvedSpec) -> Any:
    """Call the target with its arguments, building nested specs first."""
    kwargs = {name: instantiate(v) if isinstance(v, ResolvedSpec) else v for name, v in spec.kwargs.items()}
    return spec.target(**kwargs)
