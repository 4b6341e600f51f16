"""How a script's CLI reads its config layers and fills in its classes (the `CLI` of
`trainer/config/script.py` mixes this in): `trainer_defaults`, default and `--config` files in
LightningCLI's forms, the script's model and data classes (subclass mode included), and the
sections `auto_configure_optimizers=False` refuses."""

from __future__ import annotations

import copy
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from trainer.config.classpath import Problem, import_target
from trainer.config.cli import _deep_merge, _extend_import_path
from trainer.config.experiment import LOADER_OF
from trainer.config.optim import OPTIMIZER_SECTIONS
from trainer.config.schema import read_yaml
from trainer.config.script_parser import LightningArgumentParser
from trainer.lightning.arguments import saved_trainer_section

__all__ = ["ScriptSections", "SECTIONS"]

#: The sections a script's classes fill in.
SECTIONS = ("model", "data")
_SECTIONS = SECTIONS


class ScriptSections:
    """The config-reading half of the script CLI (its attributes are set by `CLI.__init__`)."""

    trainer_defaults: Any
    parser_kwargs: dict[str, Any]
    parser: LightningArgumentParser
    classes: dict[str, Any]
    subclass_mode: dict[str, bool]
    seed_default: Any
    _defaults: dict[str, Any]
    _own_loaders: str  # the class_path that stands for "the module's own loaders"

    def _read(self, stage: str, files: list[str]) -> dict[str, Any]:
        """`trainer_defaults`, then the default config files that exist, then `--config` files."""
        values = self.trainer_defaults.values
        config: dict[str, Any] = {"trainer": copy.deepcopy(values)} if values else {}
        _deep_merge(config, copy.deepcopy(self._defaults))  # parser.set_defaults(...), over trainer_defaults
        per_stage = self.parser_kwargs.get(stage)
        per_stage = per_stage if isinstance(per_stage, dict) else {}
        defaults = [*self.parser_kwargs.get("default_config_files", []), *per_stage.get("default_config_files", [])]
        self._files: dict[str, Any] = {}  # what the files themselves set (a link's target may not differ there)
        for path in [p for p in defaults if Path(p).is_file()] + list(files):
            _extend_import_path(Path(path))
            layer = self._lightning_sections(read_yaml(path))
            _deep_merge(self._files, copy.deepcopy(layer))
            _deep_merge(config, layer)
        if os.getcwd() not in sys.path:  # class_path may name a module beside the script's folder
            sys.path.append(os.getcwd())
        return config

    def _lightning_sections(self, layer: dict[str, Any]) -> dict[str, Any]:
        """LightningCLI's flat sections in one config layer as `init_args`, so that layers merge key by key:
        `model: {hidden: 64}`, and `optimizer: {lr: 0.1}` when add_optimizer_args fixed the class."""
        trainer = layer.get("trainer")
        if isinstance(trainer, dict):  # a config LightningCLI saved: every Trainer argument, null where not set
            layer["trainer"] = saved_trainer_section(trainer)
        fixed = [s for s, o in self.parser.optimizers.items() if o.fixed]
        for section in [*_SECTIONS, *fixed]:
            spec = layer.get(section)
            if isinstance(spec, dict) and spec and not {"class_path", "init_args"} & set(spec):
                layer[section] = {"init_args": spec}
        return layer

    def _complete(self, config: dict[str, Any], overrides: dict[str, Any], stage: str) -> tuple[dict[str, Any], dict[str, Any], list[Problem]]:
        """The script's classes filled in, LightningCLI's forms made ours, and the class checks."""
        problems: list[Problem] = []
        for section in _SECTIONS:
            value = overrides.pop(section, None)
            if isinstance(value, str):  # --model ClassName: the class of subclass mode
                overrides[f"{section}.class_path"] = value
            elif value is not None:
                overrides[section] = value
            spec = config.get(section)
            if isinstance(spec, str):
                spec = {"class_path": spec}
            elif isinstance(spec, dict) and not {"class_path", "init_args"} & set(spec):
                spec = {"init_args": spec}  # LightningCLI's `model: {hidden: 64}`
            if spec is not None:
                config[section] = spec
            self._class_path(config, overrides, section, problems)
        if "seed" not in config and "seed_everything" not in config and not {"seed", "seed_everything"} & set(overrides):
            if self.seed_default is not None:
                config["seed_everything"] = self.seed_default
        spec = config.get("model")
        model = self._target(overrides.get("model.class_path", spec.get("class_path") if isinstance(spec, dict) else None))
        if config.get("data") is None and any(k == "data" or k.startswith("data.") for k in overrides):
            config["data"] = {}  # `--data ClassName` (subclass mode) names it on the command line
        if config.get("data") is None:  # no data class: the module's own loaders
            config["data"] = {"class_path": self._own_loaders}
            method = LOADER_OF[stage]
            if inspect.isclass(model) and not hasattr(model, method):
                problems.append(Problem("model", f"{model.__qualname__} has no {method}(), which `{stage}` needs, and this "
                                        "script has no data class. Expected a data class (CLI(Model, DataModule) or a data: "
                                        f"section with a class_path) or a {method}() method on the module."))
        return config, overrides, problems

    def _class_path(self, config: dict[str, Any], overrides: dict[str, Any], section: str, problems: list[Problem]) -> None:
        """Fill in or check the class of `section`: the script's, or a subclass of it."""
        cls, key = self.classes[section], f"{section}.class_path"
        spec = config.get(section)
        for holder, name in ((overrides, key), (spec, "class_path")):
            if isinstance(holder, dict) and isinstance(holder.get(name), str) and cls is not None:
                holder[name] = self._qualified(cls, holder[name])
        given = overrides.get(key, spec.get("class_path") if isinstance(spec, dict) else None)
        if cls is None:
            return
        own = f"{cls.__module__}.{cls.__qualname__}"
        if not self.subclass_mode[section]:
            if given not in (None, own) and self._target(given) is not cls:
                problems.append(Problem(key, f"this script builds its {section} from {own}. Received: {given!r}. Expected "
                                        f"no class_path, or CLI(..., subclass_mode_{section}=True) in the script to choose "
                                        "the class in the config."))
            config[section] = {**(spec if isinstance(spec, dict) else {}), "class_path": own}
            overrides.pop(key, None)
        elif given is None:
            problems.append(Problem(key, f"required: this script takes any subclass of {cls.__qualname__} (subclass mode). "
                                    f"Expected `{section}: {{class_path: ..., init_args: {{...}}}}` or --{section} ClassName."))
        else:
            target = self._target(given)
            if inspect.isclass(target) and not issubclass(target, cls):
                problems.append(Problem(key, f"Expected a subclass of {cls.__qualname__}. Received: {given!r}."))

    def _no_optimizer_sections(self, config: dict[str, Any], overrides: dict[str, Any]) -> list[Problem]:
        """With auto_configure_optimizers=False the module's configure_optimizers decides: an
        `optimizer:` or `lr_scheduler:` section would be ignored, so it is refused."""
        given = [s for s in OPTIMIZER_SECTIONS if config.get(s) is not None]
        given += [k for k in overrides if k.split(".")[0] in OPTIMIZER_SECTIONS and k.split(".")[0] not in given]
        return [Problem(name, f"not taken: this script's {type(self).__name__} has auto_configure_optimizers=False, so "
                        "the module's configure_optimizers decides. Expected no such section (or "
                        "auto_configure_optimizers=True in the script).") for name in given]

    @staticmethod
    def _qualified(base: type, name: str) -> str:
        """A bare class name (`--model Wide`) as the dotted path of the imported subclass of that name."""
        if "." in name:
            return name
        seen: dict[str, type] = {}
        stack = [base]
        while stack:
            current = stack.pop()
            seen.setdefault(current.__name__, current)
            stack.extend(current.__subclasses__())
        found = seen.get(name)
        return f"{found.__module__}.{found.__qualname__}" if found is not None else name

    @staticmethod
    def _target(class_path: Any) -> Any:
        target, _ = import_target(class_path, "") if isinstance(class_path, str) else (None, [])
        return target
