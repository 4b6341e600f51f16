"""The package's docstring examples (`Example:` blocks) run as part of the suite.

One test per module of `trainer/` and `callbacks/` whose source holds a `>>>` line: the module
is imported, every docstring example in it runs as `python -m doctest` would run it (with
ELLIPSIS, as pytest's `--doctest-modules`), and a failure names the docstring, its line and
what it printed. Modules are found by reading the files, so collecting this file imports none
of them; a module whose optional dependency (wandb, mlflow, ...) is not installed is skipped.
`--doctest-modules` itself is not used: over tests/ it would import the worker scripts in
tests/helpers/scripts/, which train when imported.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import io
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("trainer", "callbacks")


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if ">>> " in path.read_text(encoding="utf-8"):
                parts = path.relative_to(REPO).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = modules_with_examples()


class _ThisFilesExamples(doctest.DocTestFinder):
    """doctest's finder, that also takes a class written in the module it searches whose
    `__module__` names its public home (`MonitorError` says `trainer.callback`)."""

    def _from_module(self, module: object, object: object) -> bool:
        if inspect.isclass(object):
            file = getattr(module, "__file__", None)
            return object.__module__ == getattr(module, "__name__", None) or any(
                inspect.isfunction(value) and value.__code__.co_filename == file for value in vars(object).values())
        return bool(super()._from_module(module, object))  # type: ignore[misc]


def test_the_package_has_examples_to_run() -> None:
    assert len(MODULES) > 50, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] in PACKAGES:
            raise
        pytest.skip(f"{name} needs {error.name}, which is not installed")
    tests = [test for test in _ThisFilesExamples().find(module, name) if test.examples]
    assert tests, f"{name} has '>>> ' in its source but no docstring example doctest can find"
    runnable = [test for test in tests if any(not example.options.get(doctest.SKIP) for example in test.examples)]
    if not runnable:
        pytest.skip(f"every example in {name} is marked +SKIP")
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in runnable:
        runner.run(test, out=report.write)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) of {name} failed:\n{report.getvalue()}"
