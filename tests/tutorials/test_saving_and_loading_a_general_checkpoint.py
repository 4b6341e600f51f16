"""recipes_source/recipes/saving_and_loading_a_general_checkpoint.py, with the Trainer on either side.

The recipe saves `{'epoch': EPOCH, 'model_state_dict': ..., 'optimizer_state_dict': ...,
'loss': LOSS}` with `torch.save`, and loads it into a fresh `Net()` and `optim.SGD(lr=0.001,
momentum=0.9)` (`torch.load(PATH, weights_only=True)`, `load_state_dict` on both,
`model.train()` to resume training). Its `Net` is the CIFAR-10 classifier, trained here by
that tutorial's loop (tests/tutorials/test_cifar10_tutorial.py, same synthetic data).

What a user expects, each checked against the recipe's own continuation (a fresh process:
`torch.manual_seed(1)`, build, load, train the remaining epochs), with `torch.equal`:
- the recipe's file, continued by the Trainer: `ckpt_path` refuses it and says what to write
  (the weights loaded before fit, the optimizer's state in `configure_optimizers`,
  `max_epochs` = the epochs still to train); written that way it ends on the same weights;
- a file the Trainer wrote (`trainer.save_checkpoint`), continued by the recipe's code
  through the Lightning keys (`["state_dict"]`, `["optimizer_states"][0]`) and
  `["loop"]["epoch"]` for the epochs done (`["epoch"]` is the number Lightning's
  `ModelCheckpoint` writes at an epoch's end: the epoch that ended, one less).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn, optim
from torch.utils.data import DataLoader

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.tutorials.test_cifar10_tutorial import Net, cifar10_like
from trainer import Trainer
from trainer.checkpoint import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")
EPOCH, EPOCHS = 2, 3  # saved after EPOCH epochs, continued up to EPOCHS


def train(net: nn.Module, optimizer: optim.Optimizer, trainloader: DataLoader, epochs: int) -> torch.Tensor:
    """The CIFAR-10 tutorial's loop; the last loss."""
    criterion = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for inputs, labels in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(inputs), labels)
            loss.backward()
            optimizer.step()
    return loss


def saved_by_the_recipe(path: Path) -> Path:
    torch.manual_seed(0)
    net = Net()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    loss = train(net, optimizer, cifar10_like()[0], EPOCH)
    torch.save({'epoch': EPOCH, 'model_state_dict': net.state_dict(), 'optimizer_state_dict': optimizer.state_dict(),
                'loss': loss.item()}, path)
    return path


def continued_by_the_recipe(path: Path, read: Callable[[dict[str, Any]], tuple[Any, Any, int]]) -> Net:
    """The recipe's loading code; `read(checkpoint)`: the weights, the optimizer's state and the
    epochs done, by the keys of the file at hand."""
    torch.manual_seed(1)
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    checkpoint = torch.load(path, weights_only=True)
    weights, optimizer_state, epoch = read(checkpoint)
    model.load_state_dict(weights)
    optimizer.load_state_dict(optimizer_state)
    model.train()
    train(model, optimizer, cifar10_like()[0], EPOCHS - epoch)
    return model


def the_recipes_continuation(tmp_path: Path) -> Net:
    return continued_by_the_recipe(saved_by_the_recipe(tmp_path / "model.pt"), lambda checkpoint: (
        checkpoint['model_state_dict'], checkpoint['optimizer_state_dict'], checkpoint['epoch']))


class Continued(Net):
    """What the refusal says to write: the optimizer's state loaded where it is built."""

    def __init__(self, checkpoint: dict[str, Any]) -> None:
        super().__init__()
        self.checkpoint = checkpoint

    def configure_optimizers(self) -> Any:
        optimizer = super().configure_optimizers()
        optimizer.load_state_dict(self.checkpoint['optimizer_state_dict'])
        return optimizer


def test_ckpt_path_refuses_the_recipes_file_and_says_what_to_write(tmp_path: Path) -> None:
    path = saved_by_the_recipe(tmp_path / "model.pt")
    with pytest.raises(CheckpointError) as refused:
        Trainer(max_epochs=EPOCHS, **QUIET).fit(Net(), cifar10_like()[0], ckpt_path=path)
    message = str(refused.value)
    assert "model.pt" in message and "['epoch', 'model_state_dict', 'optimizer_state_dict', 'loss']" in message
    assert "module.load_state_dict(ckpt['model_state_dict'])" in message
    assert "optimizer.load_state_dict(ckpt['optimizer_state_dict'])" in message
    assert "max_epochs counts the epochs still to train" in message


def test_the_recipes_file_continued_as_the_refusal_says_ends_on_the_recipes_weights(tmp_path: Path) -> None:
    path = saved_by_the_recipe(tmp_path / "model.pt")
    torch.manual_seed(1)
    checkpoint = torch.load(path, weights_only=True)
    model = Continued(checkpoint)
    model.load_state_dict(checkpoint['model_state_dict'])
    Trainer(max_epochs=EPOCHS - checkpoint['epoch'], **QUIET).fit(model, cifar10_like()[0])
    assert_same_weights(model, the_recipes_continuation(tmp_path))


def test_a_file_the_trainer_wrote_continued_by_the_recipes_code(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trainer = Trainer(max_epochs=EPOCH, **QUIET)
    trainer.fit(Net(), cifar10_like()[0])
    trainer.save_checkpoint(tmp_path / "trainer.ckpt")
    model = continued_by_the_recipe(tmp_path / "trainer.ckpt", lambda checkpoint: (
        checkpoint['state_dict'], checkpoint['optimizer_states'][0], checkpoint['loop']['epoch']))
    assert_same_weights(model, the_recipes_continuation(tmp_path))
    # ['epoch'] is Lightning's ModelCheckpoint number, the epoch that ended, for a save after fit too
    # (Lightning's trainer.save_checkpoint after fit writes the next one; docs/checkpoints.md):
    # the epochs done are ['loop']['epoch'], where the file continues
    saved = torch.load(tmp_path / "trainer.ckpt", weights_only=True)
    assert (saved['epoch'], saved['loop']['epoch']) == (EPOCH - 1, EPOCH)


def test_the_comparison_can_fail(tmp_path: Path) -> None:
    """Without the optimizer's state (its momentum), the continuation ends elsewhere."""
    path = saved_by_the_recipe(tmp_path / "model.pt")
    torch.manual_seed(1)
    checkpoint = torch.load(path, weights_only=True)
    model = Net()
    model.load_state_dict(checkpoint['model_state_dict'])
    Trainer(max_epochs=EPOCHS - checkpoint['epoch'], **QUIET).fit(model, cifar10_like()[0])
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, the_recipes_continuation(tmp_path))
