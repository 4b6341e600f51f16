"""Lightning's own example scripts and tutorials, moved over by their imports, train to
Lightning's weights: each is a project in tests/helpers/lightning_projects (small data, the
datasets torchvision would download replaced by synthetic tensors of the same shapes), trained
under both frameworks in this process and compared: weights (`torch.equal`), `global_step`,
`current_epoch`, the metrics after fit and the test/validate results."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.csv_compare import as_lightning_writes
from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both

pytest.importorskip("lightning")


def test_the_names_lightnings_example_scripts_import(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from lightning.pytorch.utilities import imports as their_imports

    import trainer
    from trainer import DataModule, Module, cli_lightning_logo
    from trainer.core import LightningDataModule, LightningModule
    from trainer.utilities import imports

    assert LightningModule is Module and LightningDataModule is DataModule
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        trainer.core.Nothing  # noqa: B018
    for name in ("_TORCHVISION_AVAILABLE", "_OMEGACONF_AVAILABLE", "_RICH_AVAILABLE"):
        assert getattr(imports, name) is bool(getattr(their_imports, name))
    assert imports._TORCHVISION_AVAILABLE is (importlib.util.find_spec("torchvision") is not None)
    cli_lightning_logo()
    assert trainer.__version__ in capsys.readouterr().out


def test_mnist_gan_template_on_the_demo_datamodule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The template's imports (`cli_lightning_logo`, `trainer.core.LightningModule`,
    `trainer.trainer.Trainer`, `_TORCHVISION_AVAILABLE`) resolve; both train alike."""
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")  # the project sets it; restored after the test
    ours, theirs = both("mnist_gan", tmp_path)
    assert_same_run(ours, theirs, stages=("val",))
    assert {"d_loss", "g_loss"} <= set(theirs["val"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == 2 * 2 * 2  # two optimizers' steps


def test_mnist_hello_world(tmp_path: Path) -> None:
    ours, theirs = both("mnist_hello_world", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert {"val_loss", "val_acc"} <= set(theirs["val"]) and {"test_loss", "test_acc"} <= set(theirs["test"])
    assert_same_weights(ours["simple"], theirs["simple"])
    assert ours["simple_step"] == theirs["simple_step"] == 2 * 5
    assert ours["fitted_step"] == theirs["fitted_step"] == ours["trainer"].global_step == 2 * 4
    mine, other = as_lightning_writes(ours["metrics_csv"], theirs["metrics_csv"], ours["trainer"].current_epoch)
    assert mine == other


def test_barlow_twins(tmp_path: Path) -> None:
    ours, theirs = both("barlow_twins", tmp_path)
    assert "online_finetuner.weight" in ours["model"].state_dict()
    assert_same_run(ours, theirs, stages=("val",))
    assert {"val_loss", "online_val_acc", "online_train_loss"} <= set(theirs["val"])
    # ModelCheckpoint's files (the run folders' names differ: `default/` here, `lightning_logs/`
    # there; the Trainer's own `last.ckpt` beside them is ours only, docs/checkpoints.md)
    assert ours["checkpoints"] == theirs["checkpoints"] == ["epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "last.ckpt"]


def test_cifar10_baseline_and_its_swa_model(tmp_path: Path) -> None:
    ours, theirs = both("cifar10_baseline", tmp_path)
    assert_same_weights(ours["base"], theirs["base"])
    assert ours["base_step"] == theirs["base_step"] == 2 * 5
    assert_same_metrics(ours["base_val"], theirs["base_val"])
    assert_same_metrics(ours["base_test"], theirs["base_test"])
    mine, other = as_lightning_writes(ours["metrics_csv"], theirs["metrics_csv"], ours["base_epochs"])
    assert "lr-SGD" in other and mine == other
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert "swa_model.n_averaged" in ours["model"].state_dict()
    # the parent's save_hyperparameters() also collects the subclass's `trained_model` (a module:
    # each run's own object), in both
    assert list(ours["hparams"]) == list(theirs["hparams"]) == ["lr", "trained_model"]
    assert ours["hparams"]["lr"] == theirs["hparams"]["lr"] == 0.01


def test_the_basic_transformer_example_on_the_demo_classes(tmp_path: Path) -> None:
    ours, theirs = both("demo_transformer", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert {"train_loss", "val_loss"} <= set(theirs["val"]) and "test_loss" in theirs["test"]
    assert ours["trainer"].global_step == 2 * ours["batches"] > 0


def test_the_autoencoder_example_through_lightning_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")  # the project sets it; restored after the test
    ours, theirs = both("cli_autoencoder", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert {"train_loss", "val_loss_epoch"} <= set(theirs["val"]) and "test_loss_epoch" in theirs["test"]
    assert ours["trainer"].global_step == 2 * 4
    assert len(ours["predictions"]) == len(theirs["predictions"]) == 1
    assert torch.equal(ours["predictions"][0], theirs["predictions"][0])
    assert len(ours["generated"]) == len(theirs["generated"]) == 2
    assert all(torch.equal(a, b) for a, b in zip(ours["generated"], theirs["generated"]))


def test_the_datamodules_tutorial(tmp_path: Path) -> None:
    ours, theirs = both("datamodules_tutorial", tmp_path)
    assert_same_run(ours, theirs, stages=("val",))
    for (model, step, metrics), (their_model, their_step, their_metrics) in zip(ours["runs"], theirs["runs"]):
        assert_same_weights(model, their_model)
        assert step == their_step == 3
        assert_same_metrics(metrics, their_metrics)
        assert {"val_loss", "val_acc"} <= set(their_metrics)


def test_the_backbone_classifier_example_through_lightning_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")  # the project sets it; restored after the test
    ours, theirs = both("cli_backbone", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    assert {"train_loss_epoch", "valid_loss_epoch"} <= set(theirs["val"]) and "test_loss" in theirs["test"]
    # `backbone` ignored; Lightning's CLI adds its own "_instantiator" (a path into its package)
    assert ours["hparams"] == {k: v for k, v in theirs["hparams"].items() if k != "_instantiator"} == {"learning_rate": 0.0001}
    assert len(ours["predictions"]) == len(theirs["predictions"]) == 1
    assert torch.equal(ours["predictions"][0], theirs["predictions"][0])
