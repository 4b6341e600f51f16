"""The non-finite loss guard's record and its rollback (trainer/loops/guard.py).

A module poisons one window's loss once (the first time it trains that window): the record in
the checkpoints makes a replay (a resume, or the rollback's) skip that window again although it
would now be finite, so every path ends with the weights of the run that skipped it in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


class Poisoned(Module):
    """A regression whose loss is nan at optimizer step `poison_step`, the first time only."""

    def __init__(self, poison_step: int | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.poison_step = poison_step
        self.trained: list[int] = []  # the first sample index of every batch trained on

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, index = batch
        self.trained.append(int(index[0]))
        loss = F.mse_loss(self.layer(x), y)
        if self.trainer.global_step == self.poison_step:
            self.poison_step = None
            return self.poison(loss)
        return loss

    def poison(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * float("nan")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.8)}


def data() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(-1, keepdim=True), torch.arange(48)), batch_size=4, shuffle=True,
                      generator=torch.Generator().manual_seed(2))


class SaveEvery(Callback):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx % 2 == 1:  # a window's end (accumulate_grad_batches=2)
            trainer.save_checkpoint(self.folder / f"step{trainer.global_step}.ckpt")


def fit(tmp_path: Path, name: str, mode: str, poison: int | None = 7, backoff: float = 1.0, ckpt: Path | None = None,
        **extra: Any) -> tuple[Poisoned, Trainer]:
    model = Poisoned(poison)
    options: dict[str, Any] = dict(max_epochs=2, accumulate_grad_batches=2, **QUIET)
    trainer = Trainer(nonfinite_loss=mode, nonfinite_lr_backoff=backoff, root_dir=str(tmp_path / name),
                      **{**options, **extra})
    trainer.fit(model, data(), ckpt_path=ckpt)
    return model, trainer


def weights(model: Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def skipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Poisoned, Trainer]:
    return fit(tmp_path_factory.mktemp("skip"), "skip", "skip")


def test_a_skipped_window_is_recorded_in_the_state_and_the_checkpoint(skipped: tuple[Poisoned, Trainer], tmp_path: Path) -> None:
    model, trainer = skipped
    assert trainer.state.skipped_steps == 1 and trainer.global_step == 12  # 2 epochs of 6 steps, one skipped
    assert trainer.state.skipped_windows == [(1, 2, 4)]  # step 8: epoch 1's second window (batches 2 and 3)
    trainer.save_checkpoint(tmp_path / "end.ckpt")
    assert torch.load(tmp_path / "end.ckpt", weights_only=True)["loop"]["skipped_windows"] == [[1, 2, 4]]


def test_rollback_replays_from_the_newest_checkpoint_and_skips_the_window_again(skipped: tuple[Poisoned, Trainer],
                                                                               tmp_path: Path) -> None:
    """With no learning-rate backoff, going back and replaying (the window skipped unrun, the
    loss now finite) ends where skipping in place ended, bit for bit."""
    reference, _ = skipped
    model, trainer = fit(tmp_path, "rollback", "rollback", callbacks=[SaveEvery(tmp_path / "saves")])
    assert same(weights(model), weights(reference))
    assert trainer.state.skipped_windows == [(1, 2, 4)] and trainer.global_step == 12
    # Trained: up to step 8's window (the last save was step 7), then from step 7 again, window 8 left out.
    first_pass = reference.trained[:14] + reference.trained[14:16]  # the poisoned window ran once
    assert model.trained[:16] == first_pass


def test_rollback_lowers_the_learning_rates_by_the_backoff(tmp_path: Path) -> None:
    model, trainer = fit(tmp_path, "backoff", "rollback", backoff=0.5, callbacks=[SaveEvery(tmp_path / "saves")])
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.base_lrs == [0.05]
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.05 * 0.8 ** 2)  # stepped at the two epoch ends
    assert trainer.state.lr_backoff == 0.5
    later = torch.load(tmp_path / "saves" / "step9.ckpt", weights_only=True)["loop"]
    assert later["lr_backoff"] == 0.5 and later["skipped_windows"] == [[1, 2, 4]]


def test_a_resume_from_a_checkpoint_that_records_a_window_ahead_skips_it(skipped: tuple[Poisoned, Trainer],
                                                                         tmp_path: Path) -> None:
    """A checkpoint written after a rollback, before the loop reached the recorded window again
    (step 7 of the second pass), lists it: a new process resumed from it, whose loss would be
    finite there, skips the window and ends with the weights of the run that skipped it."""
    reference, _ = skipped

    class SaveAfterRollback(Callback):  # step 6 (the rollback's target), and step 7 of the replay
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx % 2 == 1 and (trainer.global_step == 6 or (trainer.global_step == 7 and trainer.state.skipped_windows)):
                trainer.save_checkpoint(tmp_path / f"step{trainer.global_step}.ckpt")

    fit(tmp_path, "first", "rollback", callbacks=[SaveAfterRollback()])
    saved = torch.load(tmp_path / "step7.ckpt", weights_only=True)["loop"]
    assert saved["skipped_windows"] == [[1, 2, 4]]  # written in the replay after the rollback
    model, trainer = fit(tmp_path, "resumed", "error", poison=None, ckpt=tmp_path / "step7.ckpt")
    assert same(weights(model), weights(reference))
    assert trainer.state.skipped_steps == 1


def test_rollback_before_any_checkpoint_skips_the_step(skipped: tuple[Poisoned, Trainer], tmp_path: Path) -> None:
    reference, _ = skipped
    model, trainer = fit(tmp_path, "none", "rollback", enable_checkpointing=False)
    assert same(weights(model), weights(reference)) and trainer.state.skipped_steps == 1


def test_manual_optimization_refuses_the_skip_modes() -> None:
    class Manual(Poisoned):
        def __init__(self) -> None:
            super().__init__(None)
            self.automatic_optimization = False

    with pytest.raises(ValueError, match="nonfinite_loss='rollback'.*automatic_optimization is False"):
        Trainer(nonfinite_loss="rollback", max_epochs=1, **QUIET).fit(Manual(), data())


class Spiking(Poisoned):
    """A finite loss 1000 times too large at step `poison_step` (once)."""

    def poison(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * 1000.0


def spiking_fit(tmp_path: Path, name: str, mode: str, factor: float | None, poison: int | None, ckpt: Path | None = None,
                **extra: Any) -> tuple[Module, Trainer]:
    model = Spiking(poison)
    trainer = Trainer(max_epochs=3, nonfinite_loss=mode, loss_spike_factor=factor, root_dir=str(tmp_path / name), **QUIET,
                      **extra)
    trainer.fit(model, data(), ckpt_path=ckpt)
    return model, trainer


def test_a_spiking_loss_counts_as_nonfinite_when_asked(tmp_path: Path) -> None:
    """loss_spike_factor=10: a loss 1000 times the mean at step 25 (past the 20-step warm-up) is
    skipped like a nan one; without the option it trains; the mean resumes from a checkpoint."""
    nan_model, _ = fit(tmp_path, "nan", "skip", poison=25, max_epochs=3, accumulate_grad_batches=1)
    model, trainer = spiking_fit(tmp_path, "spike", "skip", 10.0, poison=25)
    assert trainer.state.skipped_windows == [(2, 1, 2)] and trainer.state.loss_count == 35
    assert same(weights(model), weights(nan_model))  # skipped where the nan was skipped
    trained, _ = spiking_fit(tmp_path, "off", "skip", None, poison=25)
    assert not same(weights(trained), weights(model))  # without the option the spike trains
    with pytest.raises(FloatingPointError, match="above 10 times the running mean"):
        spiking_fit(tmp_path, "error", "error", 10.0, poison=25)

    class StopAt(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == 22:
                trainer.save_checkpoint(tmp_path / "step22.ckpt")

    spiking_fit(tmp_path, "cut", "skip", 10.0, poison=None, callbacks=[StopAt()])
    assert torch.load(tmp_path / "step22.ckpt", weights_only=True)["loop"]["loss_count"] == 22
    resumed, again = spiking_fit(tmp_path, "resumed", "skip", 10.0, poison=25, ckpt=tmp_path / "step22.ckpt")
    assert same(weights(resumed), weights(model)) and again.state.skipped_windows == [(2, 1, 2)]


class NanGradient(Poisoned):
    """A finite loss whose gradient is nan at step `poison_step` (sqrt at 0), once."""

    def poison(self, loss: torch.Tensor) -> torch.Tensor:
        return loss + torch.sqrt(self.layer.weight.sum() * 0)  # d sqrt(u)/du at 0: inf, times 0: nan


def test_a_nonfinite_gradient_norm_is_guarded_when_asked(tmp_path: Path) -> None:
    """The loss is finite, its gradient is not: without the option the weights turn nan; with
    it the step is skipped like a nan loss's, and the weights are the skipping run's."""
    reference, _ = fit(tmp_path, "nan", "skip", poison=7)
    unguarded = NanGradient(7)
    Trainer(max_epochs=2, accumulate_grad_batches=2, nonfinite_loss="skip", root_dir=str(tmp_path / "off"),
            **QUIET).fit(unguarded, data())
    assert not torch.isfinite(unguarded.layer.weight).all()
    model = NanGradient(7)
    trainer = Trainer(max_epochs=2, accumulate_grad_batches=2, nonfinite_loss="skip", nonfinite_grad_norm=True,
                      root_dir=str(tmp_path / "on"), **QUIET)
    trainer.fit(model, data())
    assert trainer.state.skipped_windows == [(1, 2, 4)]
    assert same(weights(model), weights(reference))
