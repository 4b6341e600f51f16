"""The evaluation loop as Lightning's own tests specify it (tests_pytorch/loops/test_evaluation_loop.py),
each scenario run under Lightning and here, with only the imports changed, and compared: a
`CombinedLoader` in each non-sequential mode given to `validate`/`test` (the batches, the batch
counts), and steps written without `batch_idx`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
from trainer import Trainer
from trainer.demos.boring_classes import BoringModel
from trainer.utilities.combined_loader import CombinedLoader


def combined(root, mode, fn):
    """Lightning: test_evaluation_loop_non_sequential_mode_supprt."""
    seen = []

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx):
            seen.append(batch)

        def test_step(self, batch, batch_idx):
            seen.append(batch)

    trainer = Trainer(default_root_dir=root, barebones=True)
    getattr(trainer, fn)(Model(), CombinedLoader({"a": [0, 1, 2], "b": [3, 4]}, mode))
    counts = trainer.num_val_batches if fn == "validate" else trainer.num_test_batches
    return seen, list(counts), list(trainer.num_sanity_val_batches)


def no_batch_idx(root):
    """Lightning: test_evaluation_loop_when_batch_idx_argument_is_not_given."""
    called = []

    class Model(BoringModel):
        def validation_step(self, batch):
            called.append("validation")
            return {"x": self.step(batch)}

        def test_step(self, batch):
            called.append("test")
            return {"y": self.step(batch)}

    trainer = Trainer(default_root_dir=root, fast_dev_run=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False)
    model = Model()
    trainer.validate(model)
    trainer.test(model)
    return called
'''

SPEC = Spec(SOURCE, "spec_evaluation_loop")


@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size", "max_size"])
@pytest.mark.parametrize("fn", ["validate", "test"])
def test_combined_loader_modes(mode: str, fn: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("combined", tmp_path, mode=mode, fn=fn)
    assert ours == theirs


def test_steps_without_batch_idx(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("no_batch_idx", tmp_path)
    assert ours == theirs == ["validation", "test"]
