"""intermediate_source/tensorboard_tutorial.py ("Visualizing models, data, and training with
TensorBoard"), at toy size: the tutorial's loop writing to its own `SummaryWriter` (`original`)
and its port to a LightningModule (`main`) writing the same through `self.logger.experiment`
(the run's `SummaryWriter`), with this package's imports so that `load_file` runs it under
Lightning too.

The tutorial: the CIFAR-10 blitz's network for one-channel 28x28 images, SGD with momentum,
one epoch of batches of 4; every `LOG_EVERY` batches the running loss is written as the scalar
`"training loss"` at step `epoch * len(trainloader) + i`; after training the softmax of every
test image and a precision-recall curve per class (`add_pr_curve`, step 0).

The port: `training_step` adds the running loss and writes the scalar at the tutorial's step
(`current_epoch * num_training_batches + batch_idx`); `test_step` gathers the probabilities and
labels, `on_test_epoch_end` writes the curves.

Differences from the tutorial, with no download: FashionMNIST (torchvision) is replaced by 40
training and 12 test images of its shape, normalised to [-1, 1], from a seeded generator;
`LOG_EVERY` 4 instead of 1000; `num_workers=0`; the image grid, `add_graph`, the projector
embedding and the `add_figure` of predictions (matplotlib) are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

import trainer as L
from trainer.loggers import TensorBoardLogger

LOG_EVERY = 4
classes = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle Boot')


def loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    trainset = TensorDataset(torch.rand(40, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (40,), generator=g))
    testset = TensorDataset(torch.rand(12, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (12,), generator=g))
    return DataLoader(trainset, batch_size=4, shuffle=True), DataLoader(testset, batch_size=4, shuffle=False)


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.criterion = nn.CrossEntropyLoss()
        self.running_loss = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 4 * 4)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    def write_loss(self, writer: SummaryWriter, loss: torch.Tensor, epoch: int, i: int, batches: int) -> None:
        """The tutorial's running loss, written every LOG_EVERY batches."""
        self.running_loss += loss.item()
        if i % LOG_EVERY == LOG_EVERY - 1:
            writer.add_scalar('training loss', self.running_loss / LOG_EVERY, epoch * batches + i)
            self.running_loss = 0.0

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        loss = self.criterion(self(inputs), labels)
        self.write_loss(self.logger.experiment, loss, self.current_epoch, batch_idx, self.trainer.num_training_batches)  # type: ignore[union-attr]
        return loss

    def on_test_epoch_start(self) -> None:
        self.class_probs: list[list[torch.Tensor]] = []
        self.class_label: list[torch.Tensor] = []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        images, labels = batch
        output = self(images)
        self.class_probs.append([F.softmax(el, dim=0) for el in output])
        self.class_label.append(labels)

    def on_test_epoch_end(self) -> None:
        write_pr_curves(self.logger.experiment, self.class_probs, self.class_label)  # type: ignore[union-attr]

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.001, momentum=0.9)


def write_pr_curves(writer: SummaryWriter, class_probs: list[list[torch.Tensor]], class_label: list[torch.Tensor]) -> None:
    test_probs = torch.cat([torch.stack(batch) for batch in class_probs])
    test_label = torch.cat(class_label)
    for class_index in range(len(classes)):
        tensorboard_truth = test_label == class_index
        tensorboard_probs = test_probs[:, class_index]
        writer.add_pr_curve(classes[class_index], tensorboard_truth, tensorboard_probs, global_step=0)


def original(root: Path, epochs: int = 1) -> Net:
    torch.manual_seed(0)
    net = Net()
    trainloader, testloader = loaders()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    writer = SummaryWriter(str(root / 'runs/fashion_mnist_experiment_1'))
    net.running_loss = 0.0
    for epoch in range(epochs):
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            net.write_loss(writer, loss, epoch, i, len(trainloader))
    class_probs = []
    class_label = []
    with torch.no_grad():
        for data in testloader:
            images, labels = data
            output = net(images)
            class_probs.append([F.softmax(el, dim=0) for el in output])
            class_label.append(labels)
    write_pr_curves(writer, class_probs, class_label)
    writer.close()
    return net


def main(root: Path, epochs: int = 1) -> dict[str, Any]:
    torch.manual_seed(0)
    net = Net()
    trainloader, testloader = loaders()
    logger = TensorBoardLogger(str(root), name="fashion_mnist_experiment_1")
    trainer = L.Trainer(max_epochs=epochs, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(net, trainloader)
    trainer.test(net, testloader, verbose=False)
    logger.experiment.flush()
    return {"model": net, "trainer": trainer, "log_dir": logger.log_dir}
