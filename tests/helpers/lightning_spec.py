"""Scenarios from Lightning's own tests, run under Lightning and under this package in one process.

A spec file in tests/lightning/ (`test_lightning_spec_<topic>.py`) holds its scenarios as one
source text written with this package's imports; `Spec(SOURCE, name)` executes it twice, as
written and with its import lines rewritten to Lightning's (`lightning_source`), and
`spec.compare(scenario, tmp_path, **options)` calls the same function in both and returns the
two results (plain values, so `==` compares them).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.helpers.lightning_projects import load_source


class Spec:
    """The two versions of one scenario source, loaded on first use."""

    def __init__(self, source: str, name: str) -> None:
        self.source, self.name = source, name
        self._modules: dict[str, ModuleType] = {}

    def module(self, framework: str) -> ModuleType:
        if framework not in self._modules:
            self._modules[framework] = load_source(self.source, framework, self.name)
        return self._modules[framework]

    def run(self, framework: str, scenario: str, root: Path, **options: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(self.module(framework), scenario)(root / framework, **options)

    def compare(self, scenario: str, root: Path, **options: Any) -> tuple[Any, Any]:
        """(ours, Lightning's) results of `scenario(root / framework, **options)`."""
        return self.run("ours", scenario, root, **options), self.run("lightning", scenario, root, **options)


# What the scenarios return, as plain values both packages give alike (`from tests.helpers.lightning_spec
# import weights, plain` inside a scenario source: the line is the same under both packages).
def weights(model: Any) -> dict[str, Any]:
    """The module's state as nested lists."""
    return {k: v.tolist() for k, v in model.state_dict().items()}


def plain(results: Any) -> list[dict[str, float]]:
    """`validate`/`test` results as a list of `{name: value}` rounded to 6 places (one loader:
    the dict itself here, which answers [0], docs/lightning.md)."""
    if isinstance(results, dict):
        results = [results[0]]
    return [{k: round(float(v), 6) for k, v in r.items()} for r in results]
