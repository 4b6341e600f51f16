"""Real Lightning projects nobody here wrote, with only their imports changed
(tests/helpers/lightning_projects/real_*.py; each cites its source and what was shrunk or
substituted), trained under this package and under Lightning 2.6 in one process and compared
with `torch.equal`: weights, counters, `callback_metrics`, what validate/test return, the
learning rates the schedulers set, and what the projects' own callbacks record.

Accounted for (docs/lightning.md): `validate`/`test` with one loader return the dict itself
(Lightning: a one-item list); our own `train/*` scalars join `callback_metrics` and
`logged_metrics` (`lightnings_values` compares what Lightning reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_run, both, lightnings_values

pytest.importorskip("lightning")


def metrics(values: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in values.items()}


# --------------------------------------------------------- a hand-stepped scheduler, log_graph
@pytest.mark.parametrize("scheduler", ["exponential", "plateau"])
def test_manual_predictor_steps_its_scheduler_by_hand(tmp_path: Path, scheduler: str) -> None:
    ours, theirs = both("real_bnn_predictor", tmp_path, scheduler=scheduler)
    assert_same_run(ours, theirs, stages=("val",))
    lightnings_values(metrics(ours["trainer"].callback_metrics), metrics(theirs["trainer"].callback_metrics))
    assert ours["validate"] == theirs["validate"][0]
    assert ours["lrs"] == theirs["lrs"] and ours["lr"] == theirs["lr"]
    assert len(ours["lrs"]) == ours["trainer"].current_epoch


# ------------------------------------- two optimizers by hand, grad_norm, clip_gradients, plateau
def test_two_optimizer_manual_model_with_grad_norms_and_a_hand_stepped_plateau(tmp_path: Path) -> None:
    ours, theirs = both("real_spiking_ar", tmp_path)
    assert_same_run(ours, theirs, stages=("val", "test"))
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert any(key.startswith("grad_2.0_norm") for key in theirs["val"])  # grad_norm's keys were logged
    assert ours["test"] == theirs["test"]
    assert ours["picked"] == theirs["picked"]  # validation's torch.randint drew the same numbers
    assert ours["lrs"] == theirs["lrs"]


# ------------------------------------------------------------------------------ kraken's harness
def test_kraken_trainer_subclass_freezes_by_step_and_saves_per_validation(tmp_path: Path) -> None:
    ours, theirs = both("real_kraken", tmp_path)
    assert_same_run(ours, theirs, stages=("val",))
    assert ours["saved"] == theirs["saved"] == [f"model_{epoch}.mlmodel" for epoch in range(4)]
    assert ours["metadata"]["accuracy"] == theirs["metadata"]["accuracy"]
    assert ours["one_channel_mode"] == theirs["one_channel_mode"] == "L"
    assert ours["lrs"] == theirs["lrs"]  # the warmup, then the plateau on is_last_batch
    assert ours["groups"] == theirs["groups"] and ours["param_groups"] == theirs["param_groups"]
    # What KrakenSaveModel read of trainer.logged_metrics at each validation's end: Lightning's
    # values, except the training epoch's own means (see the xfail below).
    for (step, mine), (their_step, other) in zip(ours["metadata"]["metrics"], theirs["metadata"]["metrics"], strict=True):
        assert step == their_step
        lightnings_values(mine, {k: v for k, v in other.items() if not k.endswith("_epoch")})


@pytest.mark.xfail(strict=True, reason="the training epoch's on_epoch means close before its epoch-end validation "
                   "here (Lightning: after it, so validation hooks see the previous epoch's); moving them needs "
                   "EarlyStopping's Lightning default moment (check at the training epoch's end) first")
def test_kraken_validation_end_sees_the_previous_epochs_training_means(tmp_path: Path) -> None:
    ours, theirs = both("real_kraken", tmp_path, max_epochs=2)
    assert [dict(m) for _, m in ours["metadata"]["metrics"]] == [
        {**m, **{k: v for k, v in mine.items() if k.startswith("train/")}}
        for (_, m), (_, mine) in zip(theirs["metadata"]["metrics"], ours["metadata"]["metrics"])]


def test_lightning_attribute_paths_under_the_package_alias() -> None:
    """`import lightning as L` then `L.pytorch.Trainer`, `L.pytorch.loggers.TensorBoardLogger`,
    `L.pytorch.loggers.logger.Logger` (kraken writes all three)."""
    import trainer as L

    assert L.pytorch is L and L.pytorch.Trainer is L.Trainer
    assert L.pytorch.loggers.TensorBoardLogger is L.loggers.TensorBoardLogger
    assert isinstance(L.pytorch.loggers.CSVLogger("unused"), L.pytorch.loggers.logger.Logger)
    assert not isinstance("tensorboard", L.pytorch.loggers.logger.Logger)


def test_base_finetuning_store_records_groups_added_outside_an_epoch_start() -> None:
    """Lightning's `BaseFinetuning._store`: all groups the first time, then only the new ones."""
    from callbacks import BaseFinetuning

    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    BaseFinetuning.freeze(module[0])
    optimizer = torch.optim.SGD(module[1].parameters(), lr=0.1)
    finetune = BaseFinetuning()
    finetune._store(module, 0, 1, optimizer.param_groups)
    BaseFinetuning.unfreeze_and_add_param_group(module[0], optimizer, lr=0.01)
    finetune._store(module, 0, 1, optimizer.param_groups)
    groups = finetune.state_dict()["internal_optimizer_metadata"][0]
    assert [(g["params"], g["lr"]) for g in groups] == [(["1.weight", "1.bias"], 0.1), (["0.weight", "0.bias"], 0.01)]
