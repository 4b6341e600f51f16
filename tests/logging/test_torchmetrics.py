"""`self.log(name, metric)` and `self.log_dict(collection)` with torchmetrics objects, as
Lightning 2.6 does it (its logger_connector/result.py): per step the value of the metric's
last forward, per epoch `compute()` at the epoch's close and `reset()` once the epoch is
over; `reduce_fx`/`batch_size` have no effect; a collection goes through `log_dict`.

One small classifier is written once with this package's import (`import trainer as L`); its
Lightning twin is the same source with that one line rewritten. Both run in this process on
the same seed and data, and the test compares every key of Lightning's `callback_metrics`
and `logged_metrics`, `validate()`/`test()` results and the weights (`torch.equal`). Metric
values are compared exactly as floats: both frameworks call the same torchmetrics `compute()`
on the same states, so they are the same float32 tensors. A duck-typed metric class (no
torchmetrics) checks the same rules without torchmetrics.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import lightning_source, load_source
from trainer import Module, Trainer

PROJECT = '''
import torch
import torch.nn.functional as F
import torchmetrics
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassPrecision

import trainer as L


class Classifier(L.LightningModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.train_acc = MulticlassAccuracy(num_classes=3)
        self.val_acc = MulticlassAccuracy(num_classes=3)
        self.test_acc = MulticlassAccuracy(num_classes=3, average="micro")
        self.train_metrics = torchmetrics.MetricCollection(
            {"f1": MulticlassF1Score(num_classes=3), "precision": MulticlassPrecision(num_classes=3)}, prefix="train/")
        self.val_metrics = self.train_metrics.clone(prefix="val/")

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        if self.mode == "step_and_epoch":
            self.log("train_acc", self.train_acc, on_step=True, on_epoch=True, prog_bar=True)
        elif self.mode == "step":
            self.log("train_acc", self.train_acc)
        elif self.mode == "epoch":
            self.log("train_acc", self.train_acc, on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)
        elif self.mode == "two_names":
            self.log("acc_a", self.train_acc, on_step=True, on_epoch=False)
            self.log("acc_b", self.train_acc, on_step=False, on_epoch=True)
        elif self.mode == "collection":
            self.train_metrics(logits, y)
            self.log_dict(self.train_metrics, on_step=True, on_epoch=True)
        self.log("loss", loss)
        return loss

    def on_train_epoch_end(self):
        if self.mode == "epoch_hook":  # torchmetrics' documented pattern
            self.log("train_acc_epoch", self.train_acc)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_acc.update(logits, y)
        self.log("val_acc", self.val_acc, prog_bar=True)
        self.val_metrics.update(logits, y)
        self.log_dict(self.val_metrics)
        self.log("val_loss", F.cross_entropy(logits, y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_acc.update(self(x), y)
        self.log("test_acc", self.test_acc)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long())


def main(mode, root):
    L.seed_everything(7)
    model = Classifier(mode)
    loader = lambda n, seed, shuffle=False: torch.utils.data.DataLoader(data(n, seed), batch_size=8, shuffle=shuffle)
    trainer = L.Trainer(max_epochs=2, log_every_n_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    trainer.fit(model, loader(60, 1, True), loader(30, 2))
    fitted = {"callback": dict(trainer.callback_metrics), "logged": dict(trainer.logged_metrics),
              "bar": dict(trainer.progress_bar_metrics)}
    val = trainer.validate(model, loader(30, 2), verbose=False)[0]
    test = trainer.test(model, loader(20, 3), verbose=False)[0]
    return {"model": model, "fit": fitted, "val": val, "test": test}
'''

#: The training metrics each mode must put in callback_metrics (both frameworks).
EXPECTED = {
    "step_and_epoch": {"train_acc", "train_acc_step", "train_acc_epoch"},
    "step": {"train_acc"},
    "epoch": {"train_acc"},
    "two_names": {"acc_a", "acc_b"},
    "collection": {"train/f1", "train/f1_step", "train/f1_epoch", "train/precision_epoch"},
    "epoch_hook": {"train_acc_epoch"},
}
MODES = list(EXPECTED)


def load(framework: str) -> ModuleType:
    return load_source(PROJECT, framework, "torchmetrics")


def floats(values: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in values.items()}


def test_only_the_import_line_differs() -> None:
    theirs = lightning_source(PROJECT)
    changed = [(a, b) for a, b in zip(PROJECT.split("\n"), theirs.split("\n")) if a != b]
    assert changed == [("import trainer as L", "import lightning as L")]


@pytest.mark.parametrize("mode", MODES)
def test_same_metrics_and_weights_as_lightning(mode: str, tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    pytest.importorskip("torchmetrics")
    ours = load("ours").main(mode, tmp_path / "ours")
    theirs = load("lightning").main(mode, tmp_path / "lightning")

    weights, expected = ours["model"].state_dict(), theirs["model"].state_dict()
    assert list(weights) == list(expected)
    assert all(torch.equal(weights[k], expected[k]) for k in expected)

    assert EXPECTED[mode] | {"val_acc", "val/f1", "val/precision"} <= set(theirs["fit"]["callback"])
    for kind in ("callback", "logged"):
        mine, lightning = floats(ours["fit"][kind]), floats(theirs["fit"][kind])
        lightning.pop("epoch", None)  # Lightning's logged_metrics carries the epoch; ours is written beside
        assert {k: mine.get(k) for k in lightning} == lightning, kind
        extra = set(mine) - set(lightning)  # only the Trainer's own automatic scalars
        assert all(k.startswith("train/") and k.removeprefix("train/").split("/")[0] not in ("f1", "precision")
                   for k in extra), extra
    bar = {k: v for k, v in ours["fit"]["bar"].items() if k != "loss"}  # ours shows the training loss itself
    assert bar == {k: v for k, v in theirs["fit"]["bar"].items() if k != "v_num"}
    assert "val_acc" in bar and ("train_acc_epoch" in bar) == (mode == "step_and_epoch")
    assert floats(ours["val"]) == floats(theirs["val"])
    assert floats(ours["test"]) == floats(theirs["test"])
    assert set(theirs["val"]) == {"val_acc", "val/f1", "val/precision", "val_loss"}


def test_the_epoch_value_is_compute_and_the_metric_is_reset(tmp_path: Path) -> None:
    """Two epochs: the second epoch's value covers only the second epoch (Lightning resets
    the metric at the epoch's end), and the metric is reset after fit."""
    pytest.importorskip("torchmetrics")
    project = load("ours")
    seen: list[float] = []
    in_hook: list[float] = []

    class Spy(project.L.Callback):
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            seen.append(float(module.train_acc.compute()))  # callbacks run before the reset

    class Hooked(project.Classifier):
        def on_train_epoch_end(self) -> None:
            in_hook.append(float(self.train_acc.compute()))  # the module's hook too

    model = Hooked("epoch")
    trainer = project.L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                num_sanity_val_steps=0, callbacks=[Spy()])
    loader = DataLoader(project.data(60, 1), batch_size=8)
    trainer.fit(model, loader)
    assert [row["train_acc"] for row in trainer.history] == seen == in_hook
    assert seen[0] != seen[1]  # each epoch's own value
    assert trainer.callback_metrics["train_acc"] == pytest.approx(seen[-1])
    assert model.train_acc.update_count == 0  # reset once the epoch was over


# ------------------------------------------------------------------- without torchmetrics
class Mean:
    """A metric without torchmetrics: a running mean with Lightning's `_forward_cache`."""

    def __init__(self) -> None:
        self.reset()
        self.calls: list[str] = []

    def update(self, value: torch.Tensor) -> None:
        self.total, self.count = self.total + value.sum(), self.count + value.numel()

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        self.update(value)
        self._forward_cache = value.mean()
        return self._forward_cache

    def compute(self) -> torch.Tensor:
        self.calls.append("compute")
        return self.total / self.count

    def reset(self) -> None:
        if hasattr(self, "calls"):
            self.calls.append("reset")
        self.total, self.count, self._forward_cache = torch.tensor(0.0), 0, None


class Pairs:
    """A duck-typed collection: `update`/`compute`/`reset` and `items`."""

    def __init__(self) -> None:
        self.metrics = {"a": Mean(), "b": Mean()}

    def update(self, value: torch.Tensor) -> None:
        for metric in self.metrics.values():
            metric.update(value)

    def compute(self) -> dict[str, torch.Tensor]:
        return {name: metric.compute() for name, metric in self.metrics.items()}

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset()

    def items(self) -> Any:
        return self.metrics.items()


class Duck(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen, self.val_seen, self.pairs = Mean(), Mean(), Pairs()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        self.seen.forward(x)  # batch values: epoch 0 gives 0..7, epoch 1 the same again
        self.log("seen", self.seen, on_step=True, on_epoch=True, reduce_fx="max", batch_size=3)
        self.pairs.update(x)
        self.log_dict(self.pairs, on_step=False, on_epoch=True)
        return self.net(x).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.val_seen.update(x * 10)  # update only: no step value, the epoch value is compute()
        self.log("val_seen", self.val_seen, on_step=True, on_epoch=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def duck_fit(**trainer_options: Any) -> tuple[Trainer, Duck]:
    options = dict(max_epochs=2, log_every_n_steps=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")
    trainer = Trainer(**{**options, **trainer_options})
    model = Duck()
    values = torch.arange(8.0).reshape(8, 1)
    trainer.fit(model, DataLoader(TensorDataset(values), batch_size=2), DataLoader(TensorDataset(values[:3]), batch_size=2))
    return trainer, model


def test_a_duck_typed_metric_follows_the_same_rules() -> None:
    trainer, model = duck_fit()
    metrics = trainer.callback_metrics
    assert metrics["seen_step"] == 6.5  # the last forward: the batch (6, 7); reduce_fx does not apply
    assert metrics["seen_epoch"] == metrics["seen"] == 3.5  # compute() over the epoch's 8 values, not a max
    assert metrics["a"] == metrics["b"] == 3.5  # the collection's metrics under their own names
    assert metrics["val_seen_epoch"] == metrics["val_seen"] == 10.0  # mean of 0, 10, 20
    assert "val_seen_step" not in metrics  # only update() ran: no step value, as in Lightning
    # Each epoch: one compute, then one reset (the second epoch's mean is again 3.5, not a
    # running mean over both epochs, and the validation metric never grows past its pass).
    assert model.seen.calls == ["compute", "reset"] * 2
    assert model.val_seen.calls == ["compute", "reset"] * 2
    assert [row["seen_epoch"] for row in trainer.history] == [3.5, 3.5]


def test_a_collection_through_self_log_is_an_error() -> None:
    class Wrong(Duck):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("pairs", self.pairs)
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=r"self.log\('pairs', \.\.\.\) received a collection of metrics.*self.log_dict"):
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                device="cpu").fit(Wrong(), DataLoader(TensorDataset(torch.ones(2, 1))))


def test_a_metric_whose_compute_is_not_a_scalar_is_an_error() -> None:
    class Vector(Mean):
        def compute(self) -> torch.Tensor:
            return torch.zeros(3)

    class Wrong(Duck):
        def __init__(self) -> None:
            super().__init__()
            self.seen = Vector()

    with pytest.raises(ValueError, match=r"self.log\('seen', metric\): the metric's compute\(\) result is a tensor of shape \(3,\)"):
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                device="cpu").fit(Wrong(), DataLoader(TensorDataset(torch.ones(2, 1))))


def test_a_metric_and_a_tensor_under_one_epoch_name_is_an_error() -> None:
    class Wrong(Duck):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.forward(batch[0])
            self.log("x", self.seen, on_step=False, on_epoch=True)
            self.log("x", 1.0, on_step=False, on_epoch=True)
            return self.net(batch[0]).sum()

    with pytest.raises(ValueError, match="already reduces for self.log"):
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                device="cpu").fit(Wrong(), DataLoader(TensorDataset(torch.ones(2, 1))))
