"""A third set of projects written the Lightning way with this package's imports.

Each module here (other than this one) is a complete project combining the features real
projects use together, with a `main(root_dir, precision="32-true", **options)` that trains it
and returns `{"model", "trainer", "val", ...}`. Lightning's twin is the same file with its
import lines rewritten by `tests.helpers.lightning_projects.lightning_source` (the same rules,
imported, not copied); `load_project` executes either version as a fresh module.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helpers.lightning_projects import lightning_source, load_file, project_path_in, projects_in

__all__ = ["FOLDER", "PROJECTS", "both", "lightning_source", "lightnings_values", "load_project", "project_path"]

FOLDER = Path(__file__).resolve().parent
PROJECTS = projects_in(FOLDER)


def project_path(name: str) -> Path:
    return project_path_in(FOLDER, name)


def load_project(name: str, framework: str) -> ModuleType:
    """Project `name` as a fresh module: `"ours"` as written, `"lightning"` with its imports rewritten."""
    return load_file(project_path(name), framework)


def both(name: str, root: Path, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Project `name` trained as written and as Lightning's twin, each under its own folder of `root`."""
    return (load_project(name, "ours").main(root / "ours", **options),
            load_project(name, "lightning").main(root / "lightning", **options))


def lightnings_values(ours: dict[str, float], theirs: dict[str, float]) -> None:
    """Every value Lightning reports is ours exactly (ours adds its own `train/...` scalars)."""
    assert theirs
    assert {k: ours.get(k) for k in theirs} == theirs
