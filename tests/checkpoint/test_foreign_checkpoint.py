"""A `torch.save` file the Trainer did not write, given as `ckpt_path`: the refusal says what
the file holds and how to load it by hand (docs/checkpoints.md, "Continuing a checkpoint
written by hand")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.checkpoint import CheckpointError, load_checkpoint


def _refusal(tmp_path: Path, state: Any) -> str:
    path = tmp_path / "foreign.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="foreign.pt.*not a checkpoint of this trainer") as refused:
        load_checkpoint(path)
    return str(refused.value)


def test_bare_weights_are_loaded_with_load_state_dict(tmp_path: Path) -> None:
    message = _refusal(tmp_path, torch.nn.Linear(2, 1).state_dict())
    assert "module.load_state_dict(torch.load(path, weights_only=True))" in message


def test_a_general_checkpoint_names_its_weights_and_optimizer_entries(tmp_path: Path) -> None:
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(net.parameters())
    message = _refusal(tmp_path, {"net": net.state_dict(), "opt": opt.state_dict(), "step": 7})
    assert "['net', 'opt', 'step']" in message
    assert "module.load_state_dict(ckpt['net'])" in message and "optimizer.load_state_dict(ckpt['opt'])" in message
    assert "max_epochs" not in message  # no epoch entry: nothing said about epochs


def test_weights_without_an_optimizer(tmp_path: Path) -> None:
    message = _refusal(tmp_path, {"model": torch.nn.Linear(2, 1).state_dict(), "epoch": 3})
    assert "module.load_state_dict(ckpt['model'])" in message and "optimizer.load_state_dict" not in message
    assert "max_epochs counts the epochs still to train" in message


def test_a_dict_without_weights_says_so(tmp_path: Path) -> None:
    message = _refusal(tmp_path, {"epoch": 3, "loss": 0.5})
    assert "none of them a model's state_dict" in message and "load_state_dict(torch.load" not in message
