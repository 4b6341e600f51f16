"""The LightningModule's loop overrides against real Lightning, in one process.

`SOURCE` is a small project written with this package's imports; its Lightning twin is the same
text with only the import lines rewritten (`lightning_source`). Each case trains both with the
same seed and data and compares every weight with `torch.equal`.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import lightning_source, load_source

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningDataModule, LightningModule, Trainer, seed_everything


class Net(LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.lr = lr
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class WarmUpAfter(Net):
    """Lightning's documented warm-up: step, then set the next step's learning rate."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        optimizer.step(closure=optimizer_closure)
        if self.trainer.global_step < 5:
            scale = min(1.0, float(self.trainer.global_step + 1) / 5.0)
            for pg in optimizer.param_groups:
                pg["lr"] = scale * self.lr


class WarmUpSuper(Net):
    """Set the learning rate, then the default step through super()."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        for pg in optimizer.param_groups:
            pg["lr"] = self.lr * min(1.0, (self.trainer.global_step + 1) / 4)
        self.seen.append((epoch, batch_idx, self.trainer.global_step))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)


class SkipOdd(Net):
    """Runs the closure but skips every other step."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        if self.trainer.global_step % 2:
            optimizer_closure()
        else:
            optimizer.step(closure=optimizer_closure)


class ZeroEveryOther(Net):
    """Zeroes only at every fourth batch: gradients carry over windows."""

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.seen.append((epoch, batch_idx, self.trainer.global_step))
        if batch_idx % 4 == 0:
            optimizer.zero_grad()


class ClipOwn(Net):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.seen.append((gradient_clip_val, gradient_clip_algorithm))
        self.clip_gradients(optimizer, gradient_clip_val=0.05, gradient_clip_algorithm="value")


class HalfBackward(Net):
    def backward(self, loss, *args, **kwargs):
        (loss * 0.5).backward(*args, **kwargs)


class Decay:
    """A scheduler that is not torch's (as timm's): step(t) sets the learning rate."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self, t):
        for pg in self.optimizer.param_groups:
            pg["lr"] = 0.1 / (1 + t)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class CustomScheduler(Net):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": Decay(opt), "interval": "step"}}

    def lr_scheduler_step(self, scheduler, metric):
        self.seen.append((self.trainer.global_step, metric))
        scheduler.step(self.trainer.global_step)


class CustomSchedulerNoHook(CustomScheduler):
    lr_scheduler_step = Net.lr_scheduler_step


class Plateau(Net):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}

    def lr_scheduler_step(self, scheduler, metric):
        self.seen.append(round(float(metric), 4))
        scheduler.step(metric)


class Transfer(Net):
    def on_before_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        self.seen.append(("before", dataloader_idx, self.trainer.training))
        return x * 0.5, y

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self.seen.append(("transfer", str(device), dataloader_idx))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x, y + 1


class KeepDropout(Net):
    """Validation with dropout on (Monte-Carlo dropout): the random streams move."""

    def on_validation_model_eval(self):
        self.eval()
        self.net[1].train()

    def on_validation_model_train(self):
        self.seen.append(self.net[1].training)
        self.train()


class Data(LightningDataModule):
    def __init__(self):
        super().__init__()
        self.x, self.y = torch.randn(64, 8), torch.randn(64, 1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=8, shuffle=True)

    def val_dataloader(self):
        return DataLoader(TensorDataset(self.x[:16], self.y[:16]), batch_size=8)

    def on_before_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x - 1, y


def main(root, name, precision="32-true", accumulate=1, clip=None, datamodule=False, validate=False, epochs=2):
    seed_everything(0)
    model = globals()[name]()
    trainer = Trainer(
        default_root_dir=root, max_epochs=epochs, precision=precision, accumulate_grad_batches=accumulate,
        gradient_clip_val=clip, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=2 if validate else 0,
    )
    data = Data()
    if datamodule:
        trainer.fit(model, datamodule=data)
    else:
        trainer.fit(model, data.train_dataloader(), data.val_dataloader() if validate else None)
    return model, trainer
'''

def load(framework: str) -> types.ModuleType:
    return load_source(SOURCE, framework, "overridable_hooks")


def both(tmp_path: Path, name: str, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
    ours, ours_trainer = load("ours").main(tmp_path / "ours", name, **kwargs)
    theirs, theirs_trainer = load("lightning").main(tmp_path / "lightning", name, **kwargs)
    return ours, ours_trainer, theirs, theirs_trainer


def assert_same(ours: Any, theirs: Any) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"weights differ from Lightning's: {different}"


def test_the_project_differs_from_lightnings_only_in_imports() -> None:
    changed = [(a, b) for a, b in zip(SOURCE.split("\n"), lightning_source(SOURCE).split("\n")) if a != b]
    assert changed and all(a.startswith("from trainer import") for a, _ in changed)


@pytest.mark.parametrize("name", ["WarmUpAfter", "WarmUpSuper"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize(("accumulate", "clip"), [(1, None), (2, None), (1, 0.5), (2, 0.5)])
def test_optimizer_step_warm_up_as_lightning(tmp_path: Path, name: str, precision: str, accumulate: int, clip: Any) -> None:
    ours, ours_trainer, theirs, theirs_trainer = both(tmp_path, name, precision=precision, accumulate=accumulate, clip=clip)
    assert_same(ours, theirs)
    assert ours_trainer.global_step == theirs_trainer.global_step == 16 // accumulate
    assert ours.seen == theirs.seen  # (epoch, batch_idx, global_step) at each call
    assert ours_trainer.optimizers[0].param_groups[0]["lr"] == theirs_trainer.optimizers[0].param_groups[0]["lr"]
    plain, _ = load("ours").main(tmp_path / "plain", "Net", precision=precision, accumulate=accumulate, clip=clip)
    assert not torch.equal(plain.net[0].weight, ours.net[0].weight)  # the warm-up changed the run


def test_a_step_the_override_skips_is_counted_as_lightning_counts_it(tmp_path: Path) -> None:
    ours, ours_trainer, theirs, theirs_trainer = both(tmp_path, "SkipOdd", accumulate=2)
    assert_same(ours, theirs)
    assert ours_trainer.global_step == theirs_trainer.global_step == 8


@pytest.mark.parametrize("accumulate", [1, 2])
def test_optimizer_zero_grad_runs_where_lightning_runs_it(tmp_path: Path, accumulate: int) -> None:
    ours, _, theirs, _ = both(tmp_path, "ZeroEveryOther", accumulate=accumulate)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen and len(ours.seen) == 16 // accumulate


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_configure_gradient_clipping_as_lightning(tmp_path: Path, precision: str) -> None:
    ours, _, theirs, _ = both(tmp_path, "ClipOwn", precision=precision, accumulate=2)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen == [(None, None)] * 8
    untouched, _, _, _ = both(tmp_path / "plain", "Net", precision=precision, accumulate=2)
    assert not torch.equal(untouched.net[0].weight, ours.net[0].weight)  # the clip did something


def test_clip_gradients_refuses_a_value_that_disagrees_with_the_trainer(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"gradient_clip_val=0.5\) and clip_gradients\(gradient_clip_val=0.05\)"):
        load("ours").main(tmp_path, "ClipOwn", clip=0.5)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_backward_override_as_lightning(tmp_path: Path, precision: str) -> None:
    ours, _, theirs, _ = both(tmp_path, "HalfBackward", precision=precision, accumulate=2)
    assert_same(ours, theirs)


def test_lr_scheduler_step_steps_a_scheduler_that_is_not_torchs(tmp_path: Path) -> None:
    ours, ours_trainer, theirs, theirs_trainer = both(tmp_path, "CustomScheduler", accumulate=2)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen == [(step, None) for step in range(1, 9)]
    assert ours_trainer.optimizers[0].param_groups[0]["lr"] == 0.1 / 9


def test_a_scheduler_that_is_not_torchs_needs_lr_scheduler_step(tmp_path: Path) -> None:
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match="lr_scheduler_step"):
        load("lightning").main(tmp_path / "l", "CustomSchedulerNoHook")
    with pytest.raises(ValueError, match=r"Decay does not follow PyTorch's LRScheduler API.*lr_scheduler_step"):
        load("ours").main(tmp_path / "o", "CustomSchedulerNoHook")


def test_lr_scheduler_step_receives_the_monitored_metric(tmp_path: Path) -> None:
    ours, _, theirs, _ = both(tmp_path, "Plateau", validate=True, epochs=3)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen and len(ours.seen) == 3


@pytest.mark.parametrize("datamodule", [False, True])
def test_batch_transfer_hooks_as_lightning(tmp_path: Path, datamodule: bool) -> None:
    with pytest.warns(UserWarning, match="on_before_batch_transfer") if datamodule else _nothing():
        ours, _, theirs, _ = both(tmp_path, "Transfer", datamodule=datamodule, validate=True)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen
    assert ("transfer", "cpu", 0) in ours.seen
    # in training and validation; the DataModule's on_before_batch_transfer replaces the module's
    assert ("before", 0, True) in ours.seen and ("before", 0, False) in ours.seen or datamodule
    assert not any(seen[0] == "before" for seen in ours.seen) or not datamodule


def test_model_eval_and_train_hooks_as_lightning(tmp_path: Path) -> None:
    ours, _, theirs, _ = both(tmp_path, "KeepDropout", validate=True)
    assert_same(ours, theirs)
    assert ours.seen == theirs.seen == [True, True]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


MANUAL = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningModule, Trainer, seed_everything


class Manual(LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(4, 1)
        self.calls = 0

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        x, y = batch
        self.manual_backward(torch.nn.functional.mse_loss(self.net(x), y))
        opt.step()

    def backward(self, loss, *args, **kwargs):
        self.calls += 1
        (loss * 3).backward(*args, **kwargs)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(root):
    seed_everything(0)
    model = Manual()
    trainer = Trainer(default_root_dir=root, max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4))
    return model
'''


def test_manual_backward_runs_the_backward_override_as_lightning(tmp_path: Path) -> None:
    runs = []
    for framework in ("ours", "lightning"):
        runs.append(load_source(MANUAL, framework, "manual_backward").main(tmp_path / framework))
    assert_same(*runs)
    assert runs[0].calls == runs[1].calls == 4


def test_a_backward_override_under_amp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"overrides backward\(\).*scales the loss"):
        load("ours").main(tmp_path, "HalfBackward", precision="amp")
