"""beginner_source/transfer_learning_tutorial.py, both halves, ported to a `Module`.

The tutorial's `train_model`: per epoch a 'train' phase (`model.train()`, `zero_grad`,
forward under `set_grad_enabled`, backward, step, then `scheduler.step()`) and a 'val'
phase (`model.eval()`), both loaders shuffled, each printing its loss and accuracy
(`running_corrects.double() / dataset_size`); the weights of the best validation accuracy
(strictly better than the best so far, starting from 0) are copied and loaded back at the
end. Two uses: finetuning the whole network (`SGD(model.parameters(), lr=0.001,
momentum=0.9)`) and the network as a fixed feature extractor (every parameter frozen with
`requires_grad = False`, a new `fc`, `SGD(model.fc.parameters(), ...)`); `StepLR(step_size=7,
gamma=0.1)` for both. The training images are augmented by a random horizontal flip drawn
from torch's generator, as torchvision's `RandomHorizontalFlip` does.

The ports, as a Lightning user writes them: the tutorial's statistics in the step methods,
the best-weights copy in `on_validation_epoch_end` (skipped during the sanity check, which
sees two batches only) and loaded back in `on_fit_end`; or `ModelCheckpoint(monitor="val_acc",
mode="max")` and its `best_model_path` loaded afterwards. Both end on the tutorial's
weights, print its lines, and the frozen backbone's batch-norm statistics move in train mode
as the tutorial's do.

Differences from the tutorial, for speed and with no download: torchvision's pretrained
ResNet-18 is replaced by `TinyResNet` (a convolution, batch norm, ReLU, global pooling and
an `fc` layer with its `in_features`, seeded instead of pretrained); the hymenoptera images
by 16 training and 8 validation 3x16x16 images of two classes; 9 epochs instead of 25 (the
learning rate still decays once, after epoch 7); `num_workers=0` instead of 4.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn, optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

from callbacks import ModelCheckpoint
from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET, QUIET_WITH_SANITY_CHECK
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
NUM_EPOCHS = 9
class_names = ["ants", "bees"]


class TinyResNet(nn.Module):
    """What the tutorial uses of resnet18: a backbone with batch norm and an `fc` head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.relu(self.bn1(self.conv1(x)))), 1))


def make_model(fixed_feature_extractor: bool) -> nn.Module:
    model = TinyResNet()
    if fixed_feature_extractor:
        for param in model.parameters():
            param.requires_grad = False
    # Parameters of newly constructed modules have requires_grad=True by default
    num_ftrs = model.fc.in_features
    model.fc = nn.Linear(num_ftrs, len(class_names))
    return model


def make_optimizer(model: nn.Module, fixed_feature_extractor: bool) -> tuple[Any, Any]:
    params = model.fc.parameters() if fixed_feature_extractor else model.parameters()
    optimizer = optim.SGD(params, lr=0.001, momentum=0.9)
    # Decay LR by a factor of 0.1 every 7 epochs
    return optimizer, lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.1)


class Hymenoptera(Dataset):
    def __init__(self, train: bool) -> None:
        g = torch.Generator().manual_seed(0 if train else 1)
        n = 16 if train else 8
        self.labels = torch.arange(n) % 2
        self.images = torch.randn(n, 3, 16, 16, generator=g) + self.labels.view(-1, 1, 1, 1) * 0.5
        self.train = train

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[i]
        if self.train and torch.rand(1) < 0.5:  # transforms.RandomHorizontalFlip()
            image = image.flip(-1)
        return image, self.labels[i]


def dataloaders() -> dict[str, DataLoader]:
    return {x: DataLoader(Hymenoptera(x == 'train'), batch_size=4, shuffle=True) for x in ['train', 'val']}


dataset_sizes = {'train': 16, 'val': 8}


class Statistics:
    """The tutorial's running loss and corrects of a phase, and the line it prints."""

    def __init__(self) -> None:
        self.running_loss, self.running_corrects = 0.0, 0

    def add(self, outputs: torch.Tensor, loss: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        _, preds = torch.max(outputs, 1)
        self.running_loss += loss.item() * inputs.size(0)
        self.running_corrects += torch.sum(preds == labels.data)  # type: ignore[assignment]

    def line(self, phase: str) -> tuple[str, torch.Tensor]:
        epoch_loss = self.running_loss / dataset_sizes[phase]
        epoch_acc = self.running_corrects.double() / dataset_sizes[phase]  # type: ignore[attr-defined]
        return f'{phase} Loss: {epoch_loss:.4f} Acc: {epoch_acc:.4f}', epoch_acc


def original(fixed_feature_extractor: bool) -> tuple[nn.Module, dict[tuple[int, str], str]]:
    torch.manual_seed(0)
    model = make_model(fixed_feature_extractor)
    optimizer, scheduler = make_optimizer(model, fixed_feature_extractor)
    criterion, loaders, printed = nn.CrossEntropyLoss(), dataloaders(), {}
    best_model_wts = copy.deepcopy(model.state_dict())
    best_acc = 0.0
    for epoch in range(NUM_EPOCHS):
        for phase in ['train', 'val']:
            if phase == 'train':
                model.train()  # Set model to training mode
            else:
                model.eval()   # Set model to evaluate mode
            statistics = Statistics()
            for inputs, labels in loaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == 'train'):
                    outputs = model(inputs)
                    loss = criterion(outputs, labels)
                    if phase == 'train':
                        loss.backward()
                        optimizer.step()
                statistics.add(outputs, loss, inputs, labels)
            if phase == 'train':
                scheduler.step()
            printed[epoch, phase], epoch_acc = statistics.line(phase)
            if phase == 'val' and epoch_acc > best_acc:
                best_acc = epoch_acc  # type: ignore[assignment]
                best_model_wts = copy.deepcopy(model.state_dict())
    model.load_state_dict(best_model_wts)
    return model, printed


class TransferLearning(Module):
    def __init__(self, fixed_feature_extractor: bool, keep_best: bool = True) -> None:
        super().__init__()
        self.fixed_feature_extractor, self.keep_best = fixed_feature_extractor, keep_best
        self.model = make_model(fixed_feature_extractor)
        self.criterion = nn.CrossEntropyLoss()
        self.printed: dict[tuple[int, str], str] = {}
        self.best_acc = 0.0
        self.best_model_wts = copy.deepcopy(self.model.state_dict())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def on_train_epoch_start(self) -> None:
        self.statistics = Statistics()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, labels = batch
        outputs = self(inputs)
        loss = self.criterion(outputs, labels)
        self.statistics.add(outputs, loss, inputs, labels)
        return loss

    def on_train_epoch_end(self) -> None:  # after the validation at the epoch's end, as in Lightning
        self.printed[self.current_epoch, 'train'] = self.statistics.line('train')[0]

    def on_validation_epoch_start(self) -> None:
        self.val_statistics = Statistics()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, labels = batch
        outputs = self(inputs)
        self.val_statistics.add(outputs, self.criterion(outputs, labels), inputs, labels)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.printed[self.current_epoch, 'val'], epoch_acc = self.val_statistics.line('val')
        self.log("val_acc", epoch_acc)
        if self.keep_best and epoch_acc > self.best_acc:
            self.best_acc = epoch_acc  # type: ignore[assignment]
            self.best_model_wts = copy.deepcopy(self.model.state_dict())

    def on_fit_end(self) -> None:
        if self.keep_best:
            self.model.load_state_dict(self.best_model_wts)

    def configure_optimizers(self) -> Any:
        return make_optimizer(self.model, self.fixed_feature_extractor)


@pytest.mark.parametrize("fixed_feature_extractor", [False, True], ids=["finetuning", "fixed_feature_extractor"])
def test_the_port_keeps_the_tutorials_best_weights_and_prints_its_lines(fixed_feature_extractor: bool) -> None:
    torch.manual_seed(0)
    module = TransferLearning(fixed_feature_extractor)
    loaders = dataloaders()
    Trainer(max_epochs=NUM_EPOCHS, **QUIET_WITH_SANITY_CHECK).fit(module, loaders['train'], loaders['val'])
    model, printed = original(fixed_feature_extractor)
    assert_same_weights(module.model, model)
    assert module.printed == printed and len(printed) == 2 * NUM_EPOCHS
    if fixed_feature_extractor:  # frozen, but in train mode: batch norm's running statistics moved
        assert not torch.equal(model.bn1.running_mean, torch.zeros(8))


def test_model_checkpoint_keeps_the_same_best_weights(tmp_path: Path) -> None:
    """`ModelCheckpoint(monitor="val_acc", mode="max")` replaces only on a strictly better value,
    as the tutorial's `epoch_acc > best_acc` does."""
    torch.manual_seed(0)
    module = TransferLearning(fixed_feature_extractor=False, keep_best=False)
    loaders = dataloaders()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_acc", mode="max")
    trainer = Trainer(max_epochs=NUM_EPOCHS, callbacks=[checkpoint], root_dir=tmp_path,
                      **dict(QUIET, enable_checkpointing=True))
    trainer.fit(module, loaders['train'], loaders['val'])
    module.load_state_dict(torch.load(checkpoint.best_model_path, weights_only=True)["state_dict"])
    model, printed = original(fixed_feature_extractor=False)
    assert_same_weights(module.model, model)
    assert module.printed == printed


def test_the_comparison_can_fail() -> None:
    """Without loading the best weights back, the last epoch's weights differ (here, they do)."""
    torch.manual_seed(0)
    module = TransferLearning(fixed_feature_extractor=False, keep_best=False)
    loaders = dataloaders()
    Trainer(max_epochs=NUM_EPOCHS, **QUIET).fit(module, loaders['train'], loaders['val'])
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(module.model, original(fixed_feature_extractor=False)[0])
