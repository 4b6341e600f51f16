"""beginner_source/blitz/cifar10_tutorial.py ("Training a Classifier"), ported to a `Module`.

The tutorial's loop: SGD with momentum at 1e-3, `nn.CrossEntropyLoss`, a shuffled training
loader of batch 4, `zero_grad`, forward, backward, step, and the running loss printed every
`PRINT_EVERY` mini-batches (the tutorial's 2000); after two epochs the accuracy over the
test set and per class, under `torch.no_grad()`, with the model never put in eval mode (it
has no dropout or batch norm). The port trains with `Trainer.fit` and counts the same
numbers in `test_step` under `Trainer.test`; both runs print the same lines and end on the
same weights (`torch.equal`).

Differences from the tutorial, for speed and with no download: torchvision's CIFAR-10 is
replaced by 40 training and 12 test images of the same shape (3x32x32, normalised to
[-1, 1], ten classes) drawn from a seeded generator; `num_workers=0` instead of 2 (worker
processes would only slow a test of this size down). `Net` is the tutorial's, unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

PRINT_EVERY = 4
pytestmark = pytest.mark.usefixtures("one_thread")
classes = ('plane', 'car', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.criterion = nn.CrossEntropyLoss()
        self.printed: list[str] = []
        self.running_loss = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    def print_statistics(self, epoch: int, i: int, loss: torch.Tensor) -> None:
        self.running_loss += loss.item()
        if i % PRINT_EVERY == PRINT_EVERY - 1:
            self.printed.append(f'[{epoch + 1}, {i + 1:5d}] loss: {self.running_loss / PRINT_EVERY:.3f}')
            self.running_loss = 0.0

    def count(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """The tutorial's two test loops in one: overall and per-class correct counts."""
        outputs = self(images)
        _, predicted = torch.max(outputs.data, 1)
        self.total += labels.size(0)
        self.correct += (predicted == labels).sum().item()
        for label, prediction in zip(labels, predicted):
            if label == prediction:
                self.correct_pred[classes[label]] += 1
            self.total_pred[classes[label]] += 1

    def reset_counts(self) -> None:
        self.correct, self.total = 0, 0
        self.correct_pred = {classname: 0 for classname in classes}
        self.total_pred = {classname: 0 for classname in classes}

    def print_accuracy(self) -> None:
        self.printed.append(f'Accuracy of the network on the test images: {100 * self.correct // self.total} %')
        for classname, correct_count in self.correct_pred.items():
            accuracy = 100 * float(correct_count) / max(self.total_pred[classname], 1)
            self.printed.append(f'Accuracy for class: {classname:5s} is {accuracy:.1f} %')

    # the port
    def on_train_epoch_start(self) -> None:
        self.running_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        loss = self.criterion(self(inputs), labels)
        self.print_statistics(self.current_epoch, batch_idx, loss)
        return loss

    def on_test_epoch_start(self) -> None:
        self.reset_counts()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.count(*batch)

    def on_test_epoch_end(self) -> None:
        self.print_accuracy()

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.001, momentum=0.9)


def cifar10_like() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    trainset = TensorDataset(torch.rand(40, 3, 32, 32, generator=g) * 2 - 1, torch.randint(0, 10, (40,), generator=g))
    testset = TensorDataset(torch.rand(12, 3, 32, 32, generator=g) * 2 - 1, torch.randint(0, 10, (12,), generator=g))
    return DataLoader(trainset, batch_size=4, shuffle=True), DataLoader(testset, batch_size=4, shuffle=False)


def original(epochs: int = 2) -> Net:
    torch.manual_seed(0)
    net = Net()
    trainloader, testloader = cifar10_like()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    for epoch in range(epochs):  # loop over the dataset multiple times
        net.running_loss = 0.0
        for i, data in enumerate(trainloader, 0):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            net.print_statistics(epoch, i, loss)
    net.printed.append('Finished Training')
    net.reset_counts()
    with torch.no_grad():  # the tutorial never calls net.eval(): the net has nothing that needs it
        for images, labels in testloader:
            net.count(images, labels)
    net.print_accuracy()
    return net


def ported(epochs: int = 2) -> Net:
    torch.manual_seed(0)
    net = Net()
    trainloader, testloader = cifar10_like()
    trainer = Trainer(max_epochs=epochs, **QUIET)
    trainer.fit(net, trainloader)
    net.printed.append('Finished Training')
    trainer.test(net, testloader)
    return net


def test_the_port_trains_to_the_tutorials_weights_and_prints_its_lines() -> None:
    net, reference = ported(), original()
    assert_same_weights(net, reference)
    assert net.printed == reference.printed
    assert len(net.printed) == 2 * (10 // PRINT_EVERY) + 1 + 1 + len(classes)
    assert net.total == 12


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported(epochs=1), original())
