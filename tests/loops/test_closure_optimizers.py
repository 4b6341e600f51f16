"""Optimizers that evaluate the loss themselves through a closure (LBFGS, as in PyTorch's
time-sequence-prediction example): manual optimization hands them the closure and trains to
the hand-written loop's weights; the automatic loop and amp say what to write instead."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer


def points() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(24, 3, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[0.5], [-1.0], [2.0]]) + 0.1 * torch.randn(24, 1, generator=generator))


def net() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


class Fitted(Module):
    def __init__(self, automatic: bool = False) -> None:
        super().__init__()
        self.net = net()
        self.automatic_optimization = automatic
        self.closure_calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        opt = self.optimizers()

        def closure() -> torch.Tensor:
            self.closure_calls += 1
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.net(x).float(), y)
            self.manual_backward(loss)
            return loss

        loss = opt.step(closure=closure)
        self.log("train_loss", loss)

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)


def by_hand(dtype: torch.dtype | None) -> torch.nn.Module:
    model = net()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    for epoch in range(2):
        for x, y in DataLoader(points(), batch_size=8):
            def closure() -> torch.Tensor:
                optimizer.zero_grad()
                autocast = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
                with autocast:
                    loss = torch.nn.functional.mse_loss(model(x).float(), y)
                loss.backward()
                return loss

            optimizer.step(closure)
    return model


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", None), ("bf16", torch.bfloat16)])
def test_lbfgs_in_manual_optimization_equals_the_hand_written_loop(precision, dtype):
    module = Fitted()
    trainer = Trainer(max_epochs=2, precision=precision, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False)
    trainer.fit(module, DataLoader(points(), batch_size=8))
    reference = by_hand(dtype)
    assert module.closure_calls > 6  # LBFGS evaluated the loss several times per step
    assert trainer.global_step == 6
    for ours, theirs in zip(module.net.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(ours, theirs)


def test_lbfgs_in_automatic_optimization_says_to_use_manual_optimization():
    class Automatic(Fitted):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"returned LBFGS, which evaluates the loss itself.*opt.step\(closure=closure\)"):
        trainer.fit(Automatic(automatic=True), DataLoader(points(), batch_size=8))
    assert trainer.global_step == 0


def test_lbfgs_under_amp_and_without_a_closure_are_clear_errors():
    trainer = Trainer(max_epochs=1, precision="amp", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"precision='amp'\) can't step LBFGS with a closure.*'bf16' or 'fp32'"):
        trainer.fit(Fitted(), DataLoader(points(), batch_size=8))

    class NoClosure(Fitted):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.optimizers().step()

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"LBFGS.step needs a closure that recomputes the loss"):
        trainer.fit(NoClosure(), DataLoader(points(), batch_size=8))
