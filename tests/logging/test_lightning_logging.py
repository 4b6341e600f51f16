"""`self.log` as Lightning defines it: step/epoch naming, batch-size weighted epoch means,
`log_dict`, `reduce_fx`, `logger=False`. Each test names the Lightning behaviour
it matches (tests/tests_pytorch/trainer/logging_/test_train_loop_logging.py and
test_eval_loop_logging.py in Lightning's repository)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer

QUIET = dict(enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class Logs(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = self.net(x).pow(2).mean()
        self.log("both", float(batch_idx), on_step=True, on_epoch=True)  # epoch mean of 0..3 = 1.5
        self.log_dict({"d/a": 1.0, "d/b": 2.0})
        self.log("peak", float(batch_idx), on_epoch=True, on_step=False, reduce_fx=torch.max)
        self.log("private", 7.0, logger=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val/score", x.mean())  # no batch_size: weighted by the batch's size

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def tags(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def fit(tmp_path: Path) -> Trainer:
    train = DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2)  # 4 batches
    # Validation batches of 2, 2 and 1 samples with values 1, 1 and 0.
    val = DataLoader(TensorDataset(torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0]])), batch_size=2)
    trainer = Trainer(max_epochs=1, log_every_n_steps=1, root_dir=tmp_path, **QUIET)
    trainer.fit(Logs(), train, val)
    return trainer


def test_on_step_and_on_epoch_write_name_step_and_name_epoch(tmp_path: Path):
    """Lightning: `name_step` per step, `name_epoch` per epoch, callback_metrics[name] the
    epoch value after the epoch (test_train_loop_logging.py::test__training_step__log)."""
    trainer = fit(tmp_path)
    series = tags(trainer.log_dir)
    assert [v for _, v in series["both_step"]] == [0.0, 1.0, 2.0, 3.0]
    assert [v for _, v in series["both_epoch"]] == [1.5]
    assert "both" not in series
    metrics = trainer.callback_metrics
    assert metrics["both"] == metrics["both_epoch"] == 1.5 and metrics["both_step"] == 3.0


def test_epoch_means_are_weighted_by_the_inferred_batch_size(tmp_path: Path):
    """Lightning infers the batch size: batches of 2, 2, 1 with values 1, 1, 0 give 0.8
    (test_eval_loop_logging.py, the weighted-mean cases)."""
    assert fit(tmp_path).callback_metrics["val/score"] == pytest.approx(0.8)  # float32 on the device


def test_log_dict_reduce_fx_and_logger_false(tmp_path: Path):
    trainer = fit(tmp_path)
    series = tags(trainer.log_dir)
    metrics = trainer.callback_metrics
    assert metrics["d/a"] == 1.0 and metrics["d/b"] == 2.0 and "d/a" in series
    assert metrics["peak"] == 3.0  # torch.max over the epoch
    assert metrics["private"] == 7.0 and "private" not in series  # logger=False


def test_reduce_fx_that_we_do_not_know_is_refused():
    import pytest

    class Odd(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("x", 1.0, reduce_fx=torch.median)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="reduce_fx"):
        Trainer(max_steps=1, logger=False, **QUIET).fit(Odd(), DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))


def test_a_run_shorter_than_log_every_n_steps_writes_its_last_step_and_warns_of_nothing(tmp_path: Path, caplog):
    """Lightning warns that such a run logs no training scalar; here its last step is written
    (as in the README's first example), so there is nothing to warn about."""
    train = DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2)
    with caplog.at_level("WARNING", logger="trainer"):
        trainer = Trainer(max_epochs=3, accumulate_grad_batches=2, root_dir=tmp_path, **QUIET)
        trainer.fit(Logs(), train)
    assert caplog.records == [], caplog.text
    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [6] == [trainer.global_step]
    assert [e.step for e in events.Scalars("d/a")] == [6]


class ManualLogsOnly(Module):
    """Manual optimization whose training_step logs but returns nothing (common Lightning GAN code)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(1, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        opt = self.optimizers()
        loss = self.net(x).pow(2).mean()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log("manual/loss", loss)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_last_step_of_a_manual_run_that_returns_nothing_is_written(tmp_path: Path):
    trainer = Trainer(max_epochs=1, log_every_n_steps=50, root_dir=tmp_path, **QUIET)
    trainer.fit(ManualLogsOnly(), DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2))
    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("manual/loss")] == [4] == [trainer.global_step]
    assert "train/loss" not in events.Tags()["scalars"]  # nothing returned: no automatic loss


class Forked(Logs):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("acc", float(batch_idx), on_step=True, on_epoch=True, prog_bar=True)
        self.log("quiet", 1.0, on_step=True, on_epoch=True, logger=False)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val/f", x.mean(), on_step=True, on_epoch=True, prog_bar=True)


def test_forked_metrics_follow_prog_bar_and_logger_false(tmp_path: Path):
    """Lightning (test_train_loop_logging.py::test__training_step__log): with both flags,
    `prog_bar=True` shows `name_step` during the epoch and `name_epoch` after it
    (progress_bar_metrics == {"p_se_step", "p_se_epoch", ...}), and `logger=False` keeps
    both `name_step` and `name_epoch` out of the logger (logged_metrics has neither)."""
    train = DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2)
    val = DataLoader(TensorDataset(torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0]])), batch_size=2)
    trainer = Trainer(max_epochs=1, log_every_n_steps=1, root_dir=tmp_path, **QUIET)
    trainer.fit(Forked(), train, val)
    bar = trainer.progress_bar_metrics
    assert bar["acc_step"] == 3.0 and bar["acc_epoch"] == 1.5 and bar["val/f_epoch"] == pytest.approx(0.8)
    series = tags(trainer.log_dir)
    assert not {"quiet", "quiet_step", "quiet_epoch"} & set(series) and "acc_step" in series
    assert trainer.callback_metrics["quiet"] == 1.0


@pytest.mark.parametrize("reduce_fx", [max, "MAX"])
def test_reduce_fx_spellings_lightning_accepts(reduce_fx: Any):
    """Lightning's _Metadata._parse_reduce_fx takes Python's max/min/sum and any case of the
    names (its test_tqdm_progress_bar.py logs with `reduce_fx=max`)."""
    class Peak(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("top", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=reduce_fx)
            return super().training_step(batch, batch_idx)

    trainer = Trainer(max_epochs=1, logger=False, **QUIET)
    trainer.fit(Peak(), DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2))
    assert trainer.callback_metrics["top"] == 3.0


def test_log_with_neither_step_nor_epoch_is_refused():
    """Lightning raises "`self.log(on_step=False, on_epoch=False)` is not useful"
    (test_train_loop_logging.py and test_eval_loop_logging.py, `match="is not useful"`)."""
    class Nothing(Logs):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("x", 1.0, on_step=False, on_epoch=False)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="on_step=False, on_epoch=False"):
        Trainer(max_steps=1, logger=False, **QUIET).fit(Nothing(), DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
