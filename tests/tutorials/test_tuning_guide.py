"""recipes_source/recipes/tuning_guide.py: its suggestions, taken by a hand-written loop and by the Trainer.

The guide has no training script of its own; it lists changes to one. Those that apply on a
CPU, taken together in one loop: the model and every input batch in `torch.channels_last`
("use channels_last memory format for computer vision models"), bfloat16 autocast ("CPU
mixed precision"), `zero_grad(set_to_none=True)` ("use parameter.grad = None instead of
model.zero_grad()"), `torch.utils.checkpoint` around a block ("checkpoint intermediate
buffers"), validation under `torch.no_grad()`, and no bias in a convolution followed by batch
norm. The port: the model converted once, the batches in `on_after_batch_transfer`,
`Trainer(precision="bf16")` (autocast, no scaler; gradients set to None after each step by
default). Both end on the same weights (`torch.equal`) and the validation losses match; the
weights stay channels_last after fit and after a resume from a checkpoint the Trainer wrote.

Differences from the guide's setting: a small convolutional classifier on random 3x12x12
images instead of a real vision model and dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
EPOCHS = 2


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # bias=False before batch norm
        self.bn1 = nn.BatchNorm2d(8)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.fc = nn.Linear(8, 4)
        self.val_losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = checkpoint(self.block, x, use_reentrant=False)  # recomputed in backward
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x).float(), y)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch
        return x.to(memory_format=torch.channels_last), y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def on_validation_epoch_start(self) -> None:
        self.total = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.total += self.loss(batch).item()

    def on_validation_epoch_end(self) -> None:
        self.val_losses.append(self.total)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(32, 3, 12, 12, generator=g), torch.randint(0, 4, (32,), generator=g))
    val = TensorDataset(torch.randn(8, 3, 12, 12, generator=g), torch.randint(0, 4, (8,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(val, batch_size=8)


def new_model() -> Net:
    torch.manual_seed(0)
    return Net().to(memory_format=torch.channels_last)  # type: ignore[return-value]


def original(epochs: int = EPOCHS) -> Net:
    model = new_model()
    train_loader, val_loader = loaders()
    optimizer = model.configure_optimizers()
    for _ in range(epochs):
        model.train()
        for x, y in train_loader:
            x = x.to(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model.loss((x, y))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        model.on_validation_epoch_start()
        with torch.no_grad():
            for x, y in val_loader:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    model.validation_step((x.to(memory_format=torch.channels_last), y), 0)
        model.on_validation_epoch_end()
    return model


def channels_last(model: nn.Module) -> bool:
    return all(p.is_contiguous(memory_format=torch.channels_last) for p in model.parameters() if p.dim() == 4)


def test_the_guides_suggestions_under_the_trainer_give_the_loops_weights() -> None:
    model = new_model()
    Trainer(max_epochs=EPOCHS, precision="bf16", **QUIET).fit(model, *loaders())
    reference = original()
    assert_same_weights(model, reference)
    assert model.val_losses == reference.val_losses and len(model.val_losses) == EPOCHS
    assert channels_last(model) and channels_last(reference)
    assert all(p.grad is None for p in model.parameters())  # set to None after the last step


def test_a_resume_keeps_channels_last_and_the_weights(tmp_path: Path) -> None:
    model = new_model()
    trainer = Trainer(max_epochs=1, precision="bf16", **QUIET)
    trainer.fit(model, *loaders())
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    resumed = new_model()
    Trainer(max_epochs=EPOCHS, precision="bf16", **QUIET).fit(resumed, *loaders(), ckpt_path=tmp_path / "one.ckpt")
    assert channels_last(resumed)
    assert_same_weights(resumed, original())


def test_the_comparison_can_fail() -> None:
    model = new_model()
    Trainer(max_epochs=EPOCHS - 1, precision="bf16", **QUIET).fit(model, *loaders())
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original())
