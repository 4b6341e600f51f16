"""YAML experiments: the schema of a run, its validation, and the objects it describes.

A config file has the sections `seed`, `model`, `data`, `trainer`, `callbacks`, `logger`, and
LightningCLI's `optimizer`, `lr_scheduler` (trainer/config/optim.py). `resolve_config` checks
all of them at once, before anything is built:
pydantic validates the shape, every `class_path` is imported and its `init_args` are
validated against the class's own signature, and the `trainer:` section is validated by
`TrainerArgs`, the same model `Trainer(...)` validates through. Every problem is
collected into one `ConfigError` that names its YAML path. `load_experiment` then seeds,
builds the objects and returns an `Experiment` (see `trainer/config/experiment.py`).

Example:
    >>> from trainer.config import resolve_config
    >>> resolve_config({"model": {"class_path": "trainer.Module"}})
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: the config has 1 problem:
      data: required section is missing. Expected {class_path: ..., init_args: {...}}.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from trainer._args import TrainerArgs
from trainer.config.classpath import LOGGER_HOMES, ConfigError, Problem, ResolvedSpec, check_spec, received, suggest
from trainer.config.experiment import DRY_RUN, LOADER_OF, Experiment, ResolvedConfig, Stage, build
from trainer.config.optim import OPTIMIZER_SECTIONS, as_spec, check_optimizers, check_strategy, set_section
from trainer.config.yaml_io import dump_yaml, parse_yaml
from trainer.lightning.arguments import lightning_layout, lightning_trainer_section, precision_name

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

#: `trainer:` keys that live at the top level of a file instead.
TOP_LEVEL_ONLY = ("seed", "logger", "callbacks")
TRAINER_FIELDS = [name for name in TrainerArgs.model_fields if name not in TOP_LEVEL_ONLY]


class ClassSpec(BaseModel):
    """`{class_path: package.module.Name, init_args: {...}}`: what to build and with which arguments."""

    model_config = ConfigDict(extra="forbid")
    class_path: str
    init_args: dict[str, Any] = Field(default_factory=dict)

    @pydantic.field_validator("init_args", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return {} if value is None else value  # `init_args:` with every line commented out


class ExperimentConfig(BaseModel):
    """The shape of a config file; the sections' contents are checked by `resolve_config`."""

    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="seeds Python, NumPy and torch once, before anything is built")
    seed_everything: Any = Field(  # checked by _seed: true, false, null or an int
        None, description="LightningCLI's name for seed: an int, true (a random seed, recorded as seed) or false"
    )
    model: ClassSpec = Field(description="a trainer.Module subclass (or a function returning a Module)")
    data: ClassSpec = Field(description="a class or function whose result has train_dataloader() etc.")
    trainer: dict[str, Any] = Field(default_factory=dict, description="Trainer arguments (see TrainerArgs)")
    callbacks: list[ClassSpec] = Field(default_factory=list, description="trainer.Callback subclasses")
    logger: bool | ClassSpec | list[ClassSpec] = Field(
        True, description="true (TensorBoard), false, a logger's class_path, or a list of them (each gets the same values)"
    )
    optimizer: Any = Field(None, description="LightningCLI's automatic optimizer: a torch.optim name or {class_path, init_args}")
    lr_scheduler: Any = Field(None, description="LightningCLI's automatic LR scheduler (used with optimizer:)")

    @pydantic.field_validator("trainer", "callbacks", mode="before")
    @classmethod
    def _empty(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        """A section left empty (`callbacks:` with every item commented out) is its default."""
        if value is None:
            return {} if info.field_name == "trainer" else []
        return value


SECTIONS = list(ExperimentConfig.model_fields)


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
        if parts[0] in OPTIMIZER_SECTIONS:  # `--optimizer Adam` keeps the init_args Adam accepts
            if len(parts) == 1:
                set_section(config, parts[0], value)
                continue
            config[parts[0]] = as_spec(config.get(parts[0]))
        if parts[0] in ("model", "data", *OPTIMIZER_SECTIONS) and len(parts) >= 2 and parts[1] not in ("class_path", "init_args"):
            parts = [parts[0], "init_args", *parts[1:]]  # LightningCLI's shorthand: --model.hidden 256
        at = 2 if parts[:2] == ["trainer", "logger"] else 1 if parts[0] == "logger" else 0
        if at and len(parts) == at and isinstance(value, str) and value:  # --trainer.logger CSVLogger: its class
            value = {"class_path": value, "init_args": {}}
        elif at and len(parts) > at and parts[at] not in ("class_path", "init_args") and not parts[at].isdigit():
            parts = [*parts[:at], "init_args", *parts[at:]]  # --trainer.logger.save_dir DIR: an argument of that class
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
def resolve_config(config: Mapping[str, Any], stage: Stage = "fit", source: str | None = None,
                   deferred: Collection[str] = ()) -> ResolvedConfig:
    """Check every section of `config`; raise one `ConfigError` listing every problem.

    `deferred`: the YAML paths of arguments filled in later (a LightningCLI link's targets):
    a required one missing there is not a problem."""
    from trainer.callback import Callback
    from trainer.module import Module

    config, moved = lightning_layout(config)  # LightningCLI's trainer.callbacks / trainer.logger
    problems = [Problem(path, message) for path, message in moved]
    shape, found = _check_shape(config)
    problems += found
    bad = {p.path.split(".")[0].split("[")[0] for p in problems}
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
        logger, found = check_spec(logger, "logger", homes=LOGGER_HOMES)
        problems += found
    elif "logger" not in bad and isinstance(logger, list):  # logger=[...]: several loggers
        specs = [check_spec(item, f"logger[{index}]", homes=LOGGER_HOMES) for index, item in enumerate(logger)]
        problems += [problem for _, found in specs for problem in found]
        logger = [spec for spec, _ in specs if spec is not None]
    trainer, precision, found = ({}, "fp32", []) if "trainer" in bad else _check_trainer(config.get("trainer") or {})
    problems += found
    seed, found = _seed(shape)
    problems += found
    optimizer, lr_scheduler, found = check_optimizers(config)
    problems += found + check_strategy(optimizer, trainer.get("strategy"))
    problems = [p for p in problems if not (p.path in deferred and p.message.startswith("missing required argument"))]
    if problems:
        raise ConfigError(problems, source)
    assert shape is not None and model is not None and data is not None
    if isinstance(shape.logger, bool):
        logger = shape.logger  # validated: `logger: "false"` is False
    resolved = {
        "seed": seed,  # validated: `seed: "42"` is the int 42
        "model": model.as_plain(),
        "data": data.as_plain(),
        "trainer": {
            "precision": precision.as_plain() if isinstance(precision, ResolvedSpec) else precision,
            **{k: v.as_plain() if isinstance(v, ResolvedSpec) else v for k, v in trainer.items()},
        },
        "callbacks": [c.as_plain() for c in callbacks],
        "logger": logger.as_plain() if isinstance(logger, ResolvedSpec) else [spec.as_plain() for spec in logger]
        if isinstance(logger, list) else logger,
        "optimizer": optimizer.as_plain() if optimizer is not None else None,
        "lr_scheduler": lr_scheduler.as_plain() if lr_scheduler is not None else None,
    }
    return ResolvedConfig(seed, model, data, trainer, precision, callbacks, logger, resolved, optimizer, lr_scheduler)


def _seed(shape: ExperimentConfig | None) -> tuple[int | None, list[Problem]]:
    """`seed`, or LightningCLI's `seed_everything` (true: a random seed, drawn once here so
    the resolved config records it, as LightningCLI does)."""
    if shape is None or shape.seed_everything is None:
        return (shape.seed if shape is not None else None), []
    value = shape.seed_everything
    if shape.seed is not None:
        return None, [Problem("seed_everything", "given with seed. Expected one of them (seed_everything is LightningCLI's name for seed).")]
    if isinstance(value, bool):
        return (random.randint(0, 2**32 - 1) if value else None), []
    if not isinstance(value, int) or not 0 <= value <= 2**32 - 1:
        return None, [Problem("seed_everything", f"Expected true, false or an int from 0 to 2**32 - 1. {received(value)}")]
    return value, []


def _check_shape(config: Mapping[str, Any]) -> tuple[ExperimentConfig | None, list[Problem]]:
    try:
        return ExperimentConfig.model_validate(dict(config)), []
    except pydantic.ValidationError as error:
        return None, _from_pydantic(error)


def _from_pydantic(error: pydantic.ValidationError, prefix: str = "") -> list[Problem]:
    problems: list[Problem] = []
    spec_keys = list(ClassSpec.model_fields)
    for item in error.errors():
        loc = [p for p in item["loc"] if p not in ("bool", "ClassSpec", "list[ClassSpec]")]
        path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        value = item.get("input")
        if not prefix and len(item["loc"]) == 2 and item["loc"][0] == "logger":  # the union's own errors
            if isinstance(value, (dict, list)) or item["loc"][1] != "bool":
                continue  # one message for the union; a mapping's (or a list's) own errors follow
            message = f"Expected true, false, {{class_path: ..., init_args: {{...}}}} or a list of them. {received(value)}"
        elif item["type"] == "extra_forbidden":
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
    values, named = lightning_trainer_section(values, TrainerArgs.model_fields)
    problems += [Problem(path, message) for path, message in named]
    if isinstance(precision, dict):
        spec, found = check_spec(precision, "trainer.precision", Precision)
        problems += found
        precision = spec if spec is not None else "fp32"
    elif (name := precision_name(precision)) is not None:  # ours, or Lightning's
        precision = name
    elif precision not in PRECISIONS:
        problems.append(Problem("trainer.precision", f"Expected one of {', '.join(map(repr, PRECISIONS))} or "
                                f"{{class_path: ..., init_args: ...}} of a Precision subclass.{suggest(precision, PRECISIONS)} "
                                f"{received(precision)}"))
    strategy_spec: ResolvedSpec | None = None
    if isinstance(values.get("strategy"), dict):  # strategy: {class_path: trainer.distributed.DDP, init_args: {...}}
        from trainer.strategies import Strategy

        strategy_spec, found = check_spec(values.pop("strategy"), "trainer.strategy", Strategy)
        problems += found
    from trainer.loops.hooks import CallbackBase

    try:
        args = TrainerArgs.model_validate(values, context={"callback_base": CallbackBase})
    except pydantic.ValidationError as error:
        return {}, precision, problems + _from_pydantic(error, "trainer.")
    plain = args.model_dump(mode="json", exclude={*TOP_LEVEL_ONLY, "precision"})
    if strategy_spec is not None:
        plain["strategy"] = strategy_spec  # built by build(), written back as its class spec
    return plain, precision, problems


# ------------------------------------------------------------------------ entry points
def prepare_config(
    source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
    stage: Stage = "fit", dry_run: bool = False, deferred: Collection[str] = (),
) -> ResolvedConfig:
    """Read (a copy of) the config, apply the overrides (and the dry run's), and resolve it
    (`deferred`: see `resolve_config`)."""
    name = str(source) if isinstance(source, (str, Path)) else None
    config = read_yaml(source) if isinstance(source, (str, Path)) else copy.deepcopy(dict(source))
    problems = apply_overrides(config, dict(overrides or {}))
    if problems:
        raise ConfigError(problems, name)
    try:
        if dry_run:  # the real run's config must be valid too, before the dry run overrides parts of it
            resolve_config(copy.deepcopy(config), stage, name, deferred)
            problems = apply_overrides(config, DRY_RUN)
            if problems:
                raise ConfigError(problems, name)
        return resolve_config(config, stage, name, deferred)
    except ConfigError as error:
        raise _blame_overrides(error, overrides or {}) from None


def _blame_overrides(error: ConfigError, overrides: Mapping[str, Any]) -> ConfigError:
    """A problem at a path an override set came from the command line, not the file: say so."""
    if not overrides:
        return error
    keys = [str(k) for k in overrides]
    problems = []
    for problem in error.problems:
        source = next((k for k in keys if problem.path == k or problem.path.startswith(k + ".")
                       or problem.path == f"trainer.{k}" or problem.path.replace(".init_args", "") == k), None)
        note = f" (set on the command line: --{source} {overrides[source]!r})" if source is not None else ""
        problems.append(Problem(problem.path, problem.message + note))
    return ConfigError(problems, error.source)


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
