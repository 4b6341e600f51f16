"""pytorch/examples' siamese_network at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_siamese_network.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Two images through one shared feature extractor (conv + BatchNorm), concatenated features,
an MLP and a sigmoid, BCELoss; pairs drawn in the dataset's __getitem__ with Python's
`random` (same class for even indices, different for odd); Adadelta(lr=1.0), StepLR(gamma=0.7)
after each epoch's test pass; unshuffled loaders (the example shuffles only on accelerators).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


class SiameseNetwork(Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                                      nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
        self.sigmoid = nn.Sigmoid()
        self.features.apply(self.init_weights)
        self.fc.apply(self.init_weights)
        self.criterion = nn.BCELoss()
        self.results: list[tuple[float, int]] = []

    def init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x: torch.Tensor) -> torch.Tensor:
        output = self.features(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1: torch.Tensor, input2: torch.Tensor) -> torch.Tensor:
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))

    def loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        images_1, images_2, targets = batch
        outputs = self(images_1, images_2).squeeze().float()  # BCELoss is autocast-unsafe: float32
        return self.criterion(outputs, targets), outputs

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)[0]

    def on_validation_epoch_start(self) -> None:
        self.test_loss, self.correct = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, outputs = self.loss(batch)
        self.test_loss += loss.sum().item()
        pred = torch.where(outputs > 0.5, 1, 0)
        self.correct += pred.eq(batch[2].view_as(pred)).sum().item()

    def on_validation_epoch_end(self) -> None:
        self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=1.0)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


class AppMatcher(Dataset):
    """APP_MATCHER over synthetic 8x8 uint8 digits, three of each class."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        targets = torch.arange(10).repeat(3)
        self.data = torch.randint(0, 256, (len(targets), 1, 8, 8), generator=g, dtype=torch.uint8)
        self.grouped_examples = {i: np.where(targets.numpy() == i)[0] for i in range(10)}

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        selected_class = random.randint(0, 9)
        random_index_1 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
        image_1 = self.data[self.grouped_examples[selected_class][random_index_1]].clone().float()
        if index % 2 == 0:
            random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            while random_index_2 == random_index_1:
                random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            image_2 = self.data[self.grouped_examples[selected_class][random_index_2]].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other_selected_class = random.randint(0, 9)
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)
            random_index_2 = random.randint(0, self.grouped_examples[other_selected_class].shape[0] - 1)
            image_2 = self.data[self.grouped_examples[other_selected_class][random_index_2]].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def make_siamese() -> tuple[SiameseNetwork, DataLoader, DataLoader]:
    torch.manual_seed(1)
    random.seed(1)  # the script never seeds Python's generator; both versions do, the same way
    train_loader = DataLoader(AppMatcher(8), batch_size=8)
    test_loader = DataLoader(AppMatcher(9), batch_size=12)
    return SiameseNetwork(), train_loader, test_loader


def original_siamese(precision: str, epochs: int = 2) -> SiameseNetwork:
    model, train_loader, test_loader = make_siamese()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    def train() -> None:
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            with autocast():
                loss = model.loss(batch)[0]
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    def test() -> None:
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for batch in test_loader:
                with autocast():
                    loss, outputs = model.loss(batch)
                test_loss += loss.sum().item()
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(batch[2].view_as(pred)).sum().item()
        model.results.append((test_loss / len(test_loader.dataset), correct))

    for _ in range(epochs):
        train()
        test()
        scheduler.step()
    return model
