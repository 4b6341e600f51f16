"""A module that overrides `optimizer_step` (a learning-rate warm-up, the way Lightning's docs
write it: `optimizer.step(closure=optimizer_closure)`, then the param groups' lr) learns, says
nothing about `training_step` returning None, and trains to Lightning's weights and to those
of the same warm-up written by hand."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning")

LR, WARMUP, EPOCHS = 0.1, 5, 3


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(32, 1, generator=g))


def net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))


def warmup_lr(step: int) -> float:
    return LR * min(1.0, (step + 1) / WARMUP)


def fit(framework: str, accumulate: int) -> torch.nn.Module:
    if framework == "ours":
        import trainer as L
    else:
        import lightning as L  # type: ignore[no-redef]

    class WarmUp(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=warmup_lr(0), momentum=0.9)

        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step(closure=optimizer_closure)
            for group in optimizer.param_groups:  # the next step's learning rate
                group["lr"] = warmup_lr(self.trainer.global_step + 1)

    L.seed_everything(11)
    model = WarmUp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="cpu", max_epochs=EPOCHS, accumulate_grad_batches=accumulate, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model, DataLoader(data(), batch_size=4, shuffle=True))
    return model.net


def by_hand(accumulate: int) -> torch.nn.Module:
    from trainer import seed_everything

    seed_everything(11)
    model = net()
    optimizer = torch.optim.SGD(model.parameters(), lr=warmup_lr(0), momentum=0.9)
    loader = DataLoader(data(), batch_size=4, shuffle=True)
    step = 0
    for _ in range(EPOCHS):
        for index, (x, y) in enumerate(loader):
            (torch.nn.functional.mse_loss(model(x), y) / accumulate).backward()
            if (index + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
                step += 1
                for group in optimizer.param_groups:
                    group["lr"] = warmup_lr(step)
    return model


@pytest.mark.parametrize("accumulate", [1, 2])
def test_optimizer_step_override_learns_without_a_false_warning(accumulate: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ours = fit("ours", accumulate)
    said = [record.getMessage() for record in caplog.records]
    assert not [message for message in said if "nothing was learned" in message], said
    theirs, hand = fit("lightning", accumulate), by_hand(accumulate)
    for (name, mine), other, written in zip(ours.state_dict().items(), theirs.state_dict().values(), hand.state_dict().values()):
        assert torch.equal(mine, other), f"{name} differs from Lightning's"
        assert torch.equal(mine, written), f"{name} differs from the hand-written warm-up's"


def test_an_override_whose_steps_all_return_none_is_still_reported(caplog: pytest.LogCaptureFixture) -> None:
    """The warning stays for what it is meant for: every training_step returned None."""
    import trainer as L

    class Skips(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step(closure=optimizer_closure)

    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with caplog.at_level(logging.WARNING):
        trainer.fit(Skips(), DataLoader(data(), batch_size=8))
    assert any("nothing was learned" in record.getMessage() for record in caplog.records)
