"""Building a checked config: the objects it describes, and running them (`Experiment`).

`trainer.config` checks a file and hands over a `ResolvedConfig`; `build` seeds, builds the
data, the model, the callbacks, the logger and the `Trainer` in that order, and returns an
`Experiment` whose `fit`/`validate`/`test`/`predict` call the Trainer with the data's loaders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainer._utils import first_line
from trainer.config.classpath import ConfigError, Problem, ResolvedSpec, instantiate
from trainer.config.yaml_io import dump_yaml
from trainer.loops.loaders import loaders_in

if TYPE_CHECKING:
    from trainer.loops.context import RunContext
    from trainer.trainer import Trainer

__all__ = ["Stage", "LOADER_OF", "DRY_RUN", "ResolvedConfig", "Experiment", "build"]

log = logging.getLogger("trainer")

Stage = Literal["fit", "validate", "test", "predict"]
LOADER_OF: dict[str, str] = {
    "fit": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"
}
#: The overrides of a dry run: 2 optimizer steps, no logger, no checkpoints.
DRY_RUN = {"logger": False, "trainer.enable_checkpointing": False, "trainer.max_steps": 2, "trainer.max_epochs": None}


@dataclasses.dataclass
class ResolvedConfig:
    """A checked config: the specs to build and the fully resolved plain form."""

    seed: int | None
    model: ResolvedSpec
    data: ResolvedSpec
    trainer: dict[str, Any]
    precision: str | ResolvedSpec
    callbacks: list[ResolvedSpec]
    logger: bool | ResolvedSpec | list[ResolvedSpec]
    plain: dict[str, Any]
    optimizer: ResolvedSpec | None = None  # LightningCLI's automatic optimizer (trainer/config/optim.py)
    lr_scheduler: ResolvedSpec | None = None


class Experiment:
    """The objects a config describes, ready to run.

    Attributes:
        config: the fully resolved config as plain data (what `--print_config` shows).
        model: the `Module`; data: the data object; trainer: the `Trainer`.
        dry_run: the run takes 2 steps (2 batches to evaluate) and writes nothing: the
            Trainer's `root_dir` is a temporary folder, removed after each run, so even a
            callback that writes under `trainer.log_dir` leaves no file behind.
    """

    #: The file the resolved config is written to, in the run's folder.
    config_filename = "config.yaml"
    #: None: the run's own file is rewritten (a resumed run); False: an existing file is an error.
    config_overwrite: bool | None = None

    def __init__(self, config: dict[str, Any], model: Any, data: Any, trainer: Trainer, *, dry_run: bool = False) -> None:
        self.config, self.model, self.data, self.trainer, self.dry_run = config, model, data, trainer, dry_run

    def loader(self, method: str, stage: str, required: bool = True) -> Any:
        """Call the data object's `method` (`train_dataloader`, ...); a dry run keeps 2 batches."""
        make = getattr(self.data, method, None)
        if make is None:
            if not required:
                return None
            raise ConfigError([Problem("data", f"{type(self.data).__name__} has no {method}(), which `{stage}` needs.")])
        loader = make()
        if self.dry_run and loader is not None and method != "train_dataloader":
            several = loaders_in(loader)  # a list or dict of loaders: 2 batches of each
            if isinstance(loader, Mapping) and several is not None:
                return {key: _FirstBatches(one) for key, one in loader.items()}
            if several is not None:
                return [_FirstBatches(one) for one in several]
            return list(itertools.islice(loader, 2))
        return loader

    @property
    def _run(self) -> RunContext:
        """The Trainer's run: what it does once it starts (`at_run_start`), its folder (`output`)."""
        return self.trainer._run

    def fit(self, ckpt_path: str | Path | None = None) -> None:
        """`trainer.fit` with the data's train (and val, if any) loaders; saves config.yaml first."""
        train = self.loader("train_dataloader", "fit")
        val = self.loader("val_dataloader", "fit", required=False)
        with self._scratch():
            if not self.dry_run:
                # Written when the run starts (after the checkpoint was read and checked), so a
                # run that fails before training leaves no folder behind.
                at_run_start = self._run.at_run_start
                at_run_start.append(lambda: self._save_config(writes_checkpoints=True))
                try:
                    self.trainer.fit(self.model, train, val, ckpt_path=ckpt_path)
                finally:
                    at_run_start.clear()  # a run that failed before starting leaves none queued
                return
            self.trainer.fit(self.model, train, ckpt_path=self._dry_run_ckpt(ckpt_path))
            if val is not None:  # 2 steps may end before the epoch's validation: run it here
                self.trainer.validate(self.model, val, verbose=False)

    def validate(self, ckpt_path: str | Path | None = None) -> dict[str, float]:
        """`trainer.validate` on the data's `val_dataloader()`; returns the metrics."""
        return self._evaluate("validate", ckpt_path)  # type: ignore[no-any-return]

    def test(self, ckpt_path: str | Path | None = None) -> dict[str, float]:
        """`trainer.test` on the data's `test_dataloader()`; returns the metrics."""
        return self._evaluate("test", ckpt_path)  # type: ignore[no-any-return]

    def predict(self, ckpt_path: str | Path | None = None) -> list[Any]:
        """`trainer.predict` on the data's `predict_dataloader()`; returns this rank's outputs."""
        return self._evaluate("predict", ckpt_path)  # type: ignore[no-any-return]

    def _evaluate(self, stage: Stage, ckpt_path: str | Path | None) -> Any:
        loader = self.loader(LOADER_OF[stage], stage)
        at_run_start = self._run.at_run_start
        with self._scratch():
            if not self.dry_run:
                at_run_start.append(self._save_config)
            try:
                quiet = {} if stage == "predict" else {"verbose": False}  # the command prints its own JSON line
                return getattr(self.trainer, stage)(self.model, loader, ckpt_path=self._dry_run_ckpt(ckpt_path, evaluating=True),
                                                 **quiet)
            finally:
                at_run_start.clear()

    @contextlib.contextmanager
    def _scratch(self) -> Iterator[None]:
        """A dry run's temporary root_dir is removed when the run ends (also after an error)."""
        try:
            yield
        finally:
            if self.dry_run:
                shutil.rmtree(self.trainer.args.root_dir, ignore_errors=True)

    def _dry_run_ckpt(self, ckpt_path: str | Path | None, evaluating: bool = False) -> str | Path | None:
        """`last` means the run's newest checkpoint under the config's root_dir, not the scratch
        folder (none yet: the dry run starts fresh, as the real one would); the same run of this
        experiment the real command would pick."""
        from trainer.checkpoint.latest import facts_of_run, find_last_of_run
        from trainer.logging.runs import DEFAULT_NAME, planned_run_dir

        if not self.dry_run or str(ckpt_path) != "last":
            return ckpt_path
        from trainer.checkpoint.bucket_runs import checkpoint_folder, log_root
        from trainer.checkpoint.storage import location

        root = self.config["trainer"]["root_dir"]
        options = self.config["trainer"].get("storage_options")
        local = planned_run_dir(log_root(root), DEFAULT_NAME, self.config["trainer"].get("run_name"))
        planned = checkpoint_folder(local, root, options) if local is not None else None  # in the bucket for a URL
        state, _ = find_last_of_run(location(str(root), options), planned,
                                    facts_of_run(self.trainer, self.model, evaluating), evaluating)
        if state is None:
            log.info("ckpt_path='last': no checkpoint under root_dir %r yet, so the run starts from the beginning.", root)
            return None
        return str(state["_path"])

    def check_config_file(self) -> None:
        """With `config_overwrite=False`: refuse, before the run starts, a run whose folder is known
        now (a named run, a logger with a version) and already holds the config file."""
        if self.config_overwrite is not False or self.dry_run:
            return
        planned = self._run.output.planned_dir()
        if planned is not None and (Path(planned) / self.config_filename).exists():
            raise _exists(Path(planned) / self.config_filename)

    def _save_config(self, writes_checkpoints: bool = False) -> None:
        """Write config.yaml into the run's folder, only if the run writes anything at all."""
        args, strategy = self.trainer.args, self.trainer.strategy
        writes = args.logger is not False or (writes_checkpoints and args.enable_checkpointing)
        if not writes:
            return
        path = Path(self.trainer.log_dir) / self.config_filename if strategy.is_global_zero else None
        if not writes_checkpoints and strategy.broadcast_object(path is not None and path.exists()):
            # validate/test/predict in a fit's folder (ckpt_path='last'): that run's config stays as it was
            log.info("%s is the config of the run that wrote that folder; this evaluation leaves it as it is.", path)
            return
        if self.config_overwrite is False and strategy.broadcast_object(path is not None and path.exists()):
            raise _exists(path or Path(self.config_filename))
        if path is not None:
            path.write_text(dump_yaml(self.config), encoding="utf-8")
            log.info("Config saved to %s", path)



class _FirstBatches:
    """A dry run's loader: the first 2 batches of one of several evaluation loaders."""

    def __init__(self, loader: Any) -> None:
        self.batches = list(itertools.islice(loader, 2))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _exists(path: Path) -> ConfigError:
    return ConfigError([Problem("save_config_kwargs", (
        f"{path} exists already: expected it NOT to exist (overwrite=False), so that the results of a previous run "
        "are not overwritten. Delete that file, give the run another folder, or pass "
        "save_config_kwargs={'overwrite': True} (or save_config_callback=None) to the CLI."))])


def _construct(where: str, spec: ResolvedSpec) -> Any:
    """Build one object of the config; an exception from its constructor becomes one clean
    error naming the YAML path, the class and what it raised (exit 2 from the CLI)."""
    try:
        return instantiate(spec)
    except Exception as error:  # noqa: BLE001 - the user's __init__ rejected its init_args
        detail = first_line(error, empty="(no message)")
        raise ConfigError([Problem(
            f"{where}.init_args",
            f"{spec.class_path}(**init_args) raised {type(error).__name__}: {detail}. Fix the value it names in the "
            "config (or the class).",
        )]) from error


def _check_activation_checkpointing(model: Any, setting: Any) -> None:
    """`activation_checkpointing: [Block]` names classes among the model's submodules: checked
    here, with the config, unless the model makes its layers later (`setup`/`configure_model`)."""
    from trainer.core.activation_checkpointing import chosen_modules
    from trainer.module import Module

    if not isinstance(setting, (list, tuple)):
        return
    if any(getattr(type(model), hook) is not getattr(Module, hook) for hook in ("setup", "configure_model")):
        return  # its layers may not exist yet: the Trainer checks when fit prepares the model
    try:
        chosen_modules(model, setting)
    except ValueError as error:
        raise ConfigError([Problem("trainer.activation_checkpointing", str(error))]) from None


def build(
    resolved: ResolvedConfig, *, stage: Stage = "fit", dry_run: bool = False,
    configure_optimizers: Callable[..., Any] | None = None, owner: str = "the config's optimizer: section",
    trainer_objects: Mapping[str, Any] | None = None, extra_callbacks: Sequence[Any] = (),
    model_spec: Callable[[Any], ResolvedSpec] | None = None,
) -> Experiment:
    """Seed, then build the data, the model (with the config's optimizer, if any), the callbacks,
    the logger and the Trainer.

    `configure_optimizers(module, optimizer, lr_scheduler)` (LightningCLI's static method, by
    default) is what the module's `configure_optimizers` returns when the config has an
    `optimizer:`; `owner` names it in the warning given when the module defines its own.
    `trainer_objects` (a logger, a precision, ... instance) replace the config's value of that
    Trainer argument; `extra_callbacks` are appended after the config's (LightningCLI's
    `trainer_defaults`); a `ResolvedSpec` among them is built there (LightningCLI's
    `add_lightning_class_args` callbacks). `model_spec(data)`, called with the built data
    object, gives the model's spec instead of the config's (LightningCLI's links applied on
    instantiation).

    A bad value, the Trainer's own argument checks, and an exception raised by a class's
    constructor become a `ConfigError` naming the YAML path (the CLI prints it and exits
    with 2); an exception raised later by the user's code while it runs keeps its traceback.
    """
    from trainer._utils import seed_everything
    from trainer.config.optim import attach_optimizers
    from trainer.config.optim import configure_optimizers as default_configure
    from trainer.module import Module
    from trainer.trainer import Trainer

    if resolved.seed is not None:
        seed_everything(resolved.seed)
    data = _construct("data", resolved.data)
    if not hasattr(data, LOADER_OF[stage]):
        raise ConfigError([Problem("data", f"{resolved.data.class_path}(...) returned {type(data).__name__}, which has "
                                   f"no {LOADER_OF[stage]}(). Expected an object with train_dataloader() and optionally "
                                   "val_dataloader(), test_dataloader(), predict_dataloader().")])
    if model_spec is not None:
        resolved.model = model_spec(data)
        resolved.plain["model"] = resolved.model.as_plain()
    model = _construct("model", resolved.model)
    if not isinstance(model, Module):
        raise ConfigError([Problem("model", f"Expected {resolved.model.class_path}(...) to return a trainer.Module. "
                                   f"Received: {type(model).__name__}.")])
    attach_optimizers(model, resolved.optimizer, resolved.lr_scheduler, configure=configure_optimizers or default_configure,
                      owner=owner)
    callbacks = [_construct(f"callbacks.{i}", c) for i, c in enumerate(resolved.callbacks)]
    callbacks += [_construct(c.class_path, c) if isinstance(c, ResolvedSpec) else c for c in extra_callbacks]
    objects = dict(trainer_objects or {})
    precision: Any = resolved.precision
    if "precision" in objects:
        precision = objects.pop("precision")
    elif isinstance(precision, ResolvedSpec):
        precision = _construct("trainer.precision", precision)
    logger: Any = objects.pop("logger", resolved.logger)
    if isinstance(logger, ResolvedSpec):
        logger = _construct("logger", logger)
    elif isinstance(logger, list):  # several loggers
        logger = [_construct(f"logger[{index}]", spec) if isinstance(spec, ResolvedSpec) else spec
                  for index, spec in enumerate(logger)]
    arguments = {**resolved.trainer, **objects}
    if isinstance(arguments.get("strategy"), ResolvedSpec):
        arguments["strategy"] = _construct("trainer.strategy", arguments["strategy"])
    if dry_run:
        arguments["root_dir"] = tempfile.mkdtemp(prefix="trainer-dry-run-")
    try:
        trainer = Trainer(**arguments, precision=precision, logger=logger, callbacks=callbacks)
    except ValueError as error:
        raise ConfigError([Problem("trainer", str(error))]) from None
    _check_activation_checkpointing(model, trainer.args.activation_checkpointing)
    trainer.experiment_config = resolved.plain
    return Experiment(resolved.plain, model, data, trainer, dry_run=dry_run)
