"""YAML experiments and the `trainer` command: the layer that composes the core from a file.

- `schema.py`: the shape of a config file, overrides, and checking every section at once;
- `experiment.py`: building a checked config's objects and running them (`Experiment`);
- `classpath.py`: `class_path` + `init_args`, checked against the target's signature;
- `optim.py`: LightningCLI's automatic `optimizer:` / `lr_scheduler:` sections;
- `yaml_io.py`: the YAML dialect of experiment files;
- `cli.py`: the `trainer` command (also `python -m trainer`);
- `script.py`: `CLI`, a script's own command line as LightningCLI makes one (also `trainer.cli.LightningCLI`).
- `script_args.py`: `CLI`'s other LightningCLI arguments (`trainer_defaults`, `save_config_kwargs`, ...).

The core (`trainer.Trainer` and below) never imports this package.

Example:
    >>> from trainer.config import resolve_config
    >>> resolve_config({"model": {"class_path": "trainer.Module"}})
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: the config has 1 problem:
      data: required section is missing. Expected {class_path: ..., init_args: {...}}.
"""

from __future__ import annotations

from trainer.config.classpath import ConfigError, Problem
from trainer.config.experiment import Experiment, ResolvedConfig, Stage
from trainer.config.optim import ReduceLROnPlateau
from trainer.config.schema import (
    SECTIONS,
    TOP_LEVEL_ONLY,
    TRAINER_FIELDS,
    ClassSpec,
    ExperimentConfig,
    apply_overrides,
    load_experiment,
    prepare_config,
    read_yaml,
    resolve_config,
)
from trainer.config.script import CLI, LightningCLI
from trainer.config.yaml_io import dump_yaml, parse_yaml

__all__ = [
    "CLI",
    "LightningCLI",
    "ReduceLROnPlateau",
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
    "prepare_config",
    "Problem",
    "SECTIONS",
    "TOP_LEVEL_ONLY",
    "TRAINER_FIELDS",
]
