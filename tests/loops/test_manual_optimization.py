"""Manual optimization and several optimizers: equal to PyTorch's hand-written AMP recipe for
several models, losses and optimizers (tests/helpers/gan.py), resumable exactly, and misuse named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from tests.helpers.gan import GAN, Z, LightningGAN, bce, make_gan, make_points, points_loader, reference_gan
from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def fit_gan(precision: str, epochs: int = 2, **kwargs: Any) -> tuple[GAN, Trainer]:
    model = make_gan(**kwargs)
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_epochs=epochs, **QUIET)
    trainer.fit(model, points_loader(make_points()))
    return model, trainer


def reference(precision: str, epochs: int = 2, **kwargs: Any) -> tuple[GAN, dict[str, Any]]:
    model = make_gan(**kwargs)
    torch.manual_seed(1)
    return model, reference_gan(model, points_loader(make_points()), precision=precision, epochs=epochs)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize("options", [{}, {"clip": 0.5, "accumulate": 2}], ids=["plain", "clip-accumulate"])
def test_gan_equals_the_hand_written_loop(precision, options):
    model, trainer = fit_gan(precision, **options)
    expected_model, expected = reference(precision, **options)
    assert_same_weights(model, expected_model)  # torch.equal, BatchNorm buffers included
    assert trainer.global_step == expected["steps"]  # every opt.step() counts, as in Lightning
    opt_g, opt_d = trainer.optimizers
    assert (opt_g.param_groups[0]["lr"], opt_d.param_groups[0]["lr"]) == (expected["lr_g"], expected["lr_d"])
    if precision == "amp":
        assert float(trainer.precision.scaler.get_scale()) == expected["scale"]


def test_amp_overflow_skips_that_optimizer_only_and_backs_off_once():
    model, trainer = fit_gan("amp", blow_up_at=(3, 7, 9))
    expected_model, expected = reference("amp", blow_up_at=(3, 7, 9))
    assert_same_weights(model, expected_model)
    assert trainer.state.skipped_steps == 3  # the discriminator's steps at batches 3, 7 and 9
    assert float(trainer.precision.scaler.get_scale()) == expected["scale"] == 2.0**16 / 8
    # The discriminator's scheduler was held on its skipped steps (the module checks opt.stepped).
    assert expected["lr_d"] != expected["lr_g"]
    assert trainer.optimizers[1].param_groups[0]["lr"] == expected["lr_d"]


def test_fused_adam_under_amp_reports_the_skipped_step():
    """A fused optimizer always runs its kernel; the skip must still be seen."""
    model, trainer = fit_gan("amp", epochs=1, blow_up_at=(3,), fused=True)
    expected_model, expected = reference("amp", epochs=1, blow_up_at=(3,), fused=True)
    assert_same_weights(model, expected_model)
    assert trainer.state.skipped_steps == 1
    assert trainer.optimizers[1].param_groups[0]["lr"] == expected["lr_d"]


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_gan_mid_epoch_resume_is_exact(tmp_path, precision):
    blow = (3,) if precision == "amp" else ()
    uninterrupted, _ = fit_gan(precision, epochs=2, blow_up_at=blow)

    model = make_gan(blow_up_at=blow)
    torch.manual_seed(1)
    first = Trainer(precision=precision, max_steps=2 * 5 + 2 * 11, root_dir=tmp_path, logger=False, enable_progress_bar=False)
    first.fit(model, points_loader(make_points()))  # stops after batch 5 of epoch 1 (11 batches/epoch)
    saved = load_checkpoint(first.log_dir / "last.ckpt")
    assert saved["cut"]["clean"] and saved["loop"]["batches_done"] == 5 and saved["loop"]["epoch"] == 1
    assert [entry["class"] for entry in saved["schedulers"]] == ["StepLR", "StepLR"]
    assert len(saved["optimizers"]) == 2 and saved["gan_calls"] == 16

    torch.manual_seed(123)  # the checkpoint's random streams must win
    resumed = make_gan(seed=5, blow_up_at=blow)
    second = Trainer(precision=precision, max_epochs=2, **QUIET)
    second.fit(resumed, points_loader(make_points()), ckpt_path=first.log_dir / "last.ckpt")
    assert_same_weights(uninterrupted, resumed)
    assert second.global_step == 44


# ----------------------------------------------------------------------------- misuse
class TwoOptimizers(TinyNet):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[3].parameters(), lr=0.1)


def test_two_optimizers_are_never_read_as_optimizer_and_scheduler():
    with pytest.raises(ValueError, match="returned 2 optimizers") as caught:
        Trainer(**QUIET).fit(TwoOptimizers(), loader(make_data()))
    assert "self.automatic_optimization = False" in str(caught.value)


def test_manual_module_that_never_steps_fails_instead_of_looping_forever():
    class NeverSteps(TinyNet):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.manual_backward(super().training_step(batch, batch_idx))

    with pytest.raises(RuntimeError, match="without a single optimizer step") as caught:
        Trainer(max_steps=5, **QUIET).fit(NeverSteps(), loader(make_data()))
    assert "opt.step()" in str(caught.value)


def test_automatic_module_that_always_skips_is_told_nothing_was_learned(caplog):
    """Every training_step returns None: the windows count as steps (Lightning's rule), so
    max_steps ends the run, and a warning says that nothing was learned and what to return."""
    class AlwaysNone(TinyNet):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None

    model = AlwaysNone()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with caplog.at_level("WARNING", logger="trainer"):
        trainer = Trainer(max_steps=25, **QUIET)
        trainer.fit(model, loader(make_data()))
    assert trainer.global_step == 25 and caplog.text.count("nothing was learned") == 1
    assert "automatic_optimization = False" in caplog.text
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_manual_module_that_never_steps_fails_instead_of_looping_forever():
    class NeverSteps(GAN):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None

    with pytest.raises(RuntimeError, match="opt.step"):
        Trainer(max_steps=5, **QUIET).fit(NeverSteps(), points_loader(make_points()))


@pytest.mark.parametrize("argument", [{"accumulate_grad_batches": 2}, {"gradient_clip_val": 1.0}])
def test_automatic_only_arguments_are_refused_in_manual_mode(argument):
    with pytest.raises(ValueError, match="automatic_optimization is False") as caught:
        Trainer(**argument, **QUIET).fit(make_gan(), points_loader(make_points()))
    assert next(iter(argument)) in str(caught.value)


def test_a_save_between_the_optimizer_steps_of_one_batch_is_refused(tmp_path):
    class SaveMidBatch(GAN):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            opt_g, opt_d = self.optimizers()
            (real,) = batch
            loss = self.discriminator(real).mean()
            self.manual_backward(loss)
            opt_d.step()
            opt_d.zero_grad()
            self.trainer.save_checkpoint(tmp_path / "mid.ckpt")

    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="manual optimization"):
        Trainer(**QUIET).fit(SaveMidBatch(), points_loader(make_points()))
    assert not (tmp_path / "mid.ckpt").exists()


def test_lr_schedulers_and_optimizers_shapes():
    seen: dict[str, Any] = {}

    class One(TinyNet):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            opt = self.optimizers()
            seen["opt"], seen["sched"] = opt, self.lr_schedulers()
            self.manual_backward(super().training_step(batch, batch_idx))
            opt.step()
            opt.zero_grad()

    model = One()
    trainer = Trainer(max_steps=3, **QUIET)
    trainer.fit(model, loader(make_data()))
    assert seen["sched"] is None and seen["opt"].optimizer is trainer.optimizer
    assert trainer.global_step == 3 and copy.deepcopy(model) is not None


def test_the_gan_example_trains(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "gan.py"
    done = subprocess.run([sys.executable, str(example), "--epochs", "1", "--precision", "amp"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "optimizer steps: 64;" in done.stdout  # 32 batches x 2 optimizers


def test_manual_logging_without_a_returned_loss(tmp_path):
    """A manual training_step may return nothing; logging then writes what it logged."""

    class NoReturn(GAN):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    trainer = Trainer(max_epochs=1, log_every_n_steps=4, root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(NoReturn(), points_loader(make_points()))
    metrics = trainer.callback_metrics
    assert "train/d_loss" in metrics and "train/loss" not in metrics and trainer.global_step == 22


# ------------------------------------------- checkpoints between training_steps (manual)
class SaveAtBatchEnd(Callback):
    """Saves from on_train_batch_end (at `step`, or every batch recording what happened)."""

    def __init__(self, folder: Any, step: int | None = None) -> None:
        self.folder, self.step = folder, step
        self.refused: dict[int, str | None] = {}

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.step is not None:
            if trainer.global_step == self.step:
                trainer.save_checkpoint(self.folder / "batch_end.ckpt")
            return
        try:
            trainer.save_checkpoint(self.folder / f"{batch_idx}.ckpt")
            self.refused[batch_idx] = None
        except RuntimeError as error:
            self.refused[batch_idx] = str(error)


def fit_lightning_gan(precision: str, max_steps: int, ckpt_path: Any = None, callbacks: Any = (), seed: int = 0) -> Any:
    torch.manual_seed(seed)
    model = LightningGAN(blow_up_at=(4, 10) if precision == "amp" else ())
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_steps=max_steps, callbacks=list(callbacks), **QUIET)
    trainer.fit(model, points_loader(make_points()), ckpt_path=ckpt_path)
    return model, trainer


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_lightning_style_gan_saves_after_fit_and_at_batch_end_and_resumes_exactly(tmp_path, precision):
    """zero_grad before manual_backward leaves gradients in .grad after opt.step(): they are
    no accumulation window, so a save after fit (max_steps) and from on_train_batch_end works."""
    uninterrupted, _ = fit_lightning_gan(precision, 36)  # 18 batches: into the second epoch
    model, trainer = fit_lightning_gan(precision, 14, callbacks=[SaveAtBatchEnd(tmp_path, step=8)])
    assert any(p.grad is not None for p in model.discriminator.parameters())
    trainer.save_checkpoint(tmp_path / "after_fit.ckpt")
    for name in ("after_fit.ckpt", "batch_end.ckpt"):
        assert load_checkpoint(tmp_path / name)["cut"]["clean"]
        resumed, second = fit_lightning_gan(precision, 36, ckpt_path=tmp_path / name, seed=5)
        assert_same_weights(uninterrupted, resumed)
        assert second.global_step == 36


class Accumulating(TinyNet):
    """Manual accumulation: backward every batch, a step every second one."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        self.manual_backward(super().training_step(batch, batch_idx) / 2)
        if batch_idx % 2 == 1:
            opt.step()
            opt.zero_grad()


class SkipGeneratorSteps(LightningGAN):
    """Lightning-style, the generator steps every second batch (n_critic = 2): its gradients
    stay in .grad meanwhile, untouched by the discriminator's backward."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt_g, opt_d = self.optimizers()
        (real,) = batch
        fake = self.generator(torch.randn(real.shape[0], Z))
        opt_d.zero_grad()
        self.manual_backward(bce(self.discriminator(real), 1.0) + bce(self.discriminator(fake.detach()), 0.0))
        opt_d.step()
        if batch_idx % 2 == 1:
            opt_g.zero_grad()
            self.manual_backward(bce(self.discriminator(fake), 1.0))
            opt_g.step()


@pytest.mark.parametrize("case", ["accumulate", "gan-accumulating-discriminator", "lightning-n-critic"])
def test_manual_accumulation_is_refused_between_its_steps(tmp_path, case):
    """Gradients from manual_backward calls after an optimizer's last step, when it did not
    step in that batch, are an open window: a save there is refused, and says why."""
    model = {"accumulate": Accumulating, "gan-accumulating-discriminator": lambda: GAN(accumulate=2),
             "lightning-n-critic": SkipGeneratorSteps}[case]()
    data = loader(make_data(16)) if case == "accumulate" else points_loader(make_points(16))
    saves = SaveAtBatchEnd(tmp_path)
    Trainer(max_epochs=1, callbacks=[saves], **QUIET).fit(model, data)
    assert len(saves.refused) == 4
    if case == "lightning-n-critic":  # leftover gradients of the generator: no window, every save works
        assert set(saves.refused.values()) == {None}
        return
    assert saves.refused[1] is None and saves.refused[3] is None  # after the accumulating optimizer's step
    for batch_idx in (0, 2):
        message = saves.refused[batch_idx]
        assert message is not None and "manual accumulation window" in message and "opt.step()" in message
        assert ("optimizer 1 holds gradients" if case.startswith("gan") else "the optimizer holds gradients") in message
        assert not (tmp_path / f"{batch_idx}.ckpt").exists()
