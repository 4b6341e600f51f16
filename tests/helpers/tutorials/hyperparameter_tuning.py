"""beginner_source/hyperparameter_tuning_tutorial.py ("Hyperparameter tuning with Ray Tune"):
its training function `train_cifar(config)` without Ray (`original`), and its port to a
LightningModule (`main`), written with this package's imports so that `load_file` runs it
under Lightning too.

The function: the CIFAR-10 blitz's network with configurable `l1`/`l2`, SGD with momentum at
`config["lr"]`, an 80/20 `random_split` of the training set, shuffled loaders of
`config["batch_size"]`; after each epoch, under `torch.no_grad()` (the network never in eval
mode), the validation loss as the plain mean of the batches' losses (`val_loss / val_steps`:
a short last batch counts as much as the others) and the accuracy over all samples, which it
reports to Ray with a checkpoint.

The port: `validation_step` logs the batch's loss with `batch_size=1`, so the epoch value is
the mean over batches, as the tutorial's (the default weighting by batch size gives another
number when the last batch is short); the accuracy is counted and logged at the validation
epoch's end; the values Ray receives are `trainer.callback_metrics` after each validation,
collected by a callback.

Differences from the tutorial, with no download and no Ray: CIFAR-10 is replaced by 40
images of its shape from a seeded generator; 2 epochs instead of 10; `num_workers=0`; one
configuration instead of a search; `train.report` and its checkpoint are a list of the
reported values.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import TensorDataset, random_split

import trainer as L

CONFIG = {"l1": 8, "l2": 4, "lr": 0.01, "batch_size": 3}
EPOCHS = 2


def load_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.rand(40, 3, 32, 32, generator=g) * 2 - 1, torch.randint(0, 10, (40,), generator=g))


class Net(L.LightningModule):
    def __init__(self, l1: int = 120, l2: int = 84, lr: float = 0.001) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, l1)
        self.fc2 = nn.Linear(l1, l2)
        self.fc3 = nn.Linear(l2, 10)
        self.lr = lr
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        return self.criterion(self(inputs), labels)

    def on_validation_epoch_start(self) -> None:
        self.total, self.correct = 0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, labels = batch
        outputs = self(inputs)
        _, predicted = torch.max(outputs.data, 1)
        self.total += labels.size(0)
        self.correct += (predicted == labels).sum().item()
        self.log("loss", self.criterion(outputs, labels), batch_size=1)  # the mean over batches

    def on_validation_epoch_end(self) -> None:
        self.log("accuracy", self.correct / self.total)

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class Report(L.Callback):
    """What the tutorial hands `train.report` after each epoch's validation."""

    def __init__(self) -> None:
        self.reported: list[dict[str, float]] = []

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.reported.append({key: float(trainer.callback_metrics[key]) for key in ("loss", "accuracy")})


def main(config: dict[str, Any] = CONFIG, epochs: int = EPOCHS, **options: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    net = Net(config["l1"], config["l2"], config["lr"])
    trainset = load_data()
    test_abs = int(len(trainset) * 0.8)
    train_subset, val_subset = random_split(trainset, [test_abs, len(trainset) - test_abs])
    trainloader = torch.utils.data.DataLoader(train_subset, batch_size=int(config["batch_size"]), shuffle=True)
    valloader = torch.utils.data.DataLoader(val_subset, batch_size=int(config["batch_size"]), shuffle=True)
    report = Report()
    trainer = L.Trainer(max_epochs=epochs, callbacks=[report], num_sanity_val_steps=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", **options)
    trainer.fit(net, trainloader, valloader)
    return {"model": net, "trainer": trainer, "reported": report.reported}


def original(config: dict[str, Any] = CONFIG, epochs: int = EPOCHS) -> tuple[Net, list[dict[str, float]]]:
    """`train_cifar` as the tutorial writes it, `train.report` collecting into a list."""
    torch.manual_seed(0)
    net = Net(config["l1"], config["l2"])
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=config["lr"], momentum=0.9)
    start_epoch = 0
    trainset = load_data()
    test_abs = int(len(trainset) * 0.8)
    train_subset, val_subset = random_split(trainset, [test_abs, len(trainset) - test_abs])
    trainloader = torch.utils.data.DataLoader(train_subset, batch_size=int(config["batch_size"]), shuffle=True)
    valloader = torch.utils.data.DataLoader(val_subset, batch_size=int(config["batch_size"]), shuffle=True)
    reported = []
    for epoch in range(start_epoch, epochs):
        running_loss = 0.0
        epoch_steps = 0
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            epoch_steps += 1
        val_loss = 0.0
        val_steps = 0
        total = 0
        correct = 0
        for i, data in enumerate(valloader, 0):
            with torch.no_grad():
                inputs, labels = data
                outputs = net(inputs)
                _, predicted = torch.max(outputs.data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
                loss = criterion(outputs, labels)
                val_loss += loss.cpu().numpy()
                val_steps += 1
        reported.append({"loss": float(val_loss / val_steps), "accuracy": correct / total})
    return net, reported
