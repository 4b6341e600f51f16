"""A second set of projects written the Lightning way with this package's imports.

Each module here (other than this one) is a complete project combining the features real
projects use together, with a `main(root_dir, precision="32-true", **options)` that trains it
and returns `{"model", "trainer", "val", ...}`. Lightning's twin is the same file with its
import lines rewritten by `tests.helpers.lightning_projects.lightning_source` (the same rules,
imported, not copied); `load_project` executes either version as a fresh module.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers.lightning_projects import lightning_source

FOLDER = Path(__file__).resolve().parent
PROJECTS = sorted(path.stem for path in FOLDER.glob("*.py") if path.stem != "__init__")
_counter = itertools.count()


def project_path(name: str) -> Path:
    """The file of project `name` (a module name from `PROJECTS`)."""
    if name not in PROJECTS:
        raise ValueError(f"No Lightning-style project {name!r}. Expected one of {PROJECTS}.")
    return FOLDER / f"{name}.py"


def load_project(name: str, framework: str) -> ModuleType:
    """Execute project `name` as a new module: `"ours"` as written, `"lightning"` with its
    imports rewritten by `lightning_source`."""
    if framework not in ("ours", "lightning"):
        raise ValueError(f"load_project(framework=...) expected 'ours' or 'lightning'. Received: {framework!r}.")
    path = project_path(name)
    source = path.read_text()
    if framework == "lightning":
        source = lightning_source(source)
    module_name = f"_lightning_project2_{name}_{framework}_{next(_counter)}"
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    exec(compile(source, f"{path} [{framework}]", "exec"), module.__dict__)
    return module
