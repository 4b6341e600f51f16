"""Lightning's validation cadence and limits (val_check_interval, check_val_every_n_epoch,
num_sanity_val_steps, limit_*_batches, fast_dev_run, min/max epochs, steps and time), and
exact resume around validation: a run stopped during or right after a validation resumes to
the weights of one that never stopped (with validation drawing from the random streams, the
default, and with `isolate_validation_rng=True`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, assert_same_weights, make_data
from trainer import Callback, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


class Counting(TinyNet):
    """Records the global step at every (non-sanity) validation."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validated_at: list[tuple[int, int]] = []
        self.val_batches = 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        if not self.trainer.sanity_checking:
            self.val_batches += 1

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return batch_idx

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validated_at.append((self.trainer.current_epoch, self.trainer.global_step))


def train_loader() -> DataLoader:
    return DataLoader(make_data(40), batch_size=4, shuffle=True)  # 10 batches


def val_loader() -> DataLoader:
    return DataLoader(make_data(16, seed=3), batch_size=4, shuffle=True)  # 4 batches; shuffling draws


def fit(epochs: int = 2, val: bool = True, **kwargs: Any) -> tuple[Counting, Trainer]:
    torch.manual_seed(0)
    model = Counting()
    torch.manual_seed(1)
    trainer = Trainer(max_epochs=epochs, **{**QUIET, **kwargs})
    trainer.fit(model, train_loader(), val_loader() if val else None)
    return model, trainer


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_isolated_validation_changes_no_weight(precision):
    with_val, _ = fit(precision=precision, val_check_interval=3, num_sanity_val_steps=2, limit_val_batches=0.5,
                      isolate_validation_rng=True)
    without, _ = fit(precision=precision, val=False)
    assert_same_weights(with_val, without)
    assert with_val.validated_at == [(0, 3), (0, 6), (0, 9), (1, 13), (1, 16), (1, 19)]
    assert with_val.val_batches == 6 * 2  # limit_val_batches=0.5 of 4 batches


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, [(0, 10), (1, 20)]),  # the default: every epoch's end
        ({"val_check_interval": 0.25}, [(0, 2), (0, 4), (0, 6), (0, 8), (0, 10), (1, 12), (1, 14), (1, 16), (1, 18), (1, 20)]),
        ({"val_check_interval": 5}, [(0, 5), (0, 10), (1, 15), (1, 20)]),
        ({"check_val_every_n_epoch": 2}, [(1, 20)]),
        ({"val_check_interval": 4, "check_val_every_n_epoch": None}, [(0, 4), (0, 8), (1, 12), (1, 16), (1, 20)]),
        ({"val_check_interval": 3, "accumulate_grad_batches": 2}, [(0, 2), (0, 3), (0, 5), (1, 7), (1, 8), (1, 10)]),
    ],
    ids=["default", "fraction", "int", "every-2-epochs", "run-wide", "step-boundary"],
)
def test_when_validation_runs(kwargs, expected):
    """Lightning's tests/tests_pytorch/trainer/flags/test_val_check_interval.py counts the
    same validations for fractions and ints; with accumulation ours wait for the step."""
    model, _ = fit(**kwargs)
    assert model.validated_at == expected


def test_an_interval_longer_than_the_epoch_is_refused():
    with pytest.raises(ValueError, match="val_check_interval=11") as caught:
        fit(val_check_interval=11)
    assert "check_val_every_n_epoch=None" in str(caught.value)


def test_sanity_check_is_neither_logged_nor_seen_by_callbacks():
    seen: list[bool] = []

    class Watch(Callback):
        def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
            seen.append(trainer.sanity_checking)

    model, trainer = fit(epochs=1, check_val_every_n_epoch=2, num_sanity_val_steps=-1, callbacks=[Watch()])
    assert seen == [True] and model.validated_at == []
    assert "val/loss" not in trainer.callback_metrics


def test_limits():
    model, trainer = fit(epochs=2, limit_train_batches=3, limit_val_batches=1)
    assert trainer.global_step == 6 and model.val_batches == 2
    model, trainer = fit(epochs=1, limit_train_batches=0.55, val=False)  # int(10 * 0.55) = 5
    assert trainer.global_step == 5
    _, trainer = fit(epochs=1, limit_val_batches=0)
    assert "val/loss" not in trainer.callback_metrics
    with pytest.raises(ValueError, match="test_step"):  # Counting has no test_step: refused, as Lightning does
        Trainer(limit_test_batches=2, **QUIET).test(Counting(), val_loader())
    predictions = Trainer(limit_predict_batches=0.5, **QUIET).predict(Counting(), val_loader())
    assert len(predictions) == 2


def test_fast_dev_run_writes_nothing(tmp_path: Path):
    model = Counting()
    trainer = Trainer(fast_dev_run=2, root_dir=tmp_path, enable_progress_bar=False, max_epochs=7)
    trainer.fit(model, train_loader(), val_loader())
    assert trainer.global_step == 2 and model.val_batches == 2 and trainer.current_epoch == 1
    assert list(tmp_path.iterdir()) == []


def test_fast_dev_run_still_validates_the_arguments_first():
    with pytest.raises(ValueError, match="max_epochs"):
        Trainer(fast_dev_run=True, max_epochs=-3)


def test_min_epochs_holds_a_stop_request_back():
    class StopAtOnce(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            trainer.request_stop()

    _, trainer = fit(epochs=5, min_epochs=2, callbacks=[StopAtOnce()], val=False)
    assert trainer.current_epoch == 2 and trainer.global_step == 20
    _, trainer = fit(epochs=5, min_steps=13, callbacks=[StopAtOnce()], val=False)
    assert trainer.global_step == 13


def test_max_time_stops_after_a_step(monkeypatch):
    clock = [0.0]
    import trainer.loops.state as optim

    monkeypatch.setattr(optim.time, "monotonic", lambda: clock[0])

    class Tick(Callback):
        def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
            clock[0] += 10.0  # every optimizer step "takes" ten seconds

    _, trainer = fit(epochs=None, max_time={"minutes": 1}, callbacks=[Tick()], val=False)
    assert trainer.global_step == 6 and trainer.state.elapsed == 60.0
    with pytest.raises(ValueError, match="max_time"):
        Trainer(max_time="an hour")
    for wrong in ("an hour", {"seconds": 0}):
        with pytest.raises(ValueError) as error:
            Trainer(max_time=wrong)
        assert str(error.value).count("Received") == 1 and repr(wrong) in str(error.value)
    assert Trainer(max_time="00:01:00:00").args.max_time == "00:01:00:00"


def test_minus_one_means_no_limit():
    trainer = Trainer(max_epochs=-1, max_steps=4, **QUIET)
    assert trainer.args.max_epochs is None
    trainer.fit(Counting(), train_loader())
    assert trainer.global_step == 4


class StopAfterValidation(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if trainer.global_step == self.at_step and not trainer.sanity_checking:
            raise KeyboardInterrupt


@pytest.mark.parametrize("isolate", [False, True], ids=["shared-rng", "isolated-rng"])
def test_resume_right_after_a_mid_epoch_validation_is_exact(tmp_path: Path, isolate: bool):
    reference, ref_trainer = fit(epochs=2, val_check_interval=3, isolate_validation_rng=isolate)

    torch.manual_seed(0)
    model = Counting()
    torch.manual_seed(1)
    first = Trainer(max_epochs=2, val_check_interval=3, callbacks=[StopAfterValidation(6)], root_dir=tmp_path,
                    logger=False, enable_progress_bar=False, isolate_validation_rng=isolate)
    with pytest.raises(KeyboardInterrupt):
        first.fit(model, train_loader(), val_loader())
    torch.manual_seed(42)  # the checkpoint's random streams must win
    resumed = Counting()
    second = Trainer(max_epochs=2, val_check_interval=3, isolate_validation_rng=isolate, **QUIET)
    second.fit(resumed, train_loader(), val_loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert_same_weights(reference, resumed)
    assert resumed.validated_at == [(0, 9), (1, 13), (1, 16), (1, 19)]  # not 6 again
    assert second.callback_metrics["val/loss"] == ref_trainer.callback_metrics["val/loss"]


def test_ckpt_path_best_and_the_resume_message(tmp_path: Path, caplog):
    import logging

    import callbacks

    checkpoint = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val/loss", mode="min")
    torch.manual_seed(0)  # TinyNet's lr diverges from some initialisations: fix this one
    first = Trainer(max_epochs=2, callbacks=[checkpoint], root_dir=tmp_path, logger=False, enable_progress_bar=False)
    first.fit(Counting(), train_loader(), val_loader())
    assert checkpoint.best_model_path
    with caplog.at_level(logging.INFO, logger="trainer"):
        first.validate(Counting(), val_loader(), ckpt_path="best")
        Trainer(max_epochs=3, callbacks=[checkpoint], **QUIET).fit(Counting(), train_loader(), val_loader(), ckpt_path="best")
    assert any("Resumed from" in r.getMessage() and "optimizer step" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="ckpt_path='best'"):
        Trainer(**QUIET).fit(Counting(), train_loader(), ckpt_path="best")


@pytest.mark.parametrize("isolate", [False, True], ids=["shared-rng", "isolated-rng"])
@pytest.mark.parametrize("where", ["epoch-end", "mid-epoch"])
def test_ctrl_c_during_validation_resumes_exactly(tmp_path: Path, where: str, isolate: bool):
    """An interrupt inside validation leaves a clean cut (the checkpoint holds the random
    state the validation began with), and resuming runs that validation again, so its random
    draws happen exactly once."""
    interval, at_step = (5, 15) if where == "mid-epoch" else (None, 10)

    class CtrlC(Callback):
        def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == at_step and batch_idx == 1 and not trainer.sanity_checking:
                raise KeyboardInterrupt

    reference, ref_trainer = fit(epochs=2, val_check_interval=interval, isolate_validation_rng=isolate)
    torch.manual_seed(0)
    model = Counting()
    torch.manual_seed(1)
    first = Trainer(max_epochs=2, val_check_interval=interval, callbacks=[CtrlC()], root_dir=tmp_path, logger=False,
                    enable_progress_bar=False, isolate_validation_rng=isolate)
    with pytest.raises(KeyboardInterrupt):
        first.fit(model, train_loader(), val_loader())
    import warnings

    resumed = Counting()
    second = Trainer(max_epochs=2, val_check_interval=interval, isolate_validation_rng=isolate, **QUIET)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean cut: no "not bit-identical" warning
        second.fit(resumed, train_loader(), val_loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert_same_weights(reference, resumed)
    assert resumed.validated_at[0][1] == at_step  # the interrupted validation ran again, once
    assert second.callback_metrics["val/loss"] == ref_trainer.callback_metrics["val/loss"]


def test_resume_into_an_epochs_end_with_max_steps(tmp_path: Path):
    """A checkpoint taken during an epoch's end phase resumes into that epoch's end, which
    runs no batch: that is not "an epoch without a step" (no false error with max_steps)."""

    class CtrlC(Callback):
        def on_validation_end(self, trainer: Any, module: Any) -> None:
            if trainer.global_step == 10 and not trainer.sanity_checking:
                raise KeyboardInterrupt

    torch.manual_seed(0)
    first = Trainer(max_steps=30, callbacks=[CtrlC()], root_dir=tmp_path, logger=False, enable_progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        first.fit(Counting(), train_loader(), val_loader())
    second = Trainer(max_steps=30, **QUIET)
    second.fit(Counting(), train_loader(), val_loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert second.global_step == 30
