"""A script's own command line, as LightningCLI makes one: `CLI(MyModel, MyDataModule)`.

    # train.py
    from trainer.cli import LightningCLI          # or: from trainer.config import CLI
    if __name__ == "__main__":
        LightningCLI(MyModel, MyDataModule)

    python train.py fit --config exp.yaml --model.hidden 64 --trainer.max_epochs 3
    python train.py fit --config exp.yaml --print_config
    python train.py validate|test|predict --config exp.yaml --ckpt_path PATH

It is the YAML layer with the script's classes filled in: the files, then the dotted
overrides, are checked whole by `trainer.config` before anything is built, so mistakes come
as one message listing each with its path and a suggestion (exit code 2). The run then goes
through the Trainer as Lightning's does: `trainer.fit(model, datamodule=data, ckpt_path=...)`.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from trainer.config.classpath import ConfigError, Problem, ResolvedSpec
from trainer.config.cli import (
    COMMANDS,
    OVERRIDES_HELP,
    _deep_merge,
    _print_help,
    _setup_logging,
    add_trainer_options,
    class_arguments,
    split_overrides,
)
from trainer.config.experiment import Experiment, ResolvedConfig, Stage, build
from trainer.config.optim import OPTIMIZER_SECTIONS, add_optimizer_options
from trainer.config.optim import configure_optimizers as _configure_optimizers
from trainer.config.schema import SECTIONS, apply_overrides, prepare_config
from trainer.config.script_links import (
    ConfigView,
    as_class_spec,
    check_class_sections,
    check_overridden,
    class_sections,
    defaults_layer,
    lightning_alias,
    linked_model,
    optimizer_class_problems,
    own_options,
    parse_link_values,
    set_path,
    without,
)
from trainer.config.script_parser import LightningArgumentParser, argparse_options, normal_path
from trainer.config.script_sections import SECTIONS as SCRIPT_SECTIONS, ScriptSections
from trainer.config.script_args import check_parser_kwargs, check_save_config, check_unused, config_sets, split_trainer_defaults
from trainer.config.yaml_io import dump_yaml

__all__ = ["CLI", "LightningCLI", "LightningArgumentParser"]

_SECTIONS = SCRIPT_SECTIONS


class _OwnLoaders:
    """Stands in for the data section of a script without a data class: the module's own
    `*_dataloader()` methods are used (the Trainer calls them after its `setup` hook)."""

    def train_dataloader(self) -> None: ...
    def val_dataloader(self) -> None: ...
    def test_dataloader(self) -> None: ...
    def predict_dataloader(self) -> None: ...


_OWN_LOADERS = f"{__name__}._OwnLoaders"


class CLI(ScriptSections):
    """LightningCLI's interface, on this package's config layer.

    Args:
        model_class: the Module to build from the `model:` section (`--model.NAME VALUE`).
            None: any `trainer.Module` named by `class_path` (subclass mode).
        datamodule_class: the data class (`data:`, `--data.NAME`). None: a `data:` section
            with a `class_path` if the config has one, else the module's own loaders.
        subclass_mode_model / subclass_mode_data: the config names the class
            (`class_path: pkg.Cls` or `--model Cls`), which must subclass the one given.
        save_config_callback: True: the resolved config is written into the run's folder; None
            (or False): it is not.
        save_config_kwargs: `config_filename` (default `config.yaml`), `overwrite` (True: write over
            an existing file; False: an existing file is an error, as LightningCLI's default; not
            given: a resumed run rewrites its own file), `multifile=False`, `save_to_log_dir=True`.
        trainer_defaults: `trainer:` values the files and the command line override; objects (a
            logger instance, ...) used where the config sets no value; `callbacks`: callback
            instances always present, appended after the config's (LightningCLI's persistent callbacks).
        seed_everything_default: the seed when the config has none (True: a random one,
            recorded in the resolved config; False or None: no seeding), as LightningCLI.
        parser_kwargs: `default_config_files` (read first, when they exist), `description`;
            per subcommand too (`{"fit": {"default_config_files": [...]}}`). Other jsonargparse
            options are refused with a ValueError.
        parser_class: None only (there is no jsonargparse parser to replace).
        args: the command line (default `sys.argv[1:]`), or a dict: the config itself
            (with `run=True`, `{"fit": {...}}`: the subcommand and its config).
        run: run the subcommand; False: build the objects only (no subcommand on the
            command line) for the script to call `cli.trainer.fit(cli.model, datamodule=cli.datamodule)`.
        auto_configure_optimizers: the `optimizer:` / `lr_scheduler:` sections (`--optimizer Adam`),
            whose objects the module's `configure_optimizers` then returns (through this class's
            `configure_optimizers`, which a subclass may override). False: no such sections.
        load_from_checkpoint_support: accepted for LightningCLI's sake; the checkpoints always hold
            the resolved config (`"experiment"`) that rebuilds the run's classes.

    Attributes: `model`, `datamodule` (None with the module's own loaders), `trainer`,
    `config` (the resolved config, plain data), `subcommand`, `experiment`.
    """

    _own_loaders = _OWN_LOADERS  # the data class_path of a script without a data class

    #: LightningCLI's static method: what the module's `configure_optimizers` returns when the
    #: config has an `optimizer:` (`configure_optimizers(module, optimizer, lr_scheduler=None)`).
    configure_optimizers = staticmethod(_configure_optimizers)

    def __init__(
        self,
        model_class: type | None = None,
        datamodule_class: type | None = None,
        save_config_callback: Any = True,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type | None = None,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int | None = True,
        parser_kwargs: dict[str, Any] | None = None,
        parser_class: Any = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: Sequence[str] | dict[str, Any] | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        from trainer.module import Module
        from trainer.trainer import Trainer

        owner = "LightningCLI" if type(self) is CLI else type(self).__name__
        if trainer_class not in (None, Trainer):
            raise ValueError(f"{owner}(trainer_class={trainer_class!r}): only trainer.Trainer is built here. Expected None.")
        check_unused(parser_class, load_from_checkpoint_support, owner)
        self.save_config = check_save_config(save_config_callback, save_config_kwargs, owner)
        self.trainer_defaults = split_trainer_defaults(trainer_defaults, owner)
        self.parser_kwargs = check_parser_kwargs(parser_kwargs, owner)
        self.classes = {"model": model_class or Module, "data": datamodule_class}
        self.subclass_mode = {"model": subclass_mode_model or model_class is None, "data": subclass_mode_data}
        self.seed_default = seed_everything_default
        self.auto_configure_optimizers = auto_configure_optimizers
        self.subcommand: str | None = None
        self.model: Any = None
        self.datamodule: Any = None
        self.trainer: Any = None
        self.config: dict[str, Any] = {}
        self.experiment: Experiment | None = None
        check_overridden(type(self), CLI, owner)
        if type(self).configure_optimizers is not CLI.configure_optimizers and not isinstance(
                inspect.getattr_static(type(self), "configure_optimizers"), staticmethod):
            raise ValueError(f"{owner}.configure_optimizers must be a @staticmethod "
                             "configure_optimizers(lightning_module, optimizer, lr_scheduler=None), as in LightningCLI.")
        #: What `add_arguments_to_parser(parser)` asked for (links, defaults, options, callbacks).
        self.parser = LightningArgumentParser("LightningCLI" if type(self) is CLI else type(self).__name__)
        self.add_arguments_to_parser(self.parser)
        self._defaults, objects = defaults_layer(self.parser, owner)
        self.trainer_defaults.objects.update(objects)
        for section, optimizer in self.parser.optimizers.items():
            if not auto_configure_optimizers:
                raise ValueError(f"{owner}.add_arguments_to_parser: parser.add_{'optimizer' if section == 'optimizer' else 'lr_scheduler'}"
                                 "_args with auto_configure_optimizers=False: nothing would build it. Expected "
                                 "auto_configure_optimizers=True, or no such call.")
            if optimizer.fixed and section not in self._defaults:
                self._defaults[section] = {"class_path": f"{optimizer.classes[0].__module__}.{optimizer.classes[0].__qualname__}"}
        self._callback_specs: dict[str, ResolvedSpec] = {}
        self._link_targets: list[str] = []
        _setup_logging()
        try:
            self._main(sys.argv[1:] if args is None else args, run)
        except ConfigError as error:
            sys.stderr.write(f"{self._prog()}: error: {error}\n")
            raise SystemExit(2) from None

    # ---------------------------------------------------------------- the command line
    def _prog(self) -> str:
        return Path(sys.argv[0]).name or "script"

    def _parser(self, run: bool) -> argparse.ArgumentParser:
        description = self.parser_kwargs.get("description") or f"The command line of {self._describe()}."
        root = argparse.ArgumentParser(prog=self._prog(), description=description, allow_abbrev=False,
                                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=OVERRIDES_HELP)
        parsers = [root]
        if run:
            commands = root.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
            for name, text in COMMANDS.items():
                parsers.append(commands.add_parser(name, help=text, description=f"{self._prog()} {name}: {text}.",
                                                   epilog=OVERRIDES_HELP, allow_abbrev=False,
                                                   formatter_class=argparse.RawDescriptionHelpFormatter))
        for parser in parsers[1:] if run else parsers:
            parser.add_argument("-c", "--config", action="append", default=[], metavar="FILE",
                                help="a YAML config; several are merged in order, then the overrides apply")
            parser.add_argument("--print_config", action="store_true", help="print the resolved config and exit")
            if run:
                parser.add_argument("--ckpt_path", metavar="PATH", help="checkpoint to resume from / evaluate ('last', 'best' or a path)")
            parser.add_argument("--seed_everything", metavar="INT|true|false", help="the seed (true: a random one, recorded)")
            for section in _SECTIONS:
                self._section_help(parser, section)
            add_trainer_options(parser)
            if self.auto_configure_optimizers:
                add_optimizer_options(parser)
            argparse_options(parser, self.parser.arguments)
            for args in self.parser.class_args:
                parser.add_argument_group(f"{args.key}: {args.base.__qualname__} (--{args.key}.NAME VALUE), added to the "
                                          "Trainer's callbacks")
        return root

    def _describe(self) -> str:
        names = [c.__qualname__ for c in self.classes.values() if c is not None]
        return " and ".join(names)

    def _section_help(self, parser: argparse.ArgumentParser, section: str) -> None:
        cls = self.classes[section]
        if cls is None:
            return
        if self.subclass_mode[section]:
            group = parser.add_argument_group(f"{section}: a subclass of {cls.__qualname__}")
            group.add_argument(f"--{section}", metavar="CLASS", help=f"its class: a dotted path or the name of an imported "
                               f"subclass; then --{section}.NAME VALUE; --{section}.help lists its arguments")
            return
        group = parser.add_argument_group(f"{section}: {cls.__qualname__} (--{section}.NAME VALUE, or --{section}.init_args.NAME)")
        for name, text in class_arguments(cls):
            group.add_argument(f"--{section}.{name}", metavar="VALUE", help=text.lstrip(": "))

    # --------------------------------------------------------------------- the config
    def _main(self, args: Sequence[str] | dict[str, Any], run: bool) -> None:
        overrides: dict[str, Any] = {}
        config: dict[str, Any] = {}
        given: dict[str, Any] = {}
        if isinstance(args, dict):  # the config itself; with run=True, {"fit": {...}}
            name = next(iter(args), "fit") if run else "fit"
            if name not in COMMANDS:
                raise ConfigError([Problem("args", f"Expected one subcommand key ({', '.join(COMMANDS)}). Received: {name!r}.")])
            config = dict(args.get(name) or {}) if run else dict(args)
            options = argparse.Namespace(subcommand=name, config=[], print_config=False, ckpt_path=config.pop("ckpt_path", None))
        else:
            keep = {n for names, _ in self.parser.arguments for n in names if n.startswith("--")}
            rest, overrides, problems = split_overrides(args, [*SECTIONS, *(c.key for c in self.parser.class_args)], keep)
            options = self._parser(run).parse_args(rest)
            given = {k: getattr(options, k) for k in self.parser.argument_keys if hasattr(options, k)}
            if problems:
                raise ConfigError(problems, "the command line")
        stage = cast(Stage, getattr(options, "subcommand", None) or "fit")
        self.subcommand = stage if run else None
        base = self._read(stage, options.config)
        _deep_merge(base, self._lightning_sections(config))
        _deep_merge(self._files, copy.deepcopy(config))
        for key, value in given.items():
            set_path(self._files, key, value)
        problems = []
        file_ckpt, weights_only = base.pop("ckpt_path", None), base.pop("weights_only", None)
        if weights_only:  # LightningCLI's subcommand argument, saved in its config files
            problems.append(Problem("weights_only", "not taken: a checkpoint here is always read with "
                                    f"torch.load(weights_only=True). Received: {weights_only!r}. Expected null or false."))
        objects = {k: v for k, v in self.trainer_defaults.objects.items() if not config_sets(base, overrides, k)}
        helps = [s for s in _SECTIONS if overrides.pop(f"{s}.help", None)]
        own, found = own_options(self.parser, base, given)
        problems += found
        for name in [n for n in overrides if n.split(".")[0] in {a.key for a in self.parser.class_args}]:
            set_path(self._files, name.replace(".init_args.", ".", 1), overrides[name])  # given, for the links' checks
        sections, found = class_sections(self.parser, base, overrides)
        problems += found
        config, overrides, found = self._complete(base, dict(overrides), stage)
        problems += found
        if helps:
            _print_help(config, overrides, helps)
            raise SystemExit(0)
        ckpt_path = getattr(options, "ckpt_path", None) or file_ckpt  # the command line's, else the config's
        if ckpt_path not in (None, "last", "best") and not Path(ckpt_path).exists():
            problems.append(Problem("--ckpt_path", f"{ckpt_path!r} does not exist. Expected a checkpoint file written by "
                                    "the trainer (or by Lightning), 'last' or 'best'."))
        if not self.auto_configure_optimizers:
            problems += self._no_optimizer_sections(config, overrides)
        resolved, self._callback_specs, plain = self._resolve(config, overrides, stage, own, sections, problems)
        self.config = ConfigView.of(plain, self.subcommand)
        self._objects, self._resolved = objects, resolved
        self._link_targets = [lightning_alias(plain, normal_path(link.target)) for link in self.parser.links]
        if options.print_config:
            sys.stdout.write(dump_yaml(without(plain, self._link_targets)))
            raise SystemExit(0)
        snapshot = copy.deepcopy(plain)
        self.before_instantiate_classes()
        if ConfigView.plain(self.config) != snapshot:  # the hook changed the config: check it again
            changed = self._lightning_sections(ConfigView.plain(self.config))
            if self._resolved.data.class_path == _OWN_LOADERS:
                changed.setdefault("data", {"class_path": _OWN_LOADERS})
            own = {k: changed.pop(k) for k in list(own) if k in changed}
            sections = {k: as_class_spec(self.parser, k, changed.pop(k)) for k in list(sections) if k in changed}
            resolved, self._callback_specs, plain = self._resolve(changed, {}, stage, own, sections, [], parse_links=False)
            self.config = ConfigView.of(plain, self.subcommand)
            self._resolved = resolved
        self.instantiate_classes()
        self.after_instantiate_classes()
        if not run:
            self._save_config_at_start(fit=True)
            return
        self._run_stage(stage, ckpt_path)

    def _resolve(self, config: dict[str, Any], overrides: dict[str, Any], stage: Stage, own: dict[str, Any],
                 sections: dict[str, dict[str, Any]], problems: list[Problem], parse_links: bool = True,
                 ) -> tuple[ResolvedConfig, dict[str, ResolvedSpec], dict[str, Any]]:
        """Check the config whole (with the parser's links applied): the resolved config, the
        class-args callbacks' specs, and the plain config LightningCLI's `cli.config` holds."""
        links = self.parser.links
        deferred = [normal_path(link.target) for link in links if parse_links or link.apply_on == "instantiate"]
        specs, class_plain, found = check_class_sections(self.parser, sections)
        self._explicit = copy.deepcopy(self._files)  # what the files and the command line set, defaults aside
        apply_overrides(self._explicit, overrides)
        try:
            resolved = prepare_config(config, overrides, stage=stage, deferred=deferred)
        except ConfigError as error:
            raise ConfigError(problems + found + error.problems, error.source) from None
        problems = problems + found
        if parse_links and any(link.apply_on == "parse" for link in links) and not problems:
            merged = copy.deepcopy(config)
            apply_overrides(merged, overrides)
            extras = {**own, **sections}
            problems += parse_link_values(links, {**resolved.plain, **own, **class_plain}, merged, extras, self._explicit)
            specs, class_plain, found = check_class_sections(self.parser, {k: extras[k] for k in sections})
            problems += found
            own = {k: extras[k] for k in own}
            if not problems:
                try:
                    resolved = prepare_config(merged, stage=stage, deferred=[normal_path(x.target) for x in links
                                                                              if x.apply_on == "instantiate"])
                except ConfigError as error:
                    raise ConfigError([Problem(p.path, p.message + self._linked(p.path)) for p in error.problems],
                                      error.source) from None
        problems += optimizer_class_problems(self.parser, resolved)
        if problems:
            raise ConfigError(problems, None)
        if resolved.data.class_path == _OWN_LOADERS:
            resolved.plain.pop("data")
        if not self.auto_configure_optimizers:
            for section in OPTIMIZER_SECTIONS:
                resolved.plain.pop(section, None)
        for key in self._objects_of(config, overrides):  # an object default is no config value: the script gives it again
            holder: dict[str, Any] = resolved.plain if key == "logger" else resolved.plain["trainer"]
            holder.pop(key, None)
        plain = copy.deepcopy(resolved.plain)
        for section, args in self.parser.optimizers.items():  # one fixed class: its arguments only, as LightningCLI
            if args.fixed and isinstance(plain.get(section), dict):
                plain[section] = plain[section]["init_args"]
        return resolved, specs, {**plain, **own, **class_plain}

    def _objects_of(self, config: dict[str, Any], overrides: dict[str, Any]) -> list[str]:
        return [k for k in self.trainer_defaults.objects if not config_sets(config, overrides, k)]

    def _linked(self, path: str) -> str:
        links = [link for link in self.parser.links if normal_path(link.target) == path or path.startswith(normal_path(link.target) + ".")]
        return f" (the value {links[0].describe()} gave)" if links else ""

    # ------------------------------------------------------------------ LightningCLI's hooks
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to link arguments, set defaults, add options or callbacks (trainer/config/script_parser.py)."""

    def before_instantiate_classes(self) -> None:
        """Override to run code before the objects are built; a change to `self.config` is checked again."""

    def after_instantiate_classes(self) -> None:
        """Override to run code after `model`, `datamodule` and `trainer` are built."""

    def instantiate_classes(self) -> None:
        """Build the data, the model (its links applied on instantiation), the callbacks and the Trainer."""
        resolved = self._resolved
        links = [link for link in self.parser.links if link.apply_on == "instantiate"]
        self.experiment = experiment = build(
            resolved, stage=cast(Stage, self.subcommand or "fit"), configure_optimizers=self.configure_optimizers,
            owner=f"{'LightningCLI' if type(self) is CLI else type(self).__name__}.configure_optimizers",
            trainer_objects=self._objects, extra_callbacks=[*self._callback_specs.values(), *self.trainer_defaults.callbacks,
                                                            *self._save_config_callback(resolved)],
            model_spec=(lambda data: linked_model(data, links, resolved.plain["model"], self._explicit, self._linked))
            if links else None,
        )
        experiment.config = without(ConfigView.plain(self.config), self._link_targets)
        experiment.config_filename, experiment.config_overwrite = self.save_config.filename, self.save_config.overwrite
        self.model, self.trainer = experiment.model, experiment.trainer
        self.datamodule = None if resolved.data.class_path == _OWN_LOADERS else experiment.data

    def _save_config_callback(self, resolved: ResolvedConfig) -> list[Any]:
        """The script's SaveConfigCallback subclass, last among the callbacks (not with fast_dev_run), as LightningCLI."""
        custom = self.save_config.callback
        if custom is None or resolved.trainer.get("fast_dev_run"):
            return []
        return [custom(self.parser, self.config, **self.save_config.kwargs)]

    # ------------------------------------------------------------------------ the run
    def _save_config_at_start(self, fit: bool) -> None:
        if self.save_config.enabled and self.experiment is not None:
            experiment = self.experiment
            experiment.check_config_file()
            self.trainer._run.at_run_start.append(lambda: experiment._save_config(writes_checkpoints=fit))

    def _run_stage(self, stage: Stage, ckpt_path: str | None) -> None:
        """The subcommand, as LightningCLI runs it: `before_fit()`, then the subclass's own `fit(**kwargs)` if it
        has one, else `trainer.fit(model, datamodule=data, ckpt_path=...)`, then `after_fit()` (also for the
        other subcommands)."""
        data = {"datamodule": self.datamodule} if self.datamodule is not None else {}
        self._save_config_at_start(fit=stage == "fit")
        try:
            before = getattr(self, f"before_{stage}", None)
            if callable(before):
                before()
            method = getattr(self, stage, None)
            run = method if callable(method) else getattr(self.trainer, stage)
            run(model=self.model, ckpt_path=ckpt_path, **data)
            after = getattr(self, f"after_{stage}", None)
            if callable(after):
                after()
        finally:
            self.trainer._run.at_run_start.clear()


#: LightningCLI's name (`from trainer.cli import LightningCLI`).
LightningCLI = CLI
