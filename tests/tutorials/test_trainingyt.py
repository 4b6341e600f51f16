"""beginner_source/introyt/trainingyt.py ("Training with PyTorch"), ported to a `Module`.

The tutorial: `GarmentClassifier` (LeNet on 28x28 FashionMNIST), `CrossEntropyLoss`, SGD at
1e-3 with momentum 0.9; `train_one_epoch` prints the running loss every `REPORT` batches
(and writes it to TensorBoard); after each epoch a validation pass (`model.train(False)`, the
batch losses summed as tensors and divided by the number of batches), `LOSS train .. valid ..`
printed, and the model's `state_dict` saved with `torch.save` whenever the validation loss is
below the best so far.

The port, as a Lightning user writes it: the same statistics in the step methods, the average
validation loss logged as `avg_vloss`, and `ModelCheckpoint(monitor="avg_vloss", mode="min")`,
which replaces its file on each strictly lower value as the tutorial writes a new one: its best
file holds the weights the tutorial saved last, and the port ends on the tutorial's weights,
printing the same lines.

Differences from the tutorial, for speed and with no download: FashionMNIST is 32 training and
8 validation random 28x28 images; `REPORT` 2 batches instead of 1000; 3 epochs instead of 5; no
TensorBoard writer (`logger=False`), the lines kept in a list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import ModelCheckpoint
from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
EPOCHS, REPORT = 3, 2


class GarmentClassifier(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.loss_fn = nn.CrossEntropyLoss()
        self.printed: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 4 * 4)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    def report(self, i: int, loss: torch.Tensor) -> None:
        self.running_loss += loss.item()
        if i % REPORT == REPORT - 1:
            self.last_loss = self.running_loss / REPORT  # loss per batch
            self.printed.append('  batch {} loss: {}'.format(i + 1, self.last_loss))
            self.running_loss = 0.

    # the port
    def on_train_epoch_start(self) -> None:
        self.printed.append('EPOCH {}:'.format(self.current_epoch + 1))
        self.running_loss, self.last_loss = 0., 0.

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        loss = self.loss_fn(self(inputs), labels)
        self.report(batch_idx, loss)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.running_vloss, self.batches = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        vinputs, vlabels = batch
        self.running_vloss += self.loss_fn(self(vinputs), vlabels)
        self.batches += 1

    def on_validation_epoch_end(self) -> None:
        avg_vloss = self.running_vloss / self.batches
        self.printed.append('LOSS train {} valid {}'.format(self.last_loss, avg_vloss))
        self.log("avg_vloss", avg_vloss)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001, momentum=0.9)


def fashion_mnist_like() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    training_set = TensorDataset(torch.rand(32, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (32,), generator=g))
    validation_set = TensorDataset(torch.rand(8, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (8,), generator=g))
    return DataLoader(training_set, batch_size=4, shuffle=True), DataLoader(validation_set, batch_size=4, shuffle=False)


def original(tmp_path: Path) -> tuple[GarmentClassifier, list[Path]]:
    torch.manual_seed(0)
    model = GarmentClassifier()
    training_loader, validation_loader = fashion_mnist_like()
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    best_vloss, saved = 1_000_000., []
    for epoch_number in range(EPOCHS):
        model.printed.append('EPOCH {}:'.format(epoch_number + 1))
        model.train(True)
        model.running_loss, model.last_loss = 0., 0.
        for i, (inputs, labels) in enumerate(training_loader):
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            model.report(i, loss)
        model.train(False)
        running_vloss = 0.0
        for i, (vinputs, vlabels) in enumerate(validation_loader):
            running_vloss += loss_fn(model(vinputs), vlabels)
        avg_vloss = running_vloss / (i + 1)
        model.printed.append('LOSS train {} valid {}'.format(model.last_loss, avg_vloss))
        if avg_vloss < best_vloss:
            best_vloss = avg_vloss
            saved.append(tmp_path / 'model_{}'.format(epoch_number))
            torch.save(model.state_dict(), saved[-1])
    return model, saved


def test_the_port_saves_the_tutorials_best_model_and_ends_on_its_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GarmentClassifier()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "port", monitor="avg_vloss", mode="min")
    trainer = Trainer(max_epochs=EPOCHS, callbacks=[checkpoint], root_dir=tmp_path,
                      **dict(QUIET, enable_checkpointing=True))
    trainer.fit(model, *fashion_mnist_like())
    reference, saved = original(tmp_path)
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == EPOCHS * (2 + 32 // 4 // REPORT)
    best = GarmentClassifier()
    best.load_state_dict(torch.load(checkpoint.best_model_path, weights_only=True)["state_dict"])
    saved_model = GarmentClassifier()
    saved_model.load_state_dict(torch.load(saved[-1], weights_only=True))
    assert_same_weights(best, saved_model)
    assert len(saved) >= 1


def test_the_comparison_can_fail(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GarmentClassifier()
    Trainer(max_epochs=EPOCHS - 1, **QUIET).fit(model, *fashion_mnist_like())
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original(tmp_path)[0])
