"""intermediate_source/spatial_transformer_tutorial.py, ported to a `Module`.

The tutorial's `Net`: a spatial transformer (`localization` convolutions, `fc_loc` regressing
the 2x3 affine matrix, its last layer initialised to the identity; `affine_grid` and
`grid_sample`) in front of the MNIST LeNet with dropout; `SGD(lr=0.01)`; per epoch
`train(epoch)` (`model.train()`, `zero_grad`, `nll_loss`, backward, step, a line every
`LOG_INTERVAL` batches) and `test()` (`model.eval()` under `no_grad`, the summed loss and the
correct count over the dataset), both loaders shuffled; then `visualize_stn()` runs
`model.stn` on the first batch of the test loader under `no_grad`.

The port trains with `Trainer.fit`, the tutorial's `test()` as its validation, and prints the
same lines; its weights, its lines and the transformed batch of `visualize_stn` are the
tutorial's (`torch.equal`).

Differences from the tutorial, with no download: MNIST is 64 training and 16 test random
28x28 images (the network's sizes need 28x28), normalised as the tutorial's transform does;
batches of 16 instead of 64, 2 epochs instead of 20.
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

pytestmark = [pytest.mark.usefixtures("one_thread"),  # the tutorial leaves align_corners unset:
              pytest.mark.filterwarnings("ignore:Default grid_sample and affine_grid behavior")]
LOG_INTERVAL, EPOCHS = 2, 2


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        # Spatial transformer localization-network
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True)
        )
        # Regressor for the 3 * 2 affine matrix
        self.fc_loc = nn.Sequential(
            nn.Linear(10 * 3 * 3, 32),
            nn.ReLU(True),
            nn.Linear(32, 3 * 2)
        )
        # Initialize the weights/bias with identity transformation
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
        self.printed: list[str] = []

    # Spatial transformer network forward function
    def stn(self, x: torch.Tensor) -> torch.Tensor:
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size())
        x = F.grid_sample(x, grid)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # transform the input
        x = self.stn(x)
        # Perform the usual forward pass
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)

    def log_train(self, epoch: int, batch_idx: int, data: torch.Tensor, size: int, batches: int,
                  loss: torch.Tensor) -> None:
        if batch_idx % LOG_INTERVAL == 0:
            self.printed.append('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), size, 100. * batch_idx / batches, loss.item()))

    def start_test(self) -> None:
        self.test_loss, self.correct = 0.0, 0

    def test_batch(self, data: torch.Tensor, target: torch.Tensor) -> None:
        output = self(data)
        # sum up batch loss
        self.test_loss += F.nll_loss(output, target, reduction='sum').item()
        # get the index of the max log-probability
        pred = output.max(1, keepdim=True)[1]
        self.correct += pred.eq(target.view_as(pred)).sum().item()

    def end_test(self, size: int) -> None:
        self.test_loss /= size
        self.printed.append('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
            self.test_loss, self.correct, size, 100. * self.correct / size))

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        data, target = batch
        loss = F.nll_loss(self(data), target)
        loader = self.trainer.train_dataloader
        self.log_train(self.current_epoch + 1, batch_idx, data, len(loader.dataset), len(loader), loss)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.start_test()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.test_batch(*batch)

    def on_validation_epoch_end(self) -> None:
        self.end_test(len(self.trainer.val_dataloaders.dataset))

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.01)


def mnist_like() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)

    def dataset(n: int) -> TensorDataset:  # transforms.Normalize((0.1307,), (0.3081,)) of [0, 1] images
        return TensorDataset((torch.rand(n, 1, 28, 28, generator=g) - 0.1307) / 0.3081,
                             torch.randint(0, 10, (n,), generator=g))

    return (DataLoader(dataset(64), batch_size=16, shuffle=True),
            DataLoader(dataset(16), batch_size=16, shuffle=True))


def visualize_stn(model: Net, test_loader: DataLoader) -> torch.Tensor:
    with torch.no_grad():
        # Get a batch of training data
        data = next(iter(test_loader))[0]
        return model.stn(data).cpu()


def original(epochs: int = EPOCHS) -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    model = Net()
    train_loader, test_loader = mnist_like()
    optimizer = optim.SGD(model.parameters(), lr=0.01)

    def train(epoch: int) -> None:
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            model.log_train(epoch, batch_idx, data, len(train_loader.dataset), len(train_loader), loss)

    def test() -> None:
        with torch.no_grad():
            model.eval()
            model.start_test()
            for data, target in test_loader:
                model.test_batch(data, target)
            model.end_test(len(test_loader.dataset))

    for epoch in range(1, epochs + 1):
        train(epoch)
        test()
    return model, visualize_stn(model, test_loader)


def ported(epochs: int = EPOCHS) -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    model = Net()
    train_loader, test_loader = mnist_like()
    Trainer(max_epochs=epochs, **QUIET).fit(model, train_loader, test_loader)
    return model, visualize_stn(model, test_loader)


def test_the_port_trains_to_the_tutorials_weights_and_transforms_the_same_batch() -> None:
    (model, transformed), (reference, expected) = ported(), original()
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == EPOCHS * (2 + 1)
    assert torch.equal(transformed, expected)


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported(epochs=1)[0], original()[0])
