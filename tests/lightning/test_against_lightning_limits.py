"""Two Lightning-style projects (tests/helpers/lightning_projects) that move by their imports
alone to Lightning's weights (torch.equal):

- `limited_augmentation`: short epochs (`limit_train_batches`, an int or a fraction, or
  `max_steps` inside a limited epoch) over a data set augmented at random in the main process,
  several epochs, dropout, a per-step OneCycle: the run reads exactly the batches Lightning
  reads, so torch's generator, and with it every later epoch, stays Lightning's;
- `tbptt_buffers`: a word language model whose LSTM state lives in persistent buffers and is
  zeroed in `on_train_epoch_start`, stopped inside its second epoch and resumed from a step
  checkpoint: the resumed run has the uninterrupted run's weights, which are Lightning's (a
  resume in Lightning itself replays the epoch from its first batch; docs/lightning.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import load_project

pytest.importorskip("lightning")


def run(name: str, framework: str, root: Path, **kwargs: Any) -> dict[str, Any]:
    return load_project(name, framework).main(root / framework, **kwargs)


def assert_same_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"weights differ from Lightning's: {different}"


@pytest.mark.parametrize("options", [{"limit": 4}, {"limit": 0.25}, {"limit": 4, "max_steps": 10}],
                         ids=["int", "fraction", "max_steps"])
def test_limited_epochs_with_main_process_augmentation(options: dict[str, Any], tmp_path: Path) -> None:
    ours = run("limited_augmentation", "ours", tmp_path, **options)
    theirs = run("limited_augmentation", "lightning", tmp_path, **options)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert torch.equal(ours["after"], theirs["after"])  # torch's generator: the same draws, no more
    assert ours["lr"] == theirs["lr"]
    for key in ("val_loss", "val_acc"):
        assert float(ours["val"][key]) == float(theirs["val"][key]), key


def test_tbptt_buffer_state_resumed_mid_epoch(tmp_path: Path) -> None:
    resumed = run("tbptt_buffers", "ours", tmp_path / "resumed", stop_at=14)
    assert resumed["cut"] == "step=14.ckpt" and resumed["saved_state"].abs().sum() > 0  # a state to lose
    whole = run("tbptt_buffers", "ours", tmp_path / "whole")
    theirs = run("tbptt_buffers", "lightning", tmp_path / "whole")
    assert_same_weights(whole["model"], theirs["model"])
    assert_same_weights(resumed["model"], theirs["model"])  # buffers h, c included
    assert resumed["trainer"].global_step == theirs["trainer"].global_step == 30
    assert float(resumed["val"]["val_ppl"]) == float(theirs["val"]["val_ppl"])
