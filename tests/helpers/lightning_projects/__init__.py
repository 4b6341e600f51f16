"""Projects written the Lightning way with this package's imports, and their Lightning twins.

Each module here (other than this one) is a complete project: model, data and a
`main(root_dir, precision="32-true", **options)` that trains it and returns what the tests
compare (`{"model", "trainer", "val", ...}`). Some are typical projects (a GAN, an autoencoder,
a classifier with its LightningCLI, a DQN, a small language model), others combine the
features real projects use together (torchmetrics, schedulers, DataModules, resumes,
checkpoint cadences, the `self.log` options, ...). `lightning_source` rewrites only a project's
import lines to Lightning's, and `load_project` executes either version as a fresh module, so
the tests in tests/lightning/ train both in one process and compare (`both`, `assert_same_run`).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

FOLDER = Path(__file__).resolve().parent
PROJECTS = sorted(path.stem for path in FOLDER.glob("*.py") if path.stem != "__init__")

#: (our import line, Lightning's), as regular expressions over one line each.
IMPORT_RULES: tuple[tuple[str, str], ...] = (
    (r"^(\s*)import trainer as (\w+)[ \t]*# as in Lightning\.pytorch$",
     r"\1import lightning.pytorch as \2"),
    (r"^(\s*)import trainer as (\w+)[ \t]*$", r"\1import lightning as \2"),
    (r"^(\s*)from trainer import ", r"\1from lightning.pytorch import "),
    (r"^(\s*)import callbacks[ \t]*$", r"\1from lightning.pytorch import callbacks"),
    (r"^(\s*)from callbacks import ", r"\1from lightning.pytorch.callbacks import "),
    (r"^(\s*)from trainer\.callbacks(\.\w+)? import ", r"\1from lightning.pytorch.callbacks\2 import "),
    (r"^(\s*)from callbacks\.(\w+) import ", r"\1from lightning.pytorch.callbacks.\2 import "),
    (r"^(\s*)from trainer\.loggers import ", r"\1from lightning.pytorch.loggers import "),
    (r"^(\s*)from trainer\.loggers\.logger import ", r"\1from lightning.pytorch.loggers.logger import "),
    (r"^(\s*)from trainer\.cli import LightningCLI\b", r"\1from lightning.pytorch.cli import LightningCLI"),
    (r"^(\s*)from trainer\.utilities import ", r"\1from lightning.pytorch.utilities import "),
    (r"^(\s*)from trainer\.utilities\.combined_loader import ", r"\1from lightning.pytorch.utilities.combined_loader import "),
    (r"^(\s*)from trainer\.demos(\.\w+)? import ", r"\1from lightning.pytorch.demos\2 import "),
    (r"^(\s*)from trainer\.trainer\.states import ", r"\1from lightning.pytorch.trainer.states import "),
    (r"^(\s*)from trainer\.(core|trainer|utilities\.imports|utilities\.exceptions) import ", r"\1from lightning.pytorch.\2 import "),
    (r"^(\s*)from trainer\.((?:loggers|profilers|plugins|accelerators|utilities|core)(?:\.\w+)*) import ",
     r"\1from lightning.pytorch.\2 import "),
)

_OURS = re.compile(r"^\s*(import (trainer|callbacks)\b|from (trainer|callbacks)[ .])")
_counter = itertools.count()


def project_path(name: str) -> Path:
    """The file of project `name` (a module name from `PROJECTS`)."""
    if name not in PROJECTS:
        raise ValueError(f"No Lightning-style project {name!r}. Expected one of {PROJECTS}.")
    return FOLDER / f"{name}.py"


def lightning_source(source: str) -> str:
    """`source` with each of our import lines rewritten to Lightning's; other lines untouched.

    Raises:
        ValueError: a line imports `trainer` or `callbacks` in a form no rule maps.
    """
    lines = []
    for number, line in enumerate(source.split("\n"), start=1):
        for pattern, replacement in IMPORT_RULES:
            new = re.sub(pattern, replacement, line)
            if new != line:
                line = new
                break
        else:
            if _OURS.match(line):
                raise ValueError(f"line {number} imports this package in a form with no Lightning mapping: {line.strip()!r}")
        lines.append(line)
    return "\n".join(lines)


def load_source(source: str, framework: str, name: str, path: Path | None = None) -> ModuleType:
    """Execute a project's `source` as a new module: `framework="ours"` runs it as written,
    `"lightning"` with its imports rewritten. Each call gives a fresh module (its own classes),
    registered in `sys.modules` under a unique name built from `name` (dataclasses and
    pickling look classes up there)."""
    if framework not in ("ours", "lightning"):
        raise ValueError(f"load_project(framework=...) expected 'ours' or 'lightning'. Received: {framework!r}.")
    if framework == "lightning":
        source = lightning_source(source)
    module_name = f"_lightning_project_{name}_{framework}_{next(_counter)}"
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path) if path else None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    if path is not None:
        module.__file__ = str(path)
    sys.modules[module_name] = module
    exec(compile(source, f"{path or name} [{framework}]", "exec"), module.__dict__)
    return module


def load_file(path: Path, framework: str) -> ModuleType:
    """`load_source` for the project file `path`."""
    return load_source(path.read_text(), framework, path.stem, path)


def load_project(name: str, framework: str) -> ModuleType:
    """Project `name` as a fresh module: `"ours"` as written, `"lightning"` with its imports rewritten."""
    return load_file(project_path(name), framework)


# --------------------------------------------------------------------- training both, comparing
def run(name: str, framework: str, root: Path, precision: str | None = None, **options: Any) -> dict[str, Any]:
    """Project `name` trained under `framework` in `root / framework` (`precision`: the
    project's default when None)."""
    if precision is not None:
        options["precision"] = precision
    return load_project(name, framework).main(root / framework, **options)


def both(name: str, root: Path, precision: str | None = None, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Project `name` trained as written and as Lightning's twin, each under its own folder of `root`."""
    return run(name, "ours", root, precision, **options), run(name, "lightning", root, precision, **options)


def assert_same_weights(ours: torch.nn.Module | dict[str, torch.Tensor], theirs: torch.nn.Module | dict[str, torch.Tensor]) -> None:
    """The same parameter and buffer names, in the same order, and every tensor `torch.equal`."""
    mine = ours.state_dict() if isinstance(ours, torch.nn.Module) else ours
    other = theirs.state_dict() if isinstance(theirs, torch.nn.Module) else theirs
    assert list(mine) == list(other)
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"weights differ from Lightning's: {different}"


def assert_same_metrics(ours: dict[str, Any], theirs: dict[str, Any], skip: tuple[str, ...] | set[str] = ()) -> None:
    """Every metric Lightning reports (but those in `skip`) has our value, exactly (ours may
    report more: the Trainer's own train/* scalars)."""
    expected = {key: float(value) for key, value in theirs.items() if key not in skip}
    assert expected
    assert {key: (float(ours[key]) if key in ours else None) for key in expected} == expected


def assert_same_run(ours: dict[str, Any], theirs: dict[str, Any], *, steps_differ_by: int = 0,
                    stages: tuple[str, ...] = (), skip: tuple[str, ...] | set[str] = ()) -> None:
    """The same weights, `global_step` and `current_epoch` (`steps_differ_by`: the steps
    Lightning counts more, as its SWA's BatchNorm epoch, which also adds an epoch), and for
    each of `stages` Lightning's run returned, its metrics (`assert_same_metrics`)."""
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step + steps_differ_by == theirs["trainer"].global_step
    assert ours["trainer"].current_epoch + (1 if steps_differ_by else 0) == theirs["trainer"].current_epoch
    for stage in stages:
        if stage in theirs:
            assert_same_metrics(ours[stage], theirs[stage], skip)


def float_values(values: dict[str, Any]) -> dict[str, float]:
    """`callback_metrics` (tensors or floats) as floats, for comparing runs."""
    return {key: float(value) for key, value in values.items()}


def lightnings_values(ours: dict[str, float], theirs: dict[str, float]) -> None:
    """Every value Lightning reports is ours exactly (ours adds its own `train/...` scalars)."""
    assert theirs
    assert {k: ours.get(k) for k in theirs} == theirs
