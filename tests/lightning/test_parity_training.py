"""Typical projects train to Lightning's exact weights with only their imports changed.

Each project in tests/helpers/lightning_projects is written the Lightning way with our
imports; its Lightning twin is the same file with only the import lines rewritten. Both run
in this process on the same seed and data: every weight is compared with `torch.equal`, and
`global_step`, `current_epoch` and every metric Lightning reports (validation and test values
are epoch means computed in the same order by both, so they are compared exactly too). The
projects: Boring, a GAN, an autoencoder, a classifier with EarlyStopping and its best
checkpoint, a DQN, a small language model; and those combining features (torchmetrics with
OneCycleLR, a GAN with two schedulers, a seq2seq model with accumulation, a contrastive model
under bf16-mixed, a VAE with `load_from_checkpoint`, SWA over BatchNorm).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, load_project, run

pytest.importorskip("lightning")


#: Metrics logged per step inside an accumulation window: Lightning reports the last
#: micro-batch's value, ours the window's mean (docs/logging.md); test_step_metrics_... checks both.
WINDOW_MEAN = {"transformer_lm": {"train_loss"}}


def assert_same_project_run(name: str, ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Weights, steps, epochs, and the validation and test metrics Lightning reports."""
    assert_same_run(ours, theirs, stages=("val", "test"), skip=WINDOW_MEAN.get(name, set()))


CASES = [
    ("boring", "32-true"), ("boring", "bf16-mixed"),
    ("gan", "32-true"),
    ("autoencoder", "32-true"), ("autoencoder", "bf16-mixed"),
    ("classifier", "32-true"), ("classifier", "bf16-mixed"),
    ("dqn", "32-true"), ("dqn", "bf16-mixed"),
    ("transformer_lm", "32-true"), ("transformer_lm", "bf16-mixed"),
]


@pytest.mark.parametrize(("name", "precision"), CASES)
def test_same_weights_steps_and_metrics_as_lightning(name: str, precision: str, tmp_path: Path) -> None:
    ours = run(name, "ours", tmp_path, precision)
    theirs = run(name, "lightning", tmp_path, precision)
    assert_same_project_run(name, ours, theirs)


def test_16_mixed_on_cpu(tmp_path: Path) -> None:
    """On a CPU Lightning runs precision='16-mixed' as 'bf16-mixed' (with a warning); so do we."""
    with pytest.warns(UserWarning, match="on a CPU runs as 'bf16-mixed'"):
        ours = run("boring", "ours", tmp_path, "16-mixed")
    assert_same_project_run("boring", ours, run("boring", "lightning", tmp_path, "16-mixed"))


def test_gan_bf16_mixed(tmp_path: Path) -> None:
    """Lightning autocasts without the weight cache, and so does our 'bf16-mixed': the GAN
    uses its discriminator twice in one step, where the cache would change the last bits."""
    assert_same_project_run("gan", run("gan", "ours", tmp_path, "bf16-mixed"), run("gan", "lightning", tmp_path, "bf16-mixed"))


def test_gan_under_our_bf16_keeps_the_cache_and_differs_from_lightning(tmp_path: Path) -> None:
    """Our own 'bf16' is a hand-written loop's autocast (cache on): its weights are not
    Lightning's here, which is why Lightning's spelling turns the cache off."""
    ours, theirs = run("gan", "ours", tmp_path, "bf16"), run("gan", "lightning", tmp_path, "bf16-mixed")
    theirs_weights = theirs["model"].state_dict()
    assert any(not torch.equal(tensor, theirs_weights[name]) for name, tensor in ours["model"].state_dict().items())


def test_early_stopping_and_best_checkpoint_as_lightning(tmp_path: Path) -> None:
    """The classifier stops early (EarlyStopping's min_delta) at the same epoch and tests the
    same best checkpoint (`ckpt_path="best"`), named as Lightning names it."""
    ours, theirs = run("classifier", "ours", tmp_path), run("classifier", "lightning", tmp_path)
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch < ours["trainer"].max_epochs
    best_ours, best_theirs = ours["trainer"].checkpoint_callback, theirs["trainer"].checkpoint_callback
    assert Path(best_ours.best_model_path).name == Path(best_theirs.best_model_path).name
    assert float(best_ours.best_model_score) == float(best_theirs.best_model_score)
    assert ours["test"]["test_loss"] == float(theirs["test"]["test_loss"])


def test_step_metrics_under_accumulation_are_the_window_mean(tmp_path: Path) -> None:
    """A deliberate difference: `self.log(name, loss)` in training_step under accumulation
    reports the window's mean here, the last micro-batch's value in Lightning."""
    results, losses = {}, {}
    for framework in ("ours", "lightning"):
        module = load_project("transformer_lm", framework)
        seen: list[torch.Tensor] = []
        step = module.LanguageModel.training_step

        def recording(self: Any, batch: Any, batch_idx: int, step: Any = step, seen: list[torch.Tensor] = seen) -> Any:
            loss = step(self, batch, batch_idx)
            seen.append(loss.detach().clone())
            return loss

        module.LanguageModel.training_step = recording
        results[framework], losses[framework] = module.main(tmp_path / framework), seen
    assert all(torch.equal(a, b) for a, b in zip(losses["ours"], losses["lightning"], strict=True))
    last, before = losses["ours"][-1], losses["ours"][-2]
    assert float(results["lightning"]["val"]["train_loss"]) == last.item()
    assert results["ours"]["val"]["train_loss"] == torch.stack([before, last]).mean().item() != last.item()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_metrics_classifier(precision: str, tmp_path: Path) -> None:
    """torchmetrics objects in training_step and computed in on_validation_epoch_end,
    OneCycleLR sized by `self.trainer.estimated_stepping_batches` in configure_optimizers,
    EarlyStopping and a top-2 ModelCheckpoint on the torchmetrics value, a CSVLogger,
    LearningRateMonitor, then `trainer.test(ckpt_path="best")` without the model."""
    ours, theirs = run("metrics_classifier", "ours", tmp_path, precision), run("metrics_classifier", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert ours["trainer"].current_epoch < 6  # EarlyStopping ended it, in both
    assert ours["model"].hparams.total_steps is None and ours["trainer"].estimated_stepping_batches == 6 * 8
    assert_same_metrics(ours["val"], {k: v for k, v in theirs["val"].items() if not k.startswith("lr-")})
    assert_same_metrics(ours["test"], theirs["test"])
    mine, other = ours["checkpoint"], theirs["checkpoint"]
    assert Path(mine.best_model_path).name == Path(other.best_model_path).name
    assert float(mine.best_model_score) == float(other.best_model_score)
    # The files on disk (Lightning's best_k_models is rewound by test(ckpt_path=...), which
    # restores the callback's state from that file; ours is left as the fit ended it).
    assert sorted(p.name for p in Path(mine.dirpath).iterdir()) == sorted(p.name for p in Path(other.dirpath).iterdir())


#: Beside weights, steps and `callback_metrics`: what else each project returns to compare.
EXTRA = {"gan_schedule": ("lrs",), "seq2seq": ("validate",), "contrastive": ("lr",)}


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_gan_seq2seq_and_contrastive(name: str, precision: str, tmp_path: Path) -> None:
    """A GAN with two schedulers, a seq2seq model with padding and accumulation, a contrastive model."""
    ours, theirs = run(name, "ours", tmp_path, precision), run(name, "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    for key in EXTRA[name]:
        if isinstance(theirs[key], dict):
            assert_same_metrics(ours[key], theirs[key])
        else:
            assert ours[key] == theirs[key]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_vae_and_its_best_checkpoint(precision: str, tmp_path: Path) -> None:
    ours, theirs = run("vae", "ours", tmp_path, precision), run("vae", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert Path(ours["checkpoint"].best_model_path).name == Path(theirs["checkpoint"].best_model_path).name
    assert_same_weights(ours["best"], theirs["best"])


def test_swa_over_batchnorm(tmp_path: Path) -> None:
    """Lightning's SWA adds one epoch (and counts one step) for its BatchNorm pass; the
    weights, and what `validate` reports with them, are the same (docs/weight_averaging.md).
    Norm clipping: with clip by value Lightning's BatchNorm pass fails on torch 2.13
    (`clip_grad_value_` over no gradients), where ours runs (next test)."""
    ours = run("swa_batchnorm", "ours", tmp_path, clip_algorithm="norm")
    theirs = run("swa_batchnorm", "lightning", tmp_path, clip_algorithm="norm")
    assert_same_run(ours, theirs, steps_differ_by=1)
    assert_same_metrics(ours["validate"], theirs["validate"])


def test_swa_with_value_clipping_runs(tmp_path: Path) -> None:
    result = run("swa_batchnorm", "ours", tmp_path)
    assert result["trainer"].current_epoch == 5 and result["validate"]["val_mse"] > 0
    assert (tmp_path / "ours" / "csv" / "version_0" / "metrics.csv").read_text().count("\n") > 30  # log_every_n_steps=1
