"""YAML experiments: the schema of a run, its validation, and the objects it describes.

A config file has six sections (`seed`, `model`, `data`, `trainer`, `callbacks`,
`logger`). `resolve_config` checks all of them at once, before anything is built:
pydantic validates the shape, every `class_path` is imported and its `init_args` are
validated against the class's own signature, and the `trainer:` section is validated by
`TrainerArgs`, the same model `Trainer(...)` validates through. Every problem is
collected into one `ConfigError` that names its YAML path. `load_experiment` (or
`Trainer.from_config`) then seeds, builds the objects and returns an `Experiment`.

Example:
    >>> from trainer.config import resolve_config
    >>> resolve_config({"model": {"class_path": "trainer.Module"}})
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: the config has 1 problem:
      data: required section is missing. Expected {class_path: ..., init_args: {...}}.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from trainer._args import TrainerArgs
from trainer._classpath import Problem, ResolvedSpec, check_spec, instantiate, received, suggest
from trainer._yaml import dump_yaml, parse_yaml

__all__ = [
    "ClassSpec",
    "ExperimentConfig",
    "ConfigError",
    "ResolvedConfig",
    "Experiment",
    "Stage",
    "read_yaml",
    "parse_yaml",
    "dump_yaml",
    "apply_overrides",
    "resolve_config",
    "load_experiment",
]

log = logging.getLogger("trainer")

Stage = Literal["fit", "validate", "test", "predict"]
LOADER_OF: dict[str, str] = {
    "fit": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"
}
#: `trainer:` keys that live at the top level of a file instead.
TOP_LEVEL_ONLY = ("seed", "logger", "callbacks")
TRAINER_FIELDS = [name for name in TrainerArgs.model_fields if name not in TOP_LEVEL_ONLY]


class ClassSpec(BaseModel):
    """`{class_path: package.module.Name, init_args: {...}}`: what to build and with which arguments."""

    model_config = ConfigDict(extra="forbid")
    class_path: str
    init_args: dict[str, Any] = Field(default_factory=dict)


class ExperimentConfig(BaseModel):
    """The shape of a config file; the sections' contents are checked by `resolve_config`."""

    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(None, description="seeds Python, NumPy and torch once, before anything is built")
    model: ClassSpec = Field(description="a trainer.Module subclass (or a function returning a Module)")
    data: ClassSpec = Field(description="a class or function whose result has train_dataloader() etc.")
    trainer: dict[str, Any] = Field(default_factory=dict, description="Trainer arguments (see TrainerArgs)")
    callbacks: list[ClassSpec] = Field(default_factory=list, description="trainer.Callback subclasses")
    logger: bool | ClassSpec = Field(True, description="true (TensorBoard), false, or a logger's class_path")


SECTIONS = list(ExperimentConfig.model_fields)


class ConfigError(ValueError):
    """A config with mistakes; `problems` lists every one with its YAML path."""

    def __init__(self, problems: Iterable[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        count, name = len(self.problems), source or "the config"
        if count == 1 and not self.problems[0].path:
            super().__init__(f"{name}: {self.problems[0]}")
            return
        head = f"{name} has {count} problem{'s' if count != 1 else ''}:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


# ------------------------------------------------------------------------------- YAML
def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config file; raise `ConfigError` if it is missing, not YAML or not a mapping."""
    source = Path(path)
    if not source.is_file():
        what = "is a folder" if source.is_dir() else "does not exist"
        raise ConfigError([Problem("", f"config file {what}. Expected the path of a YAML file.")], str(source))
    try:
        data = parse_yaml(source.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError([Problem("", "is not a text file. Expected a YAML file.")], str(source)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError([Problem("", f"is not valid YAML: {problem}{where}.")], str(source)) from None
    if not isinstance(data, dict):
        raise ConfigError([Problem("", f"Expected a YAML mapping with the sections {', '.join(SECTIONS)}. "
                                   f"{received(data)}")], str(source))
    return data


# -------------------------------------------------------------------------- overrides
def apply_overrides(config: dict[str, Any], overrides: Mapping[str, Any]) -> list[Problem]:
    """Set `{"trainer.max_epochs": 3, ...}` in `config` (in place); return the problems.

    A key without a dot that is a `Trainer` argument means `trainer.<key>`. A number
    segment indexes a list (`callbacks.0.init_args.patience`).
    """
    problems: list[Problem] = []
    for key, value in overrides.items():
        parts = str(key).split(".")
        if len(parts) == 1 and parts[0] not in SECTIONS and parts[0] in TRAINER_FIELDS:
            parts = ["trainer", parts[0]]
        if parts[0] not in SECTIONS or not all(parts):
            problems.append(Problem(key, f"unknown override.{suggest(parts[0], SECTIONS + TRAINER_FIELDS)} "
                                    f"Expected a dotted path starting with one of: {', '.join(SECTIONS)}."))
            continue
        node: Any = config
        for depth, part in enumerate(parts[:-1]):
            child = _child(node, part)
            if child is _MISSING:
                if isinstance(node, dict):
                    node[part] = child = {}
                else:
                    problems.append(Problem(key, f"{'.'.join(parts[: depth + 1])!r} does not exist in the config."))
                    break
            if not isinstance(child, (dict, list)):
                node[part if isinstance(node, dict) else int(part)] = child = {}
            node = child
        else:
            last = parts[-1]
            if isinstance(node, list):
                if not last.isdigit() or int(last) >= len(node):
                    problems.append(Problem(key, f"Expected an index below {len(node)}. Received: {last!r}."))
                    continue
                node[int(last)] = value
            else:
                node[last] = value
    return problems


_MISSING = object()


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, _MISSING)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return _MISSING


# -------------------------------------------------------------------------- resolving
@dataclasses.dataclass
class ResolvedConfig:
    """A checked config: the specs to build and the fully resolved plain form."""

    seed: int | None
    model: ResolvedSpec
    data: ResolvedSpec
    trainer: dict[str, Any]
    precision: str | ResolvedSpec
    callbacks: list[ResolvedSpec]
    logger: bool | ResolvedSpec
    plain: dict[str, Any]


def resolve_config(config: Mapping[str, Any], stage: Stage = "fit", source: str | None = None) -> ResolvedConfig:
    """Check every section of `config`; raise one `ConfigError` listing every problem."""
    from trainer.callback import Callback
    from trainer.module import Module

    problems = _shape_problems(config)
    bad = {p.path.split(".")[0].split("[")[0] for p in problems}
    resolved: dict[str, Any] = {}
    model, problems_model = (None, []) if "model" in bad else check_spec(config["model"], "model", Module, allow_callable=True)
    data, problems_data = (None, []) if "data" in bad else check_spec(config["data"], "data")
    problems += problems_model + problems_data
    method = LOADER_OF[stage]
    if data is not None and isinstance(data.target, type) and not hasattr(data.target, method):
        offered = [m for m in LOADER_OF.values() if hasattr(data.target, m)]
        problems.append(Problem("data.class_path", f"{data.class_path} has no {method}(), which `{stage}` needs. "
                                f"Received: a class with {', '.join(offered) or 'none of train/val/test/predict_dataloader'}."))
    callbacks: list[ResolvedSpec] = []
    if "callbacks" not in bad:
        for index, item in enumerate(config.get("callbacks") or []):
            spec, found = check_spec(item, f"callbacks[{index}]", Callback)
            problems += found
            callbacks += [spec] if spec is not None else []
    logger: Any = config.get("logger", True)
    if "logger" not in bad and isinstance(logger, dict):
        logger, found = check_spec(logger, "logger")
        problems += found
    trainer, precision, found = ({}, "fp32", []) if "trainer" in bad else _check_trainer(config.get("trainer") or {})
    problems += found
    if problems:
        raise ConfigError(problems, source)
    assert model is not None and data is not None
    resolved = {
        "seed": config.get("seed"),
        "model": model.as_plain(),
        "data": data.as_plain(),
        "trainer": {"precision": precision.as_plain() if isinstance(precision, ResolvedSpec) else precision, **trainer},
        "callbacks": [c.as_plain() for c in callbacks],
        "logger": logger.as_plain() if isinstance(logger, ResolvedSpec) else logger,
    }
    return ResolvedConfig(config.get("seed"), model, data, trainer, precision, callbacks, logger, resolved)


def _shape_problems(config: Mapping[str, Any]) -> list[Problem]:
    try:
        ExperimentConfig.model_validate(dict(config))
    except pydantic.ValidationError as error:
        return _from_pydantic(error)
    return []


def _from_pydantic(error: pydantic.ValidationError, prefix: str = "") -> list[Problem]:
    problems: list[Problem] = []
    spec_keys = list(ClassSpec.model_fields)
    for item in error.errors():
        loc = [p for p in item["loc"] if p not in ("bool", "ClassSpec")]
        if item["loc"][:2] == ("logger", "bool") and isinstance(item.get("input"), dict):
            continue  # a mapping was meant as a class spec; its own errors follow
        path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        value = item.get("input")
        if item["type"] == "extra_forbidden":
            accepted = SECTIONS if len(loc) == 1 and not prefix else spec_keys
            if prefix == "trainer.":
                accepted = TRAINER_FIELDS
            message = f"unknown field.{suggest(loc[-1], accepted)} Accepted: {', '.join(accepted)}."
        elif item["type"] == "missing":
            section = len(loc) == 1 and not prefix
            message = ("required section is missing. Expected {class_path: ..., init_args: {...}}." if section
                       else "required field is missing.")
        else:
            message = f"{item['msg'].removeprefix('Value error, ')}. {received(value)}"
        problems.append(Problem(path, message))
    return problems


def _check_trainer(section: Any) -> tuple[dict[str, Any], str | ResolvedSpec, list[Problem]]:
    """Validate the `trainer:` section with TrainerArgs; a precision may be a class spec."""
    from trainer.precision import PRECISIONS, Precision

    problems: list[Problem] = []
    values = dict(section)
    for key in TOP_LEVEL_ONLY:
        if key in values:
            values.pop(key)
            problems.append(Problem(f"trainer.{key}", f"set `{key}:` at the top level of the file, not under trainer."))
    precision: str | ResolvedSpec = values.pop("precision", "fp32")
    if isinstance(precision, dict):
        spec, found = check_spec(precision, "trainer.precision", Precision)
        problems += found
        precision = spec if spec is not None else "fp32"
    elif precision not in PRECISIONS:
        problems.append(Problem("trainer.precision", f"Expected one of {', '.join(map(repr, PRECISIONS))} or "
                                f"{{class_path: ..., init_args: ...}} of a Precision subclass.{suggest(precision, PRECISIONS)} "
                                f"{received(precision)}"))
    try:
        args = TrainerArgs.model_validate(values)
    except pydantic.ValidationError as error:
        return {}, precision, problems + _from_pydantic(error, "trainer.")
    plain = args.model_dump(mode="json", exclude={*TOP_LEVEL_ONLY, "precision"})
    return plain, precision, problems


# --------------------------------------------------------------------------- building
class Experiment:
    """The objects a config describes, ready to run.

    Attributes:
        config: the fully resolved config as plain data (what `--print_config` shows).
        model: the `Module`; data: the data object; trainer: the `Trainer`.
    """

    def __init__(self, config: dict[str, Any], model: Any, data: Any, trainer: Any, *, dry_run: bool = False) -> None:
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
            return list(itertools.islice(loader, 2))
        return loader

    def fit(self, ckpt_path: str | Path | None = None) -> None:
        """`trainer.fit` with the data's train (and val, if any) loaders; saves config.yaml first."""
        train = self.loader("train_dataloader", "fit")
        val = self.loader("val_dataloader", "fit", required=False)
        self._save_config(writes_checkpoints=True)
        if self.dry_run:
            self.trainer.fit(self.model, train, ckpt_path=ckpt_path)
            if val is not None:
                self.trainer.validate(self.model, val)
            return
        self.trainer.fit(self.model, train, val, ckpt_path=ckpt_path)

    def validate(self, ckpt_path: str | Path | None = None) -> dict[str, float]:
        self._save_config()
        return self.trainer.validate(self.model, self.loader(LOADER_OF["validate"], "validate"), ckpt_path=ckpt_path)  # type: ignore[no-any-return]

    def test(self, ckpt_path: str | Path | None = None) -> dict[str, float]:
        self._save_config()
        return self.trainer.test(self.model, self.loader(LOADER_OF["test"], "test"), ckpt_path=ckpt_path)  # type: ignore[no-any-return]

    def predict(self, ckpt_path: str | Path | None = None) -> list[Any]:
        self._save_config()
        return self.trainer.predict(self.model, self.loader(LOADER_OF["predict"], "predict"), ckpt_path=ckpt_path)  # type: ignore[no-any-return]

    def _save_config(self, writes_checkpoints: bool = False) -> None:
        """Write config.yaml into the run's folder, only if the run writes anything at all."""
        args = self.trainer.args
        writes = args.logger is not False or (writes_checkpoints and args.enable_checkpointing)
        if writes and self.trainer.strategy.is_global_zero:
            path = Path(self.trainer.log_dir) / "config.yaml"
            path.write_text(dump_yaml(self.config), encoding="utf-8")
            log.info("Config saved to %s", path)


DRY_RUN = {"logger": False, "trainer.enable_checkpointing": False, "trainer.max_steps": 2, "trainer.max_epochs": None}


def prepare_config(
    source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
    stage: Stage = "fit", dry_run: bool = False,
) -> ResolvedConfig:
    """Read (a copy of) the config, apply the overrides (and the dry run's), and resolve it."""
    import copy

    name = str(source) if isinstance(source, (str, Path)) else None
    config = read_yaml(source) if isinstance(source, (str, Path)) else copy.deepcopy(dict(source))
    problems = apply_overrides(config, dict(overrides or {}))
    problems += apply_overrides(config, DRY_RUN) if dry_run else []
    if problems:
        raise ConfigError(problems, name)
    return resolve_config(config, stage, name)


def build(resolved: ResolvedConfig, *, stage: Stage = "fit", dry_run: bool = False) -> Experiment:
    """Seed, then build the data, the model, the callbacks, the logger and the Trainer."""
    from trainer._utils import seed_everything
    from trainer.module import Module
    from trainer.trainer import Trainer

    if resolved.seed is not None:
        seed_everything(resolved.seed)
    data = instantiate(resolved.data)
    if not hasattr(data, LOADER_OF[stage]):
        raise ConfigError([Problem("data", f"{resolved.data.class_path}(...) returned {type(data).__name__}, which has "
                                   f"no {LOADER_OF[stage]}(). Expected an object with train_dataloader() and optionally "
                                   "val_dataloader(), test_dataloader(), predict_dataloader().")])
    model = instantiate(resolved.model)
    if not isinstance(model, Module):
        raise ConfigError([Problem("model", f"Expected {resolved.model.class_path}(...) to return a trainer.Module. "
                                   f"Received: {type(model).__name__}.")])
    precision = instantiate(resolved.precision) if isinstance(resolved.precision, ResolvedSpec) else resolved.precision
    logger = instantiate(resolved.logger) if isinstance(resolved.logger, ResolvedSpec) else resolved.logger
    try:
        trainer = Trainer(**resolved.trainer, precision=precision, logger=logger,
                          callbacks=[instantiate(c) for c in resolved.callbacks])
    except (ValueError, TypeError) as error:
        raise ConfigError([Problem("trainer", str(error))]) from None
    trainer.experiment_config = resolved.plain
    return Experiment(resolved.plain, model, data, trainer, dry_run=dry_run)


def load_experiment(
    source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
    stage: Stage = "fit", dry_run: bool = False,
) -> Experiment:
    """Validate a YAML file (or a dict) with dotted overrides, then build its objects.

    Example:
        >>> experiment = load_experiment("examples/digits_fp32.yaml", {"trainer.max_epochs": 1})  # doctest: +SKIP
        >>> experiment.fit(); experiment.trainer.callback_metrics["val/acc"]  # doctest: +SKIP
    """
    return build(prepare_config(source, overrides, stage=stage, dry_run=dry_run), stage=stage, dry_run=dry_run)
