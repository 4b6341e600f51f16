"""The `parser` a LightningCLI subclass's `add_arguments_to_parser(self, parser)` receives.

LightningCLI hands that method a jsonargparse parser; here it gets a `LightningArgumentParser`
that records what the method asks for, and the CLI (trainer/config/script.py) applies it on
this package's config layer, so the whole config is still checked at once before anything is
built. What real projects call there is taken:

- `link_arguments(source, target, compute_fn=None, apply_on="parse")`: the target takes the
  source's resolved value (`apply_on="parse"`), or the attribute of the built data object
  (`apply_on="instantiate"`, a `data.*` source and a `model.*` target);
- `set_defaults({"model.hidden": 64, "trainer.max_epochs": 3})`: defaults the files and the
  command line override;
- `add_argument("--name", default=..., type=..., help=...)`: the script's own options, which a
  config file may also hold at its top level;
- `add_lightning_class_args(ModelCheckpoint, "checkpoint")`: a callback configured under its
  own key (`--checkpoint.monitor val_loss`), added after the config's callbacks;
- `add_optimizer_args(torch.optim.Adam)` / `add_lr_scheduler_args(...)`: the optimizer (and
  scheduler) the `optimizer:` (`lr_scheduler:`) section builds, one class or a tuple of them.

Any other jsonargparse method raises an `AttributeError` that names it and says what to write
instead, before anything is read or built.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["ClassArgs", "Link", "LightningArgumentParser", "OptimizerArgs", "normal_path"]

_APPLY_ON = ("parse", "instantiate")
#: The sections of a config this CLI knows; an `add_argument` or a class-args key may not take them.
RESERVED = ("model", "data", "trainer", "callbacks", "logger", "seed", "seed_everything", "optimizer", "lr_scheduler",
            "config", "print_config", "ckpt_path", "help", "fit", "validate", "test", "predict", "subcommand")


@dataclasses.dataclass(frozen=True)
class Link:
    """`link_arguments(sources, target, compute_fn, apply_on)`, with Lightning's dotted paths."""

    sources: tuple[str, ...]
    target: str
    compute_fn: Callable[..., Any] | None
    apply_on: str

    def value(self, values: Sequence[Any]) -> Any:
        if self.compute_fn is not None:
            return self.compute_fn(*values)
        return values[0]

    def describe(self) -> str:
        source = self.sources[0] if len(self.sources) == 1 else "(" + ", ".join(self.sources) + ")"
        return f"link_arguments({source!r}, {self.target!r}, apply_on={self.apply_on!r})"


@dataclasses.dataclass(frozen=True)
class ClassArgs:
    """`add_lightning_class_args(CallbackClass, key, subclass_mode)`: a callback under `key`."""

    base: type
    key: str
    subclass_mode: bool


@dataclasses.dataclass(frozen=True)
class OptimizerArgs:
    """`add_optimizer_args(classes)` / `add_lr_scheduler_args(classes)`: the classes the section takes."""

    section: str
    classes: tuple[type, ...]
    fixed: bool  # one class, not a tuple: the section holds its arguments only (`optimizer: {lr: 0.1}`)


def normal_path(path: str) -> str:
    """A Lightning path in this layout: `model.hidden` is `model.init_args.hidden` (also `data.`),
    `seed_everything` is `seed`."""
    parts = path.split(".")
    if parts[0] == "seed_everything":
        parts[0] = "seed"
    if parts[0] in ("model", "data") and len(parts) > 1 and parts[1] not in ("class_path", "init_args"):
        parts.insert(1, "init_args")
    return ".".join(parts)


class LightningArgumentParser:
    """What `add_arguments_to_parser(self, parser)` may call; see the module's docstring."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self.links: list[Link] = []
        self.defaults: dict[str, Any] = {}
        self.arguments: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.argument_keys: list[str] = []
        self.class_args: list[ClassArgs] = []
        self.optimizers: dict[str, OptimizerArgs] = {}
        #: LightningArgumentParser's list of the keys of callbacks added with add_lightning_class_args.
        self.callback_keys: list[str] = []

    def _where(self, call: str) -> str:
        return f"{self._owner}.add_arguments_to_parser: parser.{call}"

    # ------------------------------------------------------------------------- links
    def link_arguments(self, source: str | Sequence[str], target: str, compute_fn: Callable[..., Any] | None = None,
                       apply_on: str = "parse") -> None:
        sources = (source,) if isinstance(source, str) else tuple(source)
        call = self._where(f"link_arguments({source!r}, {target!r}, apply_on={apply_on!r})")
        if apply_on not in _APPLY_ON:
            raise ValueError(f"{call}: apply_on expects 'parse' or 'instantiate'. Received: {apply_on!r}.")
        if not sources or not all(isinstance(s, str) and s for s in sources) or not isinstance(target, str) or not target:
            raise ValueError(f"{call}: expected dotted config paths such as 'data.batch_size' and 'model.batch_size'.")
        if len(sources) > 1 and compute_fn is None:
            raise ValueError(f"{call}: several sources need a compute_fn that makes one value of them.")
        if compute_fn is not None and not callable(compute_fn):
            raise ValueError(f"{call}: compute_fn must be callable. Received: {compute_fn!r}.")
        if apply_on == "instantiate":
            if any(s.split(".")[0] != "data" or s.count(".") < 1 for s in sources) or target.split(".")[0] != "model":
                raise ValueError(
                    f"{call}: a link applied on instantiation reads an attribute of the built data object and sets an "
                    "argument of the model, which is built after it (`link_arguments('data.num_classes', "
                    "'model.num_classes', apply_on='instantiate')`). Other directions are not taken here. Expected a "
                    "'data.<attribute>' source and a 'model.<argument>' target; for values known from the config, "
                    "use apply_on='parse'.")
        if any(link.target == target for link in self.links):
            raise ValueError(f"{call}: {target!r} is already the target of another link. Expected one link per target.")
        self.links.append(Link(sources, target, compute_fn, apply_on))

    # ---------------------------------------------------------------------- defaults
    def set_defaults(self, *args: Mapping[str, Any], **kwargs: Any) -> None:
        for given in (*args, kwargs):
            if not isinstance(given, Mapping):
                raise ValueError(f"{self._where('set_defaults')}: expected a dict of dotted keys such as "
                                 f"{{'trainer.max_epochs': 3}}. Received: {given!r}.")
            self.defaults.update(given)

    def dump(self, cfg: Any, format: str = "yaml", **kwargs: Any) -> str:  # noqa: A002  (jsonargparse's name)
        """The YAML text of a config (`cli.config`), as jsonargparse's `dump` gives it to a SaveConfigCallback."""
        from trainer.config.yaml_io import dump_yaml

        def plain(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return [plain(v) for v in value] if isinstance(value, list) else value

        if format != "yaml":
            raise ValueError(f"{self._where('dump')}: only format='yaml' is written. Received: {format!r}.")
        return dump_yaml(plain(cfg))

    def get_defaults(self) -> Any:
        raise self._unsupported("get_defaults()", "read the values from `self.config` in before_instantiate_classes")

    # ------------------------------------------------------------------ own options
    def add_argument(self, *names: str, **kwargs: Any) -> None:
        long = [n for n in names if isinstance(n, str) and n.startswith("--")]
        if not long:
            raise ValueError(f"{self._where(f'add_argument{names!r}')}: expected an option such as '--name' (a "
                             "positional argument would clash with the subcommand and --config). Expected '--NAME'.")
        key = long[0][2:].replace("-", "_") if "dest" not in kwargs else str(kwargs["dest"])
        if key.split(".")[0] in RESERVED:
            raise ValueError(f"{self._where(f'add_argument({long[0]!r})')}: {key.split('.')[0]!r} is a section this CLI "
                             f"already has. Expected another name; the section's own options are --{key.split('.')[0]}.*.")
        self.arguments.append((names, kwargs))
        self.argument_keys.append(key)

    # ------------------------------------------------------------------ class groups
    def add_lightning_class_args(self, lightning_class: Any, nested_key: str, subclass_mode: bool = False,
                                 required: bool = True) -> list[str]:
        from trainer.callback import Callback

        call = self._where(f"add_lightning_class_args({getattr(lightning_class, '__qualname__', lightning_class)}, "
                           f"{nested_key!r})")
        if not (inspect.isclass(lightning_class) and issubclass(lightning_class, Callback)):
            raise ValueError(f"{call}: only a Callback class is taken here (configured under its own key and added to "
                             "the Trainer's callbacks). The model, the data and the Trainer are the CLI's own sections "
                             "(model:, data:, trainer:). Expected a trainer.Callback subclass.")
        if not isinstance(nested_key, str) or not nested_key or nested_key.split(".")[0] in RESERVED or "." in nested_key:
            raise ValueError(f"{call}: expected a new top-level key such as 'checkpoint' (not one of "
                             f"{', '.join(RESERVED)}). Received: {nested_key!r}.")
        self.class_args.append(ClassArgs(lightning_class, nested_key, subclass_mode))
        self.callback_keys.append(nested_key)
        return []

    def add_optimizer_args(self, optimizer_class: Any = None, nested_key: str = "optimizer",
                           link_to: str = "AUTOMATIC") -> None:
        from torch.optim import Optimizer

        self._optimizer_args("add_optimizer_args", "optimizer", Optimizer, optimizer_class, nested_key, link_to)

    def add_lr_scheduler_args(self, lr_scheduler_class: Any = None, nested_key: str = "lr_scheduler",
                              link_to: str = "AUTOMATIC") -> None:
        from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

        self._optimizer_args("add_lr_scheduler_args", "lr_scheduler", (LRScheduler, ReduceLROnPlateau),
                             lr_scheduler_class, nested_key, link_to)

    def _optimizer_args(self, name: str, section: str, base: Any, given: Any, nested_key: str, link_to: str) -> None:
        call = self._where(f"{name}({getattr(given, '__qualname__', given)!r}, nested_key={nested_key!r})")
        if nested_key != section or link_to != "AUTOMATIC":
            raise ValueError(f"{call}: only the automatic `{section}:` section is taken here (nested_key={section!r}, "
                             f"link_to='AUTOMATIC'), which the module's configure_optimizers returns. For several "
                             "optimizers or one the module builds itself, give the module an argument for it "
                             "(`optimizer: OptimizerCallable`-style, set in model.init_args) and write configure_optimizers.")
        classes = given if isinstance(given, tuple) else (base if isinstance(base, tuple) else (base,)) if given is None else (given,)
        if not all(inspect.isclass(c) and issubclass(c, base) for c in classes):
            raise ValueError(f"{call}: expected a subclass of {base} or a tuple of them. Received: {given!r}.")
        fixed = given is not None and not isinstance(given, tuple)
        self.optimizers[section] = OptimizerArgs(section, tuple(classes), fixed)

    # -------------------------------------------------------------- everything else
    def _unsupported(self, call: str, instead: str) -> AttributeError:
        return AttributeError(f"{self._where(call)} is not taken: this CLI's parser is not jsonargparse's. Instead, "
                              f"{instead}. What add_arguments_to_parser may call: link_arguments, set_defaults, "
                              "add_argument, add_lightning_class_args (a Callback), add_optimizer_args, "
                              "add_lr_scheduler_args.")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        instead = {
            "add_class_arguments": "give the class an argument of the model or data (a `class_path` spec in its "
                                   "init_args), or a callback with add_lightning_class_args",
            "add_subclass_arguments": "give the model or data an argument typed with the base class (a `class_path` "
                                      "spec in its init_args is built and checked against the type)",
            "add_method_arguments": "add the options you need with add_argument",
            "add_function_arguments": "add the options you need with add_argument",
            "add_argument_group": "call add_argument on the parser itself",
            "add_subcommands": "the subcommands are fit, validate, test and predict",
        }.get(name, "use one of the calls listed below")
        raise self._unsupported(f"{name}(...)", instead)


def argparse_options(parser: argparse.ArgumentParser, arguments: Sequence[tuple[tuple[str, ...], dict[str, Any]]]) -> None:
    """The script's own options on `parser`, read as text (`own_value` converts them); a value not
    given is left out of the namespace (the file's value or the default is used)."""
    if not arguments:
        return
    group = parser.add_argument_group("the script's own options (add_arguments_to_parser)")
    for names, kwargs in arguments:
        options = {k: v for k, v in kwargs.items() if k not in ("default", "required", "type")}
        options["default"] = argparse.SUPPRESS
        if "dest" not in options:
            options["dest"] = next(n for n in names if n.startswith("--"))[2:].replace("-", "_")
        group.add_argument(*names, **options)


def own_value(kwargs: Mapping[str, Any], value: Any, from_text: bool) -> Any:
    """An option's value by its `type` (a class or a type hint, checked with pydantic); text from
    the command line is read as YAML first unless the type is `str`.

    Raises:
        ValueError: the value does not fit the type (the message says what was received).
    """
    from pydantic import TypeAdapter, ValidationError

    from trainer.config.yaml_io import parse_yaml

    hint = kwargs.get("type")
    if value is None:  # null in a file (LightningCLI saves an option without a value as null)
        return None
    if isinstance(value, list):
        return [own_value(kwargs, item, from_text) for item in value]
    if from_text and isinstance(value, str) and hint is not str:
        try:
            value = parse_yaml(value) if value.strip() else value
        except Exception:  # not YAML: keep the text
            pass
    if hint is None:
        return value
    try:
        return TypeAdapter(hint).validate_python(value)
    except (ValidationError, TypeError) as error:
        if callable(hint) and not isinstance(error, ValidationError):
            return hint(value)  # a plain callable such as a path type
        reason = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
        raise ValueError(f"{reason}. Received: {value!r}. Expected a value of type {getattr(hint, '__name__', hint)}.") from None
