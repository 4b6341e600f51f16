"""docs/lightning.md's list of what still needs an edit beyond the imports is the truth: each
feature it names raises a ValueError here that says what to write instead, and each one it
marks *silent* really differs from Lightning. A feature that starts to work (or a new one that
fails) must change the list."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

DOC = Path(__file__).resolve().parents[2] / "docs" / "lightning.md"
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def _section() -> str:
    text = DOC.read_text()
    match = re.search(r"### What still needs an edit\n(.*?)\n## ", text, re.S)
    assert match, "docs/lightning.md has no 'What still needs an edit' list under Imports"
    return match.group(1)


def _trainer(**kwargs: object) -> Callable[[], None]:
    def build() -> None:
        import trainer

        trainer.Trainer(**QUIET, **kwargs)  # type: ignore[arg-type]

    return build


def _construct(module: str, name: str, **kwargs: object) -> Callable[[], None]:
    def build() -> None:
        import importlib

        getattr(importlib.import_module(module), name)(**kwargs)

    return build


RAISES: dict[str, Callable[[], None]] = {
    '`strategy="ddp_spawn"`': _trainer(strategy="ddp_spawn"),
    '`"dp"`': _trainer(strategy="dp"),
    "`DeepSpeedStrategy(...)`": _construct("trainer.strategies", "DeepSpeedStrategy"),
    "`ModelParallelStrategy(...)`": _construct("trainer.strategies", "ModelParallelStrategy"),
    '`precision="bf16-true"`': _trainer(precision="bf16-true"),
    '`"64-true"`': _trainer(precision="64-true"),
    "`Trainer(num_nodes=...": _trainer(num_nodes=2),
    "`BatchSizeFinder`": _construct("callbacks", "BatchSizeFinder"),
}


@pytest.mark.parametrize("phrase", list(RAISES))
def test_each_listed_feature_raises_saying_what_to_write(phrase: str) -> None:
    assert phrase in _section(), f"{phrase} is not in the list"
    with pytest.raises(ValueError) as error:
        RAISES[phrase]()
    assert len(str(error.value)) > 40  # a sentence saying what to do, not a bare name


def test_each_silent_difference_listed_is_real() -> None:
    from lightning.pytorch.loggers import TensorBoardLogger as TheirTensorBoard

    from trainer.loggers import TensorBoardLogger

    section = _section()
    assert "*silent*: `logger.root_dir`" in section
    folder = tempfile.mkdtemp()
    ours, theirs = TensorBoardLogger(save_dir=folder, name="x"), TheirTensorBoard(save_dir=folder, name="x")
    assert str(ours.root_dir) != str(theirs.root_dir)
    assert Path(ours.log_dir).parent == Path(theirs.log_dir).parent  # what the list says to read instead
