"""Checkpoints and resumes as Lightning's, with only the imports changed.

A checkpoint Lightning wrote continues under our Trainer as Lightning continues it; ours loads
into a plain module and through Lightning's `load_from_checkpoint`; a resume from
ModelCheckpoint's `last.ckpt` (with a stateful callback and a StepLR), the checkpoint cadences
(every n epochs or steps, top-k, `save_last`), and a curriculum kept in a DataModule's state
give Lightning's weights, files and values. Ours also restores the random streams, so a
shuffled resume equals the uninterrupted run (Lightning's does not: xfail).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both, load_project, run

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


@pytest.mark.parametrize("saved", ["after fit", "in on_train_epoch_end"])
def test_a_lightning_checkpoint_continues_as_lightning_continues_it(saved: str, tmp_path: Path) -> None:
    """Lightning trains the autoencoder and saves at an epoch's end (`trainer.save_checkpoint`
    once fit returned, or from a callback's `on_train_epoch_end`, before the epoch counts as
    complete); our Trainer continuing that file reaches Lightning's own continuation."""
    first = run("autoencoder", "lightning", tmp_path / "first", max_epochs=2 if saved == "after fit" else 3,
                save_every_epoch_to=tmp_path / "saves")
    path = tmp_path / "after_fit.ckpt"
    if saved == "after fit":
        first["trainer"].save_checkpoint(path)
    else:
        path = tmp_path / "saves" / "epoch=1.ckpt"
    assert torch.load(path, weights_only=True)["global_step"] == 10
    ours = run("autoencoder", "ours", tmp_path, max_epochs=4, ckpt_path=str(path))
    theirs = run("autoencoder", "lightning", tmp_path, max_epochs=4, ckpt_path=str(path))
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert ours["trainer"].global_step == 20


def _our_autoencoder_checkpoint(tmp_path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    ours = run("autoencoder", "ours", tmp_path)
    path = tmp_path / "ours.ckpt"
    ours["trainer"].save_checkpoint(path)
    return ours["model"].state_dict(), path


class PlainAutoEncoder(torch.nn.Module):
    """The autoencoder's architecture as a plain module: no Lightning, no trainer."""

    def __init__(self, hidden_dim: int = 16) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 3))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(3, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 64))


def test_our_checkpoint_weights_load_into_a_plain_module(tmp_path: Path) -> None:
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    plain = PlainAutoEncoder()
    plain.load_state_dict(torch.load(path, weights_only=True)["state_dict"], strict=True)
    assert_same_weights(plain.state_dict(), weights)


def test_our_checkpoint_loads_through_lightnings_load_from_checkpoint(tmp_path: Path) -> None:
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    twin = load_project("autoencoder", "lightning").LitAutoEncoder.load_from_checkpoint(path)
    assert_same_weights(twin.state_dict(), weights)
    assert dict(twin.hparams) == {"hidden_dim": 16, "learning_rate": 1e-3}


def test_only_lightnings_version_key_is_missing_for_load_from_checkpoint(tmp_path: Path) -> None:
    """With that one key added, Lightning's load_from_checkpoint reads the rest of our file:
    the module built from the saved hyperparameters, then the weights."""
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    raw = torch.load(path, weights_only=True)
    raw["pytorch-lightning_version"] = "2.6.0"
    torch.save(raw, tmp_path / "with_version.ckpt")
    twin = load_project("autoencoder", "lightning").LitAutoEncoder.load_from_checkpoint(tmp_path / "with_version.ckpt")
    assert_same_weights(twin.state_dict(), weights)
    assert dict(twin.hparams) == {"hidden_dim": 16, "learning_rate": 1e-3}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_resume_from_last_checkpoint(precision: str, tmp_path: Path) -> None:
    """fit to epoch 2, a new model and Trainer continue from last.ckpt to epoch 4 (loader
    without shuffle): the weights, the StepLR, the top-2 files and the callback's state."""
    ours, theirs = both("resume", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    for key in ("files", "best", "best_score", "batches", "loaded", "lr"):
        assert ours[key] == theirs[key], key
    assert ours["loaded"] == {"batches": 16} and ours["batches"] == 32


def test_resume_with_shuffle_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    resumed = run("resume", "ours", tmp_path / "a", shuffle=True)
    whole = run("resume", "ours", tmp_path / "b", shuffle=True, stop_at=None)
    assert_same_weights(resumed["model"], whole["model"])
    theirs_whole = run("resume", "lightning", tmp_path / "c", shuffle=True, stop_at=None)
    assert_same_weights(whole["model"], theirs_whole["model"])


@pytest.mark.xfail(strict=True, reason="ours restores the random streams from its checkpoint (exact resume); "
                                       "Lightning does not, so a shuffled resume draws another order")
def test_resume_with_shuffle_matches_lightnings_resume(tmp_path: Path) -> None:
    ours, theirs = both("resume", tmp_path, shuffle=True)
    assert_same_weights(ours["model"], theirs["model"])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_checkpoint_cadence(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("checkpoint_cadence", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert_same_weights(ours["best_model"], theirs["best_model"])
    for key in ("best", "best_score", "last", "epoch_files", "step_files", "best_k", "extra", "raw_epoch", "raw_step",
                "loaded_extra", "seen"):
        assert ours[key] == theirs[key], key
    assert ours["step_files"] == sorted(f"step={s}.ckpt" for s in range(5, 36, 5))


def test_curriculum_in_datamodule_state_resumes(tmp_path: Path) -> None:
    """A DataModule's train_dataloader() runs after its load_state_dict on resume, as in Lightning."""
    ours, theirs = both("curriculum_resume", tmp_path)
    assert ours["first_call"] == theirs["first_call"] == "load_state_dict"
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
