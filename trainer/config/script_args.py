"""The arguments of `LightningCLI(...)` that are not classes: checked when the CLI is made.

`trainer/config/script.py` builds the command line; this module reads what the script passed
as LightningCLI 2.6 reads it, and refuses, with a `ValueError` naming the argument, what has
no meaning on this config layer (a jsonargparse parser class, an environment-variable parser):

- `trainer_defaults`: plain values and `class_path` specs are config values (the files and
  the command line override them, and they are checked with the rest of the config); objects
  (a logger, a precision or a strategy instance) are defaults used when the config does not
  set that key; `callbacks` are persistent callback instances, appended after the config's own.
- `save_config_callback` / `save_config_kwargs`: whether and how `config.yaml` is written.
- `parser_kwargs`: the options of the command line this CLI has.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from trainer.config.classpath import _is_plain, is_spec, suggest

__all__ = [
    "SaveConfig", "TrainerDefaults", "check_save_config", "check_parser_kwargs", "check_unused", "split_trainer_defaults", "config_sets",
]

#: The subcommands whose names `parser_kwargs` may hold (`{"fit": {...}}`).
SUBCOMMANDS = ("fit", "validate", "test", "predict")
#: `parser_kwargs` this CLI takes (at the top and per subcommand).
PARSER_KWARGS = ("default_config_files", "description")
#: What some of jsonargparse's parser options would need, for the error that refuses them.
_PARSER_HINTS = {
    "default_env": "settings are not read from environment variables (PL_CONFIG, PL_TRAINER__MAX_EPOCHS); "
                   "give them in a config file or on the command line",
    "env_prefix": "settings are not read from environment variables; give them in a config file or on the command line",
    "parser_mode": "config files are read as plain YAML (no omegaconf interpolation); write the values out",
}
#: `save_config_kwargs` LightningCLI's SaveConfigCallback takes.
SAVE_CONFIG_KWARGS = ("config_filename", "overwrite", "multifile", "save_to_log_dir")


@dataclasses.dataclass(frozen=True)
class SaveConfig:
    """How the run's resolved config is written into its folder.

    Attributes:
        enabled: write it at all (`save_config_callback=None` writes nothing).
        filename: its name in the run's folder (`config_filename`).
        overwrite: None (not given): the run's folder is the run's own, and a resumed run rewrites
            its file; True: write over an existing file; False: an existing file is an error.
    """

    enabled: bool = True
    filename: str = "config.yaml"
    overwrite: bool | None = None
    callback: type | None = None  # a SaveConfigCallback subclass whose save_config the run calls
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TrainerDefaults:
    """`trainer_defaults` split by kind: config values, objects, persistent callbacks."""

    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    objects: dict[str, Any] = dataclasses.field(default_factory=dict)
    callbacks: list[Any] = dataclasses.field(default_factory=list)


def _name(owner: str, argument: str) -> str:
    return f"{owner}({argument}=...)"


def check_save_config(save_config_callback: Any, save_config_kwargs: Mapping[str, Any] | None, owner: str) -> SaveConfig:
    """`save_config_callback` and `save_config_kwargs`, as LightningCLI's SaveConfigCallback reads them."""
    from trainer.config.save_config import SaveConfigCallback

    custom = save_config_callback if inspect.isclass(save_config_callback) and issubclass(
        save_config_callback, SaveConfigCallback) else None
    if inspect.isclass(save_config_callback) and custom is None:
        raise ValueError(f"{_name(owner, 'save_config_callback')}: received the class {save_config_callback.__qualname__}. "
                         "This CLI writes the resolved config itself and calls no save-config callback class, so its "
                         "save_config() would never run. Expected True (write config.yaml), None or False (write none), "
                         "or a subclass of trainer.cli.SaveConfigCallback whose save_config(trainer, pl_module, stage) "
                         "this CLI calls.")
    if custom is None and save_config_callback not in (None, True, False):
        raise ValueError(f"{_name(owner, 'save_config_callback')}: expected True, None or False. "
                         f"Received: {save_config_callback!r}.")
    if not isinstance(save_config_kwargs or {}, Mapping):
        raise ValueError(f"{_name(owner, 'save_config_kwargs')}: expected a dict such as {{'overwrite': True}}. "
                         f"Received: {save_config_kwargs!r}.")
    kwargs = dict(save_config_kwargs or {})
    for key in kwargs:
        if key not in SAVE_CONFIG_KWARGS:
            raise ValueError(f"{_name(owner, 'save_config_kwargs')}: unknown key {key!r}.{suggest(key, SAVE_CONFIG_KWARGS)} "
                             f"Expected some of {', '.join(SAVE_CONFIG_KWARGS)}.")
    for key in ("overwrite", "multifile", "save_to_log_dir"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ValueError(f"{_name(owner, 'save_config_kwargs')}: {key!r} expects True or False. Received: {kwargs[key]!r}.")
    if kwargs.get("multifile"):
        raise ValueError(f"{_name(owner, 'save_config_kwargs')}: multifile=True is not taken: the saved config is the one "
                         "resolved file (every default filled in), not the files it came from. Expected multifile=False.")
    if kwargs.get("save_to_log_dir") is False and custom is None:
        raise ValueError(f"{_name(owner, 'save_config_kwargs')}: save_to_log_dir=False only means something with a "
                         "SaveConfigCallback subclass that saves the config elsewhere, which this CLI does not call. "
                         "Expected save_to_log_dir=True, or save_config_callback=None to write no config file.")
    filename = kwargs.get("config_filename", "config.yaml")
    if not isinstance(filename, str) or not filename.strip() or filename in (".", ".."):
        raise ValueError(f"{_name(owner, 'save_config_kwargs')}: 'config_filename' expects a file name such as "
                         f"'config.yaml'. Received: {filename!r}.")
    enabled = bool(save_config_callback) and kwargs.get("save_to_log_dir", True)
    return SaveConfig(enabled, filename, kwargs.get("overwrite"), custom, kwargs)


def check_parser_kwargs(parser_kwargs: Mapping[str, Any] | None, owner: str) -> dict[str, Any]:
    """`parser_kwargs`: `default_config_files` and `description`, also per subcommand."""
    if parser_kwargs is None:
        return {}
    if not isinstance(parser_kwargs, Mapping):
        raise ValueError(f"{_name(owner, 'parser_kwargs')}: expected a dict. Received: {parser_kwargs!r}.")
    for key, value in parser_kwargs.items():
        if key in SUBCOMMANDS and isinstance(value, Mapping):
            for inner in value:
                _check_parser_key(inner, owner, f"[{key!r}]")
        else:
            _check_parser_key(key, owner, "")
    return dict(parser_kwargs)


def _check_parser_key(key: str, owner: str, where: str) -> None:
    if key in PARSER_KWARGS:
        return
    why = _PARSER_HINTS.get(key, "it is an option of jsonargparse's parser, which this CLI does not use")
    raise ValueError(f"{_name(owner, 'parser_kwargs')}{where}: {key!r} is not taken: {why}.{suggest(key, PARSER_KWARGS)} "
                     f"Expected some of {', '.join(PARSER_KWARGS)} (at the top, or per subcommand: "
                     "{'fit': {'default_config_files': [...]}}).")


def check_unused(parser_class: Any, load_from_checkpoint_support: Any, owner: str) -> None:
    """LightningCLI's arguments that only configure jsonargparse: their defaults are accepted."""
    if parser_class is not None:
        raise ValueError(f"{_name(owner, 'parser_class')}: received {parser_class!r}. This CLI has no jsonargparse "
                         "parser to subclass: its command line is built from the config layer. Expected None; to add "
                         "arguments, read them in the script before or after the CLI.")
    if not isinstance(load_from_checkpoint_support, bool):
        raise ValueError(f"{_name(owner, 'load_from_checkpoint_support')}: expected True or False. "
                         f"Received: {load_from_checkpoint_support!r}.")


def split_trainer_defaults(trainer_defaults: Mapping[str, Any] | None, owner: str) -> TrainerDefaults:
    """Config values, objects and persistent callbacks of `trainer_defaults`, as LightningCLI takes them."""
    from trainer._args import TrainerArgs
    from trainer.callback import Callback

    split = TrainerDefaults()
    if trainer_defaults is None:
        return split
    if not isinstance(trainer_defaults, Mapping):
        raise ValueError(f"{_name(owner, 'trainer_defaults')}: expected a dict of Trainer arguments. "
                         f"Received: {trainer_defaults!r}.")
    for key, value in trainer_defaults.items():
        if key == "callbacks":
            items = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
            for index, item in enumerate(items):
                if not isinstance(item, Callback):
                    raise ValueError(
                        f"{_name(owner, 'trainer_defaults')}: callbacks[{index}] is {item!r}, not a Callback instance. "
                        "Expected callback objects (persistent callbacks, appended after the config's own, as "
                        "LightningCLI takes them); a callback the config may change goes in the config's "
                        "`trainer.callbacks` (or `callbacks:`) as {class_path: ..., init_args: ...}.")
            split.callbacks = list(items)
        elif _is_plain(value) or is_spec(value):
            split.values[key] = value
        elif key in TrainerArgs.model_fields:
            split.objects[key] = value
        else:
            raise ValueError(f"{_name(owner, 'trainer_defaults')}: {key!r} holds the object {value!r}, and {key!r} is "
                             f"not an argument of Trainer that takes one.{suggest(key, TrainerArgs.model_fields)} "
                             "Expected a Trainer argument (logger, precision, strategy, ...) or a plain value.")
    return split


def config_sets(config: Mapping[str, Any], overrides: Mapping[str, Any], key: str) -> bool:
    """Whether the files or the command line set the Trainer argument `key` (`logger` may also be
    a top-level section)."""
    section = config.get("trainer")
    if isinstance(section, Mapping) and key in section:
        return True
    if key in ("logger", "callbacks") and key in config:
        return True
    names = {key, f"trainer.{key}"}
    return any(str(name) in names or str(name).startswith(tuple(f"{n}." for n in names)) for name in overrides)
