"""Manual optimization under bf16/amp equals PyTorch's own recipes, bit for bit.

PyTorch's recipe puts autocast around each forward, so a forward after an in-place
`opt.step()` casts the updated weights; the Trainer runs `training_step` in one autocast and
clears autocast's weight cache after every step. Under amp, `scaler.update()` runs lazily:
before the next backward that follows a step, and when training_step returns if a step or an
unscale is pending. Each test below compares every parameter with `torch.equal` against the
hand-written loop on the same seed and data, and shows that the comparison can fail.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.gan import DTYPES, Z, LightningGAN, bce, make_points, points_loader
from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Trainer
from trainer.loops import manual
from trainer.precision import AMP

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
INF = float("inf")


def autocast(precision: str) -> Any:
    dtype = DTYPES[precision]
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def differs(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# --------------------------------------------- two steps of one optimizer per training_step
class TwoSteps(TinyNet):
    """Each batch in two halves, one SGD step per half (an n_critic / PPO-epoch shape)."""

    def __init__(self, blow_up: tuple[tuple[int, int], ...] = ()) -> None:
        super().__init__(lr=0.01)
        self.automatic_optimization = False
        self.blow_up = set(blow_up)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        x, y = batch
        for k, (xs, ys) in enumerate(zip(x.chunk(2), y.chunk(2))):
            loss = F.mse_loss(self(xs).float(), ys)
            if (self.calls, k) in self.blow_up:
                loss = loss * INF
            self.manual_backward(loss)
            opt.step()
            opt.zero_grad()
        self.calls += 1


def two_steps_by_hand(model: TwoSteps, data: Any, precision: str, epochs: int) -> dict[str, Any]:
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    steps = calls = skipped = 0
    model.train()
    for _ in range(epochs):
        for x, y in data:
            for k, (xs, ys) in enumerate(zip(x.chunk(2), y.chunk(2))):
                with autocast(precision):
                    loss = F.mse_loss(model(xs).float(), ys)
                if (calls, k) in model.blow_up:
                    loss = loss * INF
                scaler.scale(loss).backward()
                before = scaler.get_scale()
                scaler.step(opt)
                scaler.update()  # n_critic recipe: after each step, before the next backward
                skipped += scaler.get_scale() < before
                opt.zero_grad()
                steps += 1
            calls += 1
    return {"steps": steps, "skipped": skipped, "scale": scaler.get_scale()}


def two_steps_runs(precision: str, epochs: int = 2, blow_up: tuple[tuple[int, int], ...] = ()) -> tuple[Any, ...]:
    data = make_data(40)
    torch.manual_seed(0)
    ours = TwoSteps(blow_up)
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_epochs=epochs, **QUIET)
    trainer.fit(ours, loader(data))
    torch.manual_seed(0)
    hand = TwoSteps(blow_up)
    torch.manual_seed(1)
    expected = two_steps_by_hand(hand, loader(data), precision, epochs)
    assert trainer.global_step == expected["steps"] == 2 * 10 * epochs
    return ours, hand, trainer, expected


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
def test_two_steps_of_one_optimizer_per_training_step(precision):
    blow_up = ((3, 0), (6, 1)) if precision == "amp" else ()  # skipped steps: the scale backs off between the halves
    ours, hand, trainer, expected = two_steps_runs(precision, blow_up=blow_up)
    assert_same_weights(ours, hand)
    if precision == "amp":  # the initial scale overflows float16 too: a few more skips than injected
        assert trainer.state.skipped_steps == expected["skipped"] >= 2 + 1
        assert float(trainer.precision.scaler.get_scale()) == expected["scale"]


def test_two_steps_fail_without_the_cache_clear_or_the_lazy_update(monkeypatch):
    """The comparison above is sharp: without clearing autocast's cache after a step (bf16),
    or without the update before the next backward (amp, after a skipped step), it fails."""
    with monkeypatch.context() as patch:
        patch.setattr(manual, "_recast_after_step", lambda device_type: None)
        ours, hand, _, _ = two_steps_runs("bf16", epochs=1)
        assert differs(ours, hand)
    with monkeypatch.context() as patch:
        patch.setattr(AMP, "backward", lambda self, loss, *a, **k: self.scaler.scale(loss).backward(*a, **k))
        ours, hand, _, _ = two_steps_runs("amp", epochs=1, blow_up=((3, 0),))
        assert differs(ours, hand)  # the second half scaled with the stale scale, unscaled with the new one


def test_plain_pytorch_forbids_a_second_step_before_update():
    """Why the update can't wait for the end of training_step: GradScaler refuses the second step."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        scaler.scale(model(torch.ones(1, 2)).sum()).backward()
        if _ == 0:
            scaler.step(opt)
    with pytest.raises(RuntimeError, match="already been called since the last update"):
        scaler.step(opt)


# ------------------------------------- DCGAN order, no toggle_optimizer (Lightning's way)
def gan_by_hand(model: LightningGAN, data: Any, precision: str, epochs: int) -> None:
    """PyTorch's DCGAN example with its AMP recipe: autocast around each forward, one
    GradScaler, an update after each step (the backward that follows scales anew)."""
    G, D = model.generator, model.discriminator
    opt_g, opt_d = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    calls = 0
    model.train()
    for _ in range(epochs):
        for (real,) in data:
            with autocast(precision):
                fake = G(torch.randn(real.shape[0], Z))
                d_loss = bce(D(real), 1.0) + bce(D(fake.detach()), 0.0)
            if calls in model.blow_up_at:
                d_loss = d_loss * INF
            opt_d.zero_grad()
            scaler.scale(d_loss).backward()
            scaler.step(opt_d)
            scaler.update()
            with autocast(precision):  # a new autocast: D's updated weights are cast anew
                g_loss = bce(D(fake), 1.0)
            opt_g.zero_grad()
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
            calls += 1


def gan_runs(precision: str, epochs: int = 2, blow_up_at: tuple[int, ...] = ()) -> tuple[Any, Any, Trainer]:
    torch.manual_seed(0)
    ours = LightningGAN(blow_up_at)
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_epochs=epochs, **QUIET)
    trainer.fit(ours, points_loader(make_points()))
    torch.manual_seed(0)
    hand = LightningGAN(blow_up_at)
    torch.manual_seed(1)
    gan_by_hand(hand, points_loader(make_points()), precision, epochs)
    return ours, hand, trainer


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
def test_dcgan_order_without_toggle_equals_autocast_around_each_forward(precision):
    blow_up_at = (2, 13) if precision == "amp" else ()
    ours, hand, trainer = gan_runs(precision, blow_up_at=blow_up_at)
    assert_same_weights(ours, hand)
    assert trainer.global_step == 2 * 11 * 2
    if precision == "amp":
        assert trainer.state.skipped_steps == 2


def test_dcgan_order_fails_with_the_stale_weight_cache(monkeypatch):
    monkeypatch.setattr(manual, "_recast_after_step", lambda device_type: None)
    ours, hand, _ = gan_runs("bf16", epochs=1)
    assert differs(ours, hand)


# -------------------------------------------------- clip_gradients in a batch without a step
CLIP_SCALE = 2.0**10  # no overflow: every batch's gradients are finite
CLIP = 5.0  # the true norms lie between 1.5 and 10: some batches are clipped, others not


class ClipEveryBatch(TinyNet):
    """Clips (and so unscales) every batch, steps every second one, drops the others' gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.clipped: list[list[torch.Tensor]] = []  # the gradients after each clip

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        x, y = batch
        self.manual_backward(F.mse_loss(self(x).float(), y))
        self.clip_gradients(opt, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
        self.clipped.append(grads_of(self))
        if batch_idx % 2 == 1:
            opt.step()
        opt.zero_grad()


def grads_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def clip_by_hand(model: ClipEveryBatch, data: Any, epochs: int) -> list[list[torch.Tensor]]:
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", init_scale=CLIP_SCALE)
    clipped = []
    model.train()
    for _ in range(epochs):
        for i, (x, y) in enumerate(data):
            with autocast("amp"):
                loss = F.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            clipped.append(grads_of(model))
            if i % 2 == 1:
                scaler.step(opt)
            scaler.update()  # at the iteration's end, whether or not it stepped
            opt.zero_grad()
    return clipped


def clip_runs() -> tuple[ClipEveryBatch, ClipEveryBatch, list[list[torch.Tensor]]]:
    data = make_data(40)
    torch.manual_seed(0)
    ours = ClipEveryBatch()
    torch.manual_seed(1)
    Trainer(precision=AMP(init_scale=CLIP_SCALE), max_epochs=2, **QUIET).fit(ours, loader(data))
    torch.manual_seed(0)
    hand = ClipEveryBatch()
    torch.manual_seed(1)
    return ours, hand, clip_by_hand(hand, loader(data), 2)


def test_clip_without_step_under_amp_equals_the_recipe():
    ours, hand, clipped = clip_runs()
    assert_same_weights(ours, hand)
    assert len(ours.clipped) == len(clipped) == 20
    for a, b in zip(ours.clipped, clipped):  # every batch clipped its true (unscaled) gradients
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_clip_without_step_fails_when_the_unscale_stays_pending(monkeypatch):
    """The old rule (update only after a step) leaves the optimizer marked unscaled: the next
    batch clips, and steps with, gradients that are still scaled."""
    original = AMP.update
    monkeypatch.setattr(AMP, "update", lambda self: original(self) if self._stepped else None)
    ours, hand, clipped = clip_runs()
    assert differs(ours, hand)
    assert not torch.equal(ours.clipped[1][0], clipped[1][0])  # batch 1 clipped scaled gradients
    assert torch.linalg.vector_norm(torch.cat([g.flatten() for g in ours.clipped[1]])) == pytest.approx(CLIP)


def test_a_second_step_without_a_backward_in_between_is_safe_under_amp():
    """GradScaler refuses a second step() before update(); the Trainer updates first, as a
    hand-written loop that calls scaler.update() after each step does."""

    class StepTwice(TinyNet):
        def __init__(self) -> None:
            super().__init__(lr=0.01)
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            opt = self.optimizers()
            x, y = batch
            self.manual_backward(F.mse_loss(self(x).float(), y))
            opt.step()
            opt.step()
            opt.zero_grad()

    data = make_data(16)
    torch.manual_seed(0)
    ours = StepTwice()
    torch.manual_seed(1)
    trainer = Trainer(precision="amp", max_epochs=1, **QUIET)
    trainer.fit(ours, loader(data))
    torch.manual_seed(0)
    hand = StepTwice()
    torch.manual_seed(1)
    opt, scaler = hand.configure_optimizers(), torch.amp.GradScaler("cpu")
    for x, y in loader(data):
        with autocast("amp"):
            loss = F.mse_loss(hand(x).float(), y)
        scaler.scale(loss).backward()
        for _ in range(2):
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
    assert_same_weights(ours, hand)
    assert trainer.global_step == 8 and float(trainer.precision.scaler.get_scale()) == scaler.get_scale()
