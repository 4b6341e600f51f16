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

from tests.helpers.lightning_projects import lightning_source, load_file, project_path_in, projects_in

__all__ = ["FOLDER", "PROJECTS", "lightning_source", "load_project", "project_path"]

FOLDER = Path(__file__).resolve().parent
PROJECTS = projects_in(FOLDER)


def project_path(name: str) -> Path:
    return project_path_in(FOLDER, name)


def load_project(name: str, framework: str) -> ModuleType:
    """Project `name` as a fresh module: `"ours"` as written, `"lightning"` with its imports rewritten."""
    return load_file(project_path(name), framework)
