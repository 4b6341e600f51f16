"""The Hydra-style project (tests/helpers/lightning_projects/hydra_config.py): callbacks,
logger and Trainer built from `_target_` paths with every argument written out, Lightning's
defaults included; with only its import lines changed it gives Lightning's weights, steps,
checkpoint files, best checkpoint, `callback_metrics`, hyperparameters and `metrics.csv`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.csv_compare import as_lightning_writes
from tests.helpers.lightning_projects import load_project

pytest.importorskip("lightning")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp("hydra")
    return (load_project("hydra_config", "ours").main(root / "ours"),
            load_project("hydra_config", "lightning").main(root / "lightning"))


def test_the_config_builds_our_classes_from_lightnings_arguments(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert [type(c).__name__ for c in ours["callbacks"]] == [type(c).__name__ for c in theirs["callbacks"]]
    assert all(type(c).__module__.split(".")[0] == "callbacks" for c in ours["callbacks"])
    assert type(ours["trainer"]).__module__.startswith("trainer")


def test_weights_steps_and_hyperparameters_are_lightnings(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert list(ours["trained"]) == list(theirs["trained"])
    different = [k for k in ours["trained"] if not torch.equal(ours["trained"][k], theirs["trained"][k])]
    assert not different, different
    assert (ours["trainer"].global_step, ours["trainer"].current_epoch) == \
           (theirs["trainer"].global_step, theirs["trainer"].current_epoch)
    assert dict(ours["model"].hparams) == dict(theirs["model"].hparams)
    for key in ours["model"].state_dict():  # test() loaded the best checkpoint in both
        assert torch.equal(ours["model"].state_dict()[key], theirs["model"].state_dict()[key]), key


def test_checkpoint_files_and_the_best_are_lightnings(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert ours["files"] == theirs["files"] and len(ours["files"]) == 3  # top 2 and last.ckpt
    assert Path(ours["checkpoint"].best_model_path).name == Path(theirs["checkpoint"].best_model_path).name
    assert float(ours["checkpoint"].best_model_score) == float(theirs["checkpoint"].best_model_score)
    assert {Path(p).name: float(v) for p, v in ours["checkpoint"].best_k_models.items()} == \
           {Path(p).name: float(v) for p, v in theirs["checkpoint"].best_k_models.items()}


def test_callback_metrics_after_fit_and_test_are_lightnings(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Lightning's keys with Lightning's values (ours also holds the Trainer's own
    `train/...` scalars, docs/lightning.md)."""
    ours, theirs = runs
    assert {k: ours["fit_values"].get(k) for k in theirs["fit_values"]} == theirs["fit_values"]
    assert {"val/acc_best", "lr-Adam", "train/nll"} <= set(theirs["fit_values"])
    test = {k: v for k, v in theirs["metric_dict"].items() if k.startswith("test/")}
    assert test and {k: ours["metric_dict"].get(k) for k in test} == test


def test_metrics_csv_is_lightnings(runs: tuple[dict[str, Any], dict[str, Any]]) -> None:
    ours, theirs = runs
    assert ours["log_dir"].relative_to(ours["log_dir"].parents[1]) == theirs["log_dir"].relative_to(theirs["log_dir"].parents[1])
    mine, other = as_lightning_writes((ours["log_dir"] / "metrics.csv").read_text(),
                                      (theirs["log_dir"] / "metrics.csv").read_text(),
                                      epochs_fitted=theirs["trainer"].current_epoch)
    assert mine == other
    # (hparams.yaml: written here with the run's config in any case, docs: save_hyperparameters(logger=False))
    assert [p.name for p in ours["log_dir"].glob("*.csv")] == [p.name for p in theirs["log_dir"].glob("*.csv")]
