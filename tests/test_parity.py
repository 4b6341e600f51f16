"""The Trainer's weights equal those of the hand-written loop, in every precision."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.reference import assert_same_weights, loader, make_data, make_model, reference_fit
from trainer import Trainer
from trainer.precision import AMP

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)


def run_both(precision: str = "fp32", *, epochs: int = 2, accumulate: int = 1, clip_val=None, clip_algorithm="norm", n=37, model_kwargs=None, scaler_kwargs=None, batch_size=4):
    data = make_data(n)
    model_kwargs = model_kwargs or {}
    ref = make_model(**model_kwargs)
    torch.manual_seed(1)
    ref_info = reference_fit(ref, loader(data, batch_size), precision=precision, epochs=epochs, accumulate=accumulate,
                             clip_val=clip_val, clip_algorithm=clip_algorithm, scaler_kwargs=scaler_kwargs)
    ours = make_model(**model_kwargs)
    torch.manual_seed(1)
    strategy = AMP(**scaler_kwargs) if (precision == "amp" and scaler_kwargs) else precision
    trainer = Trainer(precision=strategy, max_epochs=epochs, accumulate_grad_batches=accumulate,
                      gradient_clip_val=clip_val, gradient_clip_algorithm=clip_algorithm, device="cpu", **QUIET)
    trainer.fit(ours, loader(data, batch_size))
    return ref, ours, ref_info, trainer


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_weights_equal_reference_loop(precision):
    ref, ours, info, trainer = run_both(precision)
    assert_same_weights(ref, ours)
    assert trainer.global_step == info["steps"] == 20  # 10 batches (37 samples / 4) x 2 epochs
    assert trainer.current_epoch == 2


@pytest.mark.parametrize("accumulate", [1, 2, 3, 4])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_accumulation_with_uneven_epochs(precision, accumulate):
    # 37 samples / batch 4 = 10 micro-batches per epoch: 3 and 4 leave a short last window.
    ref, ours, info, trainer = run_both(precision, accumulate=accumulate)
    assert_same_weights(ref, ours)
    assert trainer.global_step == info["steps"] == 2 * -(-10 // accumulate)


def test_accumulation_divides_by_window_not_by_setting():
    # A short last window divides by its own length: dividing by k would give other weights.
    ref, ours, _, _ = run_both("fp32", accumulate=4, epochs=1)
    assert_same_weights(ref, ours)
    wrong = make_model()
    torch.manual_seed(1)
    reference_fit(wrong, loader(make_data()), accumulate=3, epochs=1)  # other windows entirely
    assert any(not torch.equal(a, b) for a, b in zip(wrong.state_dict().values(), ours.state_dict().values()))


@pytest.mark.parametrize("algorithm,value", [("norm", 0.05), ("value", 0.01)])
def test_clipping_after_unscale_under_amp(algorithm, value):
    ref, ours, _, _ = run_both("amp", clip_val=value, clip_algorithm=algorithm, accumulate=2)
    assert_same_weights(ref, ours)
    # The threshold is small enough to change the result: unclipped training differs.
    unclipped, _, _, _ = run_both("amp", accumulate=2)
    assert any(not torch.equal(a, b) for a, b in zip(unclipped.state_dict().values(), ours.state_dict().values()))


def test_clipping_before_unscale_would_differ():
    """Clipping the *scaled* gradients (the classic bug) gives different weights."""
    data = make_data()
    buggy = make_model()
    torch.manual_seed(1)
    opt = buggy.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu")
    for i, batch in enumerate(loader(data)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = buggy.training_step(batch, i)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(buggy.parameters(), 0.05)  # before unscale_: wrong
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    _, ours, _, _ = run_both("amp", clip_val=0.05, epochs=1)
    assert any(not torch.equal(a, b) for a, b in zip(buggy.state_dict().values(), ours.state_dict().values()))


def test_nonfinite_gradients_under_amp_skip_step_and_hold_scheduler():
    # A small initial scale so that only the injected infinities overflow.
    kwargs = dict(model_kwargs={"blow_up_at": (3, 12), "scheduler": "step"}, epochs=2, scaler_kwargs={"init_scale": 256.0})
    ref, ours, info, trainer = run_both("amp", **kwargs)
    assert_same_weights(ref, ours)
    assert info["skipped"] == 2 and trainer.state.skipped_steps == 2
    assert trainer.global_step == 20  # skipped steps count as steps
    assert trainer.precision.scaler.get_scale() == info["scale"] == 256.0 * 0.25  # backed off twice
    # StepLR(step_size=2, gamma=0.5) stepped 18 times, not 20.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**9)
    assert info["lr"] == trainer.optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_scheduler_intervals(interval):
    ref, ours, info, trainer = run_both("fp32", model_kwargs={"scheduler": interval}, epochs=3, accumulate=3)
    assert_same_weights(ref, ours)
    expected_steps = 12 if interval == "step" else 3
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5 ** (expected_steps // 2))
    assert info["lr"] == trainer.optimizer.param_groups[0]["lr"]


def test_adam_bf16_with_clipping():
    ref, ours, _, _ = run_both("bf16", model_kwargs={"optimizer": "adam"}, clip_val=0.5, accumulate=2)
    assert_same_weights(ref, ours)


def test_fp32_agrees_to_1e6_on_a_longer_run():
    ref, ours, _, _ = run_both("fp32", epochs=5, n=64, batch_size=8)
    assert_same_weights(ref, ours, atol=1e-6)


def test_max_steps_stops_mid_epoch_with_reference_weights():
    data = make_data()
    ref = make_model()
    torch.manual_seed(1)
    opt = ref.configure_optimizers()
    for i, batch in enumerate(loader(data)):
        if i == 7:
            break
        ref.training_step(batch, i).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ours = make_model()
    torch.manual_seed(1)
    trainer = Trainer(max_steps=7, device="cpu", **QUIET)
    trainer.fit(ours, loader(data))
    assert_same_weights(ref, ours)
    assert trainer.global_step == 7 and trainer.current_epoch == 0  # the epoch is not finished


def test_max_steps_at_epoch_end_finishes_the_epoch():
    trainer = Trainer(max_steps=10, max_epochs=5, device="cpu", **QUIET)
    validated = []

    class Spy(type(make_model())):
        def on_validation_epoch_end(self):
            if not trainer.sanity_checking:
                validated.append(trainer.global_step)

    torch.manual_seed(0)
    trainer.fit(Spy(), loader(make_data()), val_loader=loader(make_data(8), shuffle=False))
    assert trainer.global_step == 10
    assert trainer.current_epoch == 1  # the epoch that step 10 ended counts as finished
    assert validated == [10]
