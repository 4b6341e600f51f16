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
    # values, the previous epoch's training means included (none at the first).
    for (step, mine), (their_step, other) in zip(ours["metadata"]["metrics"], theirs["metadata"]["metrics"], strict=True):
        assert step == their_step
        lightnings_values(mine, other)


def test_kraken_validation_end_sees_the_previous_epochs_training_means(tmp_path: Path) -> None:
    """The epoch-end validation runs before the training epoch's on_epoch means close, as in
    Lightning: its hooks read the previous epoch's in logged_metrics/callback_metrics."""
    ours, theirs = both("real_kraken", tmp_path, max_epochs=2)
    first, second = (dict(m) for _, m in theirs["metadata"]["metrics"])
    assert "train_loss_epoch" not in first and "train_loss_epoch" in second
    assert [{k: v for k, v in m.items() if not k.startswith("train/")} for _, m in ours["metadata"]["metrics"]] == [first, second]


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


# ------------------------------------------- IIC deep clustering: OneCycleLR, one name, two stages
def test_deep_cluster_onecycle_over_estimated_stepping_batches_and_predict(tmp_path: Path) -> None:
    ours, theirs = both("real_deep_cluster", tmp_path)
    assert_same_run(ours, theirs, stages=("val",))  # 'train_loss' holds validation's value in both
    assert ours["lrs"] == theirs["lrs"] and len(ours["lrs"]) == 8 * 3  # OneCycleLR ran to its last step
    assert len(ours["predictions"]) == len(theirs["predictions"]) == 2
    for mine, other in zip(ours["predictions"], theirs["predictions"], strict=True):
        assert len(mine) == len(other) == 2 and all(torch.equal(a, b) for a, b in zip(mine, other, strict=True))


SAME_NAME = '''
import torch
import trainer as L
from torch.utils.data import DataLoader, TensorDataset
from trainer.loggers import CSVLogger


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        self.log("score", 100.0 + self.global_step)
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("score", float(batch_idx))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root, log_every_n_steps):
    L.seed_everything(1)
    data = DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=8)
    trainer = L.Trainer(max_epochs=2, logger=CSVLogger(root), log_every_n_steps=log_every_n_steps,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        num_sanity_val_steps=0)
    trainer.fit(Model(), data, data)
    return {k: float(v) for k, v in trainer.callback_metrics.items()}, {k: float(v) for k, v in trainer.logged_metrics.items()}
'''


@pytest.mark.parametrize("log_every_n_steps", [1, 4])
def test_a_name_logged_by_training_and_validation_ends_fit_with_validations_value(tmp_path: Path, log_every_n_steps: int) -> None:
    """The last training step, written after the epoch's validation when it fell between two
    logging steps, leaves the validation's value of the same name in callback_metrics and
    logged_metrics, as Lightning (which never writes that step) does."""
    from tests.helpers.lightning_projects import load_source

    ours = load_source(SAME_NAME, "ours", "same_name").main(tmp_path / "ours", log_every_n_steps)
    theirs = load_source(SAME_NAME, "lightning", "same_name").main(tmp_path / "lightning", log_every_n_steps)
    assert theirs[0]["score"] == 1.0  # validation's mean over its three batches (0, 1, 2)
    lightnings_values(ours[0], theirs[0])
    lightnings_values(ours[1], theirs[1])


# ---------------------------------------------- a denoiser with EMA weight averaging and train/* names
def test_denoiser_with_ema_weight_averaging_and_its_own_train_names(tmp_path: Path) -> None:
    ours, theirs = both("real_denoiser_ema", tmp_path)
    assert_same_run(ours, theirs, stages=("val",))  # the weights fit leaves: the EMA's, in both
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"train/total_loss", "train/lr", "grad_l2_norm"} <= set(theirs["val"])  # the project's own train/* names
    # (after fit, `_average_model` holds the training weights here, kept aside for a later fit;
    # Lightning's holds the average again: its private state, not compared)
    assert ours["grad_norms"] == theirs["grad_norms"] and len(ours["grad_norms"]) == 2  # steps 0 and 10
    assert len(ours["samples"]) == len(theirs["samples"]) == 3  # steps 5, 10, 15: the callback's torch.randn draws, in the same place
    assert all(torch.equal(a, b) for a, b in zip(ours["samples"], theirs["samples"], strict=True))



STOPPING = '''
import torch
import trainer as L
from callbacks import EarlyStopping
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.losses = []

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss + self.current_epoch, on_step=False, on_epoch=True)
        self.losses.append(loss.detach())
        return loss

    def on_train_epoch_end(self):
        self.log("epoch_loss", torch.stack(self.losses).mean() + self.current_epoch)
        self.losses.clear()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root, monitor, validate):
    L.seed_everything(1)
    data = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)
    trainer = L.Trainer(max_epochs=6, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, callbacks=[EarlyStopping(monitor, patience=1)])
    trainer.fit(Model(), data, data if validate else None)
    return trainer.current_epoch, trainer.global_step
'''


@pytest.mark.parametrize(("monitor", "validate"), [("epoch_loss", True), ("train_loss", True), ("train_loss", False)])
def test_early_stopping_checks_where_lightning_does_by_default(tmp_path: Path, monitor: str, validate: bool) -> None:
    """Without check_on_train_epoch_end, EarlyStopping checks after the training epoch when
    validation runs at every epoch's end (or not at all), as Lightning: a monitor logged in
    `on_train_epoch_end`, or a training epoch mean, stops the run at Lightning's epoch."""
    from tests.helpers.lightning_projects import load_source

    ours = load_source(STOPPING, "ours", "stopping").main(tmp_path / "ours", monitor, validate)
    theirs = load_source(STOPPING, "lightning", "stopping").main(tmp_path / "lightning", monitor, validate)
    assert theirs[0] < 6  # it stopped early
    assert ours == theirs


def same(a: Any, b: Any) -> bool:
    """Nested lists/dicts of tensors and plain values, equal with `torch.equal` at the leaves."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


# ------------------------------------------------------------------------- two prediction writers
def test_prediction_writers_save_what_lightnings_save(tmp_path: Path) -> None:
    ours, theirs = both("real_prediction_writers", tmp_path)
    assert_same_run(ours, theirs)
    assert len(theirs["returned"]) == 3 and same(ours["returned"], theirs["returned"])  # predict's return value
    assert list(theirs["saved"]) == ["batch_indices_0.pt", "predictions_0.pt"]
    assert same(ours["saved"], theirs["saved"])  # write_on_epoch_end's predictions and batch_indices
    assert len(theirs["cases"]) == 24 and same(ours["cases"], theirs["cases"])  # one pair of files per case
    assert ours["none_returned"] is None and theirs["none_returned"] is None
