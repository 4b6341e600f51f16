"""`Trainer(seed=...)`: a script written the obvious way (the Trainer, then the model, then
`fit`) repeats itself exactly, in one process and from one process to the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def test_the_model_built_after_a_seeded_trainer_is_seeded_too() -> None:
    """Whatever the random streams held before, the model built after `Trainer(seed=s)` starts
    from the weights `torch.manual_seed(s)` gives, and the whole run repeats; another seed
    gives another model."""
    torch.manual_seed(5)
    expected = TinyNet()
    runs = []
    for before, seed in ((1, 5), (2, 5), (1, 6)):
        torch.manual_seed(before)  # whatever the global state was before the script's Trainer
        trainer = Trainer(seed=seed, max_epochs=2, **QUIET)
        model = TinyNet()
        if seed == 5:
            assert_same_weights(model, expected)
        trainer.fit(model, loader(make_data()))
        runs.append(model)
    assert_same_weights(runs[0], runs[1])
    assert not torch.equal(runs[0].net[0].weight, runs[2].net[0].weight)


def test_the_seeded_example_script_gives_the_same_result_in_two_processes(tmp_path: Path) -> None:
    """examples/train_digits.py (`Trainer(seed=42)`, then `DigitsMLP()`) run twice, each in
    its own process: the same printed accuracy and the same final weights."""
    pytest.importorskip("sklearn")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    outputs, weights = [], []
    for name in ("first", "second"):
        cwd = tmp_path / name
        cwd.mkdir()
        done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--epochs", "1"],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append([line for line in done.stdout.splitlines() if "accuracy" in line])
        (last,) = cwd.glob("runs/train_digits/**/last.ckpt")
        weights.append(torch.load(last, weights_only=True)["state_dict"])
    assert outputs[0] == outputs[1] and len(outputs[0]) == 1, outputs
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        assert torch.equal(value, weights[1][key]), key
