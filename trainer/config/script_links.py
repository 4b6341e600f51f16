"""What a LightningCLI subclass's `add_arguments_to_parser` asked for, applied to a config.

`trainer/config/script_parser.py` records the calls; the functions here turn them into config
values in this layout (`model.hidden` is `model.init_args.hidden`, `trainer.logger` is the
top-level `logger:`), read the values links take from the resolved config, and give the
problems they find with the YAML path and the call that caused them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainer.config.classpath import ConfigError, Problem, ResolvedSpec, _is_plain, check_spec, is_spec
from trainer.config.script_parser import ClassArgs, LightningArgumentParser, Link, normal_path, own_value

if TYPE_CHECKING:
    from trainer.config.experiment import ResolvedConfig

__all__ = ["MISSING", "NOT_CALLED", "ConfigView", "check_overridden", "linked_model", "optimizer_class_problems", "as_class_spec", "check_class_sections", "class_sections", "defaults_layer", "get_path", "own_options", "parse_link_values", "set_path",
           "source_value", "without"]

MISSING: Any = object()


def get_path(tree: Any, path: str) -> Any:
    """The value at dotted `path` in nested dicts/lists, or MISSING."""
    node = tree
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set dotted `path` in nested dicts, making the dicts on the way."""
    parts = path.split(".")
    node = tree
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def without(tree: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """A copy of `tree` with the values at `paths` left out (LightningCLI's saved config has no link targets)."""
    out = copy.deepcopy(tree)
    for path in paths:
        *parents, last = path.split(".")
        node = get_path(out, ".".join(parents)) if parents else out
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def lightning_alias(tree: Mapping[str, Any], path: str) -> str:
    """`trainer.logger...` / `trainer.callbacks...` where this layout keeps them (the top level)."""
    for key in ("logger", "callbacks"):
        if path == f"trainer.{key}" or path.startswith(f"trainer.{key}."):
            trainer = tree.get("trainer")
            if not (isinstance(trainer, Mapping) and key in trainer) and key in tree:
                return path[len("trainer."):]
    return path


def defaults_layer(parser: LightningArgumentParser, owner: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`parser.set_defaults(...)` as a config layer under the files, and the Trainer objects
    among them (a logger instance: used when the config sets no value for it)."""
    layer: dict[str, Any] = {}
    objects: dict[str, Any] = {}
    sections = {c.key: c for c in parser.class_args}
    for key, value in parser.defaults.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{owner}.add_arguments_to_parser: parser.set_defaults: expected dotted keys such as "
                             f"'trainer.max_epochs'. Received: {key!r}.")
        if not (_is_plain(value) or is_spec(value)):
            parts = key.split(".")
            if parts[0] == "trainer" and len(parts) == 2:
                objects[parts[1]] = value
                continue
            raise ValueError(f"{owner}.add_arguments_to_parser: parser.set_defaults({{{key!r}: {value!r}}}): an object "
                             "is only taken as the default of a Trainer argument ('trainer.logger'). Expected plain "
                             "values or {'class_path': ..., 'init_args': {...}} for the config.")
        top = key.split(".")[0]
        path = key if top in sections and not sections[top].subclass_mode else normal_path(key)
        if path in ("model", "data") and isinstance(value, dict) and not {"class_path", "init_args"} & set(value):
            value = {"init_args": value}
        set_path(layer, path, copy.deepcopy(value))
    return layer, objects


def own_options(parser: LightningArgumentParser, config: dict[str, Any], given: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The values of the script's `add_argument` options, taken out of `config` (a file may hold
    them at its top level): the command line's, else the file's, else the option's default."""
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for (names, kwargs), key in zip(parser.arguments, parser.argument_keys):
        found = get_path(config, key)
        if "." in key:
            top = config.get(key.split(".")[0])
            if isinstance(top, dict):
                top.pop(key.split(".", 1)[1], None)
                if not top:
                    config.pop(key.split(".")[0])
        else:
            config.pop(key, None)
        if key in given:
            raw, from_text = given[key], True
        elif found is not MISSING:
            raw, from_text = found, False
        elif kwargs.get("required"):
            problems.append(Problem(f"--{key}", "required option of this script (add_argument). Expected it on the "
                                    f"command line or as `{key}:` in the config."))
            continue
        else:
            raw, from_text = kwargs.get("default"), False
            if raw is None or (kwargs.get("action") in ("store_true", "store_false")):
                set_path(values, key, raw if kwargs.get("action") not in ("store_true", "store_false") else
                         (raw if raw is not None else kwargs["action"] == "store_false"))
                continue
        try:
            set_path(values, key, own_value(kwargs, raw, from_text and kwargs.get("action") is None))
        except ValueError as error:
            problems.append(Problem(f"--{key}" if key in given else key, str(error)))
    return values, problems


def class_sections(parser: LightningArgumentParser, config: dict[str, Any], overrides: dict[str, Any],
                   ) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    """The sections of `add_lightning_class_args`, taken out of `config` and `overrides`, in this
    layout ({class_path, init_args}); LightningCLI's flat form (`checkpoint: {monitor: ...}`)
    unless the section is in subclass mode."""
    out: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for args in parser.class_args:
        value = config.pop(args.key, None)
        spec = _as_spec(args, value)
        for name in [n for n in overrides if n == args.key or n.startswith(args.key + ".")]:
            given = overrides.pop(name)
            if name == args.key:
                if isinstance(given, str) and args.subclass_mode:
                    spec["class_path"] = given
                elif isinstance(given, dict):
                    spec = _as_spec(args, given)
                else:
                    problems.append(Problem(f"--{name}", f"Expected {args.key}.NAME VALUE (an argument of "
                                            f"{args.base.__qualname__}). Received: {given!r}."))
                continue
            rest = name[len(args.key) + 1:]
            if rest == "class_path" and args.subclass_mode:
                spec["class_path"] = given
                continue
            rest = rest[len("init_args."):] if rest.startswith("init_args.") else rest
            set_path(spec.setdefault("init_args", {}), rest, given)
        out[args.key] = spec
    return out, problems


def _as_spec(args: ClassArgs, value: Any) -> dict[str, Any]:
    own = f"{args.base.__module__}.{args.base.__qualname__}"
    if isinstance(value, dict) and {"class_path", "init_args"} & set(value):
        spec = copy.deepcopy(value)
        if not args.subclass_mode:
            spec.setdefault("class_path", own)
        return spec
    init_args = copy.deepcopy(value) if isinstance(value, dict) else {}
    return {"class_path": own, "init_args": init_args} if not args.subclass_mode or value is None else {"init_args": init_args}


def as_class_spec(parser: LightningArgumentParser, key: str, value: Any) -> dict[str, Any]:
    """A class-args section's plain value (as `cli.config` holds it) as a spec to check again."""
    args = next(a for a in parser.class_args if a.key == key)
    return _as_spec(args, value)


def check_class_sections(parser: LightningArgumentParser, sections: Mapping[str, dict[str, Any]],
                         ) -> tuple[dict[str, ResolvedSpec], dict[str, Any], list[Problem]]:
    """Each class-args section checked as a callback spec: the specs to build, the plain values
    (LightningCLI's flat form unless in subclass mode) and the problems."""
    from trainer.callback import Callback

    specs: dict[str, ResolvedSpec] = {}
    plain: dict[str, Any] = {}
    problems: list[Problem] = []
    for args in parser.class_args:
        spec, found = check_spec(sections[args.key], args.key, args.base if args.subclass_mode else Callback)
        if not args.subclass_mode:
            found = [Problem(p.path.replace(f"{args.key}.init_args.", f"{args.key}.", 1), p.message) for p in found]
        problems += found
        if spec is not None:
            specs[args.key] = spec
            plain[args.key] = spec.as_plain() if args.subclass_mode else dict(spec.plain)
    return specs, plain, problems


def source_value(plain: Mapping[str, Any], path: str) -> Any:
    """The value a link reads at Lightning's `path` in the resolved config (MISSING: none)."""
    return get_path(plain, lightning_alias(plain, normal_path(path)))


def parse_link_values(links: Sequence[Link], plain: Mapping[str, Any], merged: dict[str, Any],
                      extras: dict[str, Any], explicit: Mapping[str, Any]) -> list[Problem]:
    """Apply the `apply_on="parse"` links: each target (in `merged`, the config before it is
    checked, or in `extras`, the script's own options and class sections) takes the value its
    sources have in `plain` (the config resolved once, defaults filled in, with the script's
    options and class sections). A target that the files or the command line (`explicit`)
    set to another value is a problem: the link decides it (defaults may differ)."""
    problems: list[Problem] = []
    for link in links:
        if link.apply_on != "parse":
            continue
        values = [source_value(plain, s) for s in link.sources]
        absent = [s for s, v in zip(link.sources, values) if v is MISSING]
        if absent:
            problems.append(Problem(absent[0], f"{link.describe()}: the config has no value there. Expected the path "
                                    "of an argument or option (data.batch_size, model.init_args.hidden, trainer.max_epochs, "
                                    "or an option the script adds)."))
            continue
        try:
            value = link.value(values)
        except Exception as error:  # the user's compute_fn
            problems.append(Problem(link.target, f"{link.describe()}: compute_fn{tuple(values)!r} raised "
                                    f"{type(error).__name__}: {error}"))
            continue
        target = normal_path(link.target)
        holder = extras if target.split(".")[0] in extras else merged
        target = lightning_alias(holder, target)
        if holder is extras and target.split(".")[0] in extras and is_spec(extras[target.split(".")[0]]):
            top, _, rest = target.partition(".")
            target = f"{top}.init_args.{rest}" if rest and not rest.startswith(("init_args.", "class_path")) else target
        flat = normal_path(link.target)
        given = next((v for v in (get_path(explicit, lightning_alias(explicit, flat)), get_path(explicit, target))
                      if v is not MISSING), MISSING)
        if given is not MISSING and given != value:
            problems.append(Problem(link.target, f"set by {link.describe()}, which gives {value!r}; the config also "
                                    f"sets {given!r}. Expected it only through {' and '.join(link.sources)}: remove it "
                                    "from the config and the command line."))
            continue
        set_path(holder, target, value)
    return problems


class ConfigView(dict):  # type: ignore[type-arg]
    """`cli.config`: the resolved config as a dict that also reads as attributes (`cli.config.model`,
    as jsonargparse's Namespace), where `cli.config["fit"]` (the subcommand) is the config itself and
    a section's arguments read and change through it (`cli.config.model.hidden` is
    `cli.config["model"]["init_args"]["hidden"]`), as in LightningCLI's flat sections."""

    def __init__(self, values: dict[str, Any], subcommand: str | None = None) -> None:
        super().__init__(values)
        object.__setattr__(self, "_subcommand", subcommand)

    @classmethod
    def of(cls, plain: dict[str, Any], subcommand: str | None = None) -> ConfigView:
        return cls({k: cls.of(v) if isinstance(v, dict) and not isinstance(v, ConfigView) else v for k, v in plain.items()},
                   subcommand)

    @staticmethod
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ConfigView.plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [ConfigView.plain(v) for v in value]
        return value

    def _init_args(self, key: str) -> dict[str, Any] | None:
        """The spec's `init_args` when `key` is one of its arguments (LightningCLI's flat `config.model.hidden`)."""
        init_args = dict.get(self, "init_args")
        if key not in ("class_path", "init_args") and not dict.__contains__(self, key) and isinstance(init_args, dict):
            return init_args
        return None

    def __missing__(self, key: str) -> Any:
        if key == self._subcommand and key is not None:
            return self
        init_args = self._init_args(key)
        if init_args is not None and key in init_args:
            return init_args[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        init_args = self._init_args(key) if isinstance(key, str) else None
        return init_args is not None and key in init_args

    def __setitem__(self, key: str, value: Any) -> None:
        init_args = self._init_args(key)
        if init_args is not None and key in init_args:
            init_args[key] = value
        else:
            dict.__setitem__(self, key, value)

    def as_dict(self) -> dict[str, Any]:
        """The config as plain dicts (jsonargparse's `Namespace.as_dict`)."""
        return ConfigView.plain(self)  # type: ignore[no-any-return]

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self or key == self._subcommand else default

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the config has no {name!r}. Keys: {', '.join(self)}.") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_subcommand":
            object.__setattr__(self, name, value)
        else:
            self[name] = value


#: LightningCLI methods a subclass may override that this class does not call, with what to do instead.
NOT_CALLED = {
    "instantiate_trainer": "give Trainer arguments in the config or in trainer_defaults, and callbacks in "
                           "trainer_defaults={'callbacks': [...]} or with parser.add_lightning_class_args",
    "_instantiate_trainer": "give Trainer arguments in the config or in trainer_defaults",
    "init_parser": "add options in add_arguments_to_parser (parser.add_argument)",
    "setup_parser": "add options in add_arguments_to_parser (parser.add_argument)",
    "parse_arguments": "change the parsed config in before_instantiate_classes (self.config)",
    "add_default_arguments_to_parser": "add options in add_arguments_to_parser",
    "add_core_arguments_to_parser": "add options in add_arguments_to_parser; the model, data and trainer sections are fixed",
    "link_optimizers_and_lr_schedulers": "give the model an argument for its optimizer and write configure_optimizers",
    "subcommands": "the subcommands are fit, validate, test and predict; run other code in after_fit or with run=False",
    "_prepare_subcommand_kwargs": "override the subcommand itself (def fit(self, model, **kwargs))",
    "_run_subcommand": "override before_fit / after_fit (or the subcommand: def fit(self, model, **kwargs))",
    "_set_seed": "set seed_everything in the config or seed_everything_default",
}


def linked_model(data: Any, links: Sequence[Link], model: Mapping[str, Any], explicit: Mapping[str, Any],
                 note: Callable[[str], str]) -> ResolvedSpec:
    """The model's spec (`model`: its plain `{class_path, init_args}`) with the values the
    `apply_on="instantiate"` links read from the built `data`; a target the files or the
    command line (`explicit`) set to another value is an error. `note(path)` names the link
    in a problem of the checked spec.

    Raises:
        ConfigError: an attribute the data lacks, a conflicting value, or a value the model refuses.
    """
    from trainer.module import Module

    spec = {"model": copy.deepcopy(dict(model))}
    problems = []
    for link in links:
        values = []
        for source in link.sources:
            value: Any = data
            names = source.split(".")[1:]
            for name in names[1:] if names[:1] == ["init_args"] else names:  # data.init_args.X: the attribute X
                value = getattr(value, name, MISSING)
                if value is MISSING:
                    break
            values.append(value)
        if MISSING in values:
            missing = link.sources[values.index(MISSING)].split(".", 1)[1].removeprefix("init_args.")
            problems.append(Problem(link.target, f"{link.describe()}: the built {type(data).__qualname__} has no "
                                    f"attribute {missing!r}. Expected the data class to set it in its __init__."))
            continue
        value = link.value(values)
        target = normal_path(link.target)
        given = get_path(explicit, target)
        if given is not MISSING and given != value:
            problems.append(Problem(link.target, f"set by {link.describe()}, which gives {value!r}; the config also "
                                    f"sets {given!r}. Expected it only through the link: remove it from the config."))
            continue
        set_path(spec, target, value)
    if problems:
        raise ConfigError(problems, None)
    built, found = check_spec(spec["model"], "model", Module, allow_callable=True)
    problems += [Problem(p.path, p.message + note(p.path)) for p in found]
    if problems or built is None:
        raise ConfigError(problems, None)
    return built


def optimizer_class_problems(parser: LightningArgumentParser, resolved: ResolvedConfig) -> list[Problem]:
    """`add_optimizer_args(classes)` / `add_lr_scheduler_args(classes)`: the section's class is one of them."""
    import inspect

    problems = []
    for section, args in parser.optimizers.items():
        spec = getattr(resolved, section)
        if spec is not None and not (inspect.isclass(spec.target) and issubclass(spec.target, args.classes)):
            names = ", ".join(f"{c.__module__}.{c.__qualname__}" for c in args.classes)
            problems.append(Problem(f"{section}.class_path", f"this script's add_arguments_to_parser takes "
                                    f"{'only ' if args.fixed else 'a subclass of '}{names}. Received: {spec.class_path!r}."))
    return problems


def check_overridden(cls: type, base: type, owner: str) -> None:
    """LightningCLI's methods `base` does not call: overriding one in `cls` would silently do nothing.

    Raises:
        ValueError: names the method and what to write instead.
    """
    for name, instead in NOT_CALLED.items():
        if name in vars(base):
            continue
        for klass in cls.__mro__:
            if klass is base:
                break
            if name in vars(klass):
                raise ValueError(f"{owner}.{name} is overridden, but this CLI does not call {name}: it would be "
                                 f"silently skipped. Instead, {instead}.")
