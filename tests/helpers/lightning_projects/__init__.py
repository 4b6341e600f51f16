"""Small projects written the Lightning way with this package's imports, and their Lightning twins.

Each module here (other than this one) is a complete project: model, data and a
`main(root_dir, precision)` that trains it and returns `{"model", "trainer", "val", "test"}`.
`lightning_source` rewrites only a project's import lines to Lightning's, and `load_project`
executes either version as a fresh module, so `tests/lightning/test_against_lightning.py` can
train both and compare the weights.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parent
PROJECTS = sorted(path.stem for path in FOLDER.glob("*.py") if path.stem != "__init__")  # see projects_in

#: (our import line, Lightning's), as regular expressions over one line each.
IMPORT_RULES: tuple[tuple[str, str], ...] = (
    (r"^(\s*)import trainer as (\w+)[ \t]*$", r"\1import lightning as \2"),
    (r"^(\s*)from trainer import ", r"\1from lightning.pytorch import "),
    (r"^(\s*)import callbacks[ \t]*$", r"\1from lightning.pytorch import callbacks"),
    (r"^(\s*)from callbacks import ", r"\1from lightning.pytorch.callbacks import "),
    (r"^(\s*)from trainer\.loggers import ", r"\1from lightning.pytorch.loggers import "),
    (r"^(\s*)from trainer\.cli import LightningCLI\b", r"\1from lightning.pytorch.cli import LightningCLI"),
    (r"^(\s*)from trainer\.utilities import ", r"\1from lightning.pytorch.utilities import "),
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


def project_path_in(folder: Path, name: str) -> Path:
    """The file of project `name` in a projects folder, or a ValueError naming the projects."""
    names = projects_in(folder)
    if name not in names:
        raise ValueError(f"No Lightning-style project {name!r}. Expected one of {names}.")
    return folder / f"{name}.py"


def projects_in(folder: Path) -> list[str]:
    """The project module names of a projects folder (every `.py` file but `__init__`)."""
    return sorted(path.stem for path in folder.glob("*.py") if path.stem != "__init__")


def load_file(path: Path, framework: str) -> ModuleType:
    """Execute the project file `path` as a new module: `framework="ours"` runs the file as
    written, `"lightning"` runs it with its imports rewritten. Each call gives a fresh module
    (its own classes), registered in `sys.modules` under a unique name."""
    if framework not in ("ours", "lightning"):
        raise ValueError(f"load_project(framework=...) expected 'ours' or 'lightning'. Received: {framework!r}.")
    source = path.read_text()
    if framework == "lightning":
        source = lightning_source(source)
    module_name = f"_lightning_project_{path.parent.name}_{path.stem}_{framework}_{next(_counter)}"
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    exec(compile(source, f"{path} [{framework}]", "exec"), module.__dict__)
    return module


def load_project(name: str, framework: str) -> ModuleType:
    """`load_file` for project `name` of this folder."""
    return load_file(project_path(name), framework)
