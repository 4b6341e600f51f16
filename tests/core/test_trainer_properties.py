"""The Trainer's Lightning properties (trainer/core/properties.py), read from callback hooks of
one small run of ours and of Lightning's twin of it (the same code, only the imports differ)."""

from __future__ import annotations

import math
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from trainer import Callback

PROPS = ("training", "validating", "testing", "predicting", "evaluating", "sanity_checking", "is_last_batch",
         "num_val_batches", "num_sanity_val_batches", "enable_validation")
HOOKS = ("setup", "on_fit_start", "on_sanity_check_start", "on_train_start", "on_train_epoch_start",
         "on_validation_start", "on_validation_epoch_end", "on_train_epoch_end", "on_train_end", "on_fit_end",
         "on_test_start", "on_test_end", "on_predict_start", "teardown", "on_train_batch_start", "on_train_batch_end")


class Recorder(Callback):
    def __init__(self):
        self.rows = []


def _recording(name):
    def hook(self, trainer, module, *args, **kwargs):
        self.rows.append((name, {p: getattr(trainer, p) for p in PROPS}))
    return hook


for _name in HOOKS:
    setattr(Recorder, _name, _recording(_name))


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("v", self.layer(batch[0]).mean())

    def test_step(self, batch, batch_idx):
        self.log("t", self.layer(batch[0]).mean())

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run(root):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 2))
    recorder = Recorder()
    trainer = L.Trainer(max_epochs=2, callbacks=[recorder], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                        limit_val_batches=2, num_sanity_val_steps=1)
    model = Net()
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    trainer.test(model, dataloaders=DataLoader(data, batch_size=6), verbose=False)
    trainer.predict(model, dataloaders=DataLoader(data, batch_size=6))
    return recorder.rows
'''

TWIN_IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
                "from trainer import Callback": "from lightning.pytorch import Callback"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin(source: str) -> str:
    lines = source.splitlines()
    return "\n".join(TWIN_IMPORTS.get(line, line) for line in lines)


# Where we differ, each documented: without a record of which Trainer call runs, `training`
# is False in the fit's setup/on_fit_start/on_fit_end/teardown (`testing`, `predicting` in
# their setup/teardown); `is_last_batch` turns True
# at the last batch's on_train_batch_start as Lightning's, but is False again once the epoch has
# ended (Lightning: it stays True until the next epoch); `enable_validation`, `num_*val_batches` are known from on_fit_start on here (Lightning:
# once its loops set up their data); `is_last_batch` outside training is not compared.
DIFFERENT = {
    "training": {"setup", "on_fit_start", "on_fit_end", "teardown"},
    "testing": {"setup", "teardown"},
    "predicting": {"setup", "teardown"},
    "evaluating": {"setup", "teardown"},
    "is_last_batch": {"setup", "on_train_end", "on_fit_end", "teardown", "on_test_start",
                      "on_test_end", "on_predict_start", "on_train_epoch_start", "on_fit_start",
                      "on_sanity_check_start", "on_validation_start", "on_validation_epoch_end", "on_train_start"},
    "enable_validation": {"setup", "on_fit_start", "on_test_start", "on_test_end", "on_predict_start", "teardown"},
    "num_val_batches": {"on_sanity_check_start", "setup", "on_test_start", "on_test_end", "on_predict_start",
                        "teardown"},
    "num_sanity_val_batches": {"on_sanity_check_start", "setup", "on_test_start", "on_test_end",
                               "on_predict_start", "teardown"},
}


def test_stage_flags_and_batch_counts_as_lightning(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    ours = _load(PROJECT, "ours_project").run(tmp_path / "ours")
    theirs = _load(_twin(PROJECT), "their_project").run(tmp_path / "theirs")
    assert [hook for hook, _ in ours] == [hook for hook, _ in theirs]
    compared = 0
    for (hook, mine), (_, lightning) in zip(ours, theirs):
        for name, value in mine.items():
            if hook in DIFFERENT.get(name, ()):
                continue
            assert value == lightning[name], f"{name} in {hook}: ours {value!r}, Lightning {lightning[name]!r}"
            compared += 1
    assert compared > 250
    seen = {(hook, name) for hook, row in ours for name, value in row.items() if value is True}
    assert {("on_validation_start", "validating"), ("on_test_start", "testing"), ("on_predict_start", "predicting"),
            ("on_train_batch_start", "is_last_batch"), ("on_train_batch_end", "is_last_batch"),
            ("on_train_epoch_end", "is_last_batch"),
            ("on_train_start", "training")} <= seen


class Line(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("v", self.layer(batch[0]).mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


QUIET: dict[str, Any] = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def _loader(n: int = 8) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 2)), batch_size=4)


def test_loaders_model_and_counts_after_fit() -> None:
    train, val = _loader(), _loader(12)
    trainer = Trainer(max_epochs=1, num_sanity_val_steps=-1, **QUIET)
    assert trainer.train_dataloader is None and trainer.val_dataloaders is None and trainer.model is None
    model = Line()
    trainer.fit(model, train, val)
    assert trainer.train_dataloader is train and trainer.val_dataloaders is val
    assert trainer.model is model and trainer.lightning_module is model
    assert trainer.num_val_batches == [3] and trainer.num_sanity_val_batches == [3]
    assert trainer.num_sanity_val_steps == math.inf and trainer.enable_validation


def test_no_validation_step_means_no_validation() -> None:
    class NoVal(Line):
        validation_step = Module.validation_step  # type: ignore[assignment]

    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(NoVal(), _loader(), _loader())
    assert not trainer.enable_validation and trainer.num_val_batches == [] and trainer.val_dataloaders is None


def test_devices_precision_and_arguments() -> None:
    trainer = Trainer(max_epochs=3, min_epochs=2, min_steps=5, gradient_clip_val=0.5, limit_val_batches=0.5, **QUIET)
    assert (trainer.accelerator, trainer.device_ids, trainer.num_devices, trainer.num_nodes, trainer.node_rank) == (
        "cpu", [0], 1, 1, 0)
    assert trainer.precision_plugin is trainer.precision and trainer.scaler is None
    assert (trainer.min_epochs, trainer.min_steps, trainer.gradient_clip_val) == (2, 5, 0.5)
    assert (trainer.limit_val_batches, trainer.limit_train_batches, trainer.val_check_interval) == (0.5, 1.0, 1.0)
    assert trainer.num_sanity_val_steps == 2 and trainer.gradient_clip_algorithm == "norm"
    with pytest.raises(AttributeError, match=r"Trainer\(min_epochs=\.\.\.\)"):
        trainer.min_epochs = 1
    amp = Trainer(precision="amp", **QUIET)
    assert isinstance(amp.scaler, torch.amp.GradScaler) and amp.scaler is amp.precision.scaler


def test_accumulate_grad_batches_is_settable_and_checked() -> None:
    trainer = Trainer(accumulate_grad_batches=2, **QUIET)
    assert trainer.accumulate_grad_batches == 2
    trainer.accumulate_grad_batches = 4
    assert trainer.accumulate_grad_batches == 4 and trainer.args.accumulate_grad_batches == 4
    with pytest.raises(ValueError, match="int >= 1"):
        trainer.accumulate_grad_batches = 0


def test_callback_lists_print_and_init_module(capsys: pytest.CaptureFixture[str]) -> None:
    import callbacks

    stop, bar = callbacks.EarlyStopping(monitor="v"), callbacks.TQDMProgressBar()
    trainer = Trainer(callbacks=[stop, bar], logger=False, device="cpu")
    assert trainer.early_stopping_callbacks == [stop] and trainer.progress_bar_callback is bar
    assert Trainer(**QUIET).progress_bar_callback is None
    trainer.print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"
    with trainer.init_module():
        layer = torch.nn.Linear(2, 2)
    assert layer.weight.device.type == "cpu" and layer.weight.dtype == torch.float32


def test_stage_flags_while_running() -> None:
    seen: dict[str, tuple[bool, ...]] = {}

    class Probe(Callback):
        def _note(self, hook: str, trainer: Trainer) -> None:
            seen[hook] = (trainer.training, trainer.validating, trainer.sanity_checking, trainer.evaluating)

        def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
            self._note("train", trainer)

        def on_validation_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
            self._note("sanity" if trainer.sanity_checking else "val", trainer)

    trainer = Trainer(max_epochs=1, callbacks=[Probe()], **QUIET)
    trainer.fit(Line(), _loader(), _loader())
    assert seen == {"sanity": (False, False, True, True), "train": (True, False, False, False),
                    "val": (False, True, False, True)}
    assert not (trainer.training or trainer.validating or trainer.evaluating)


# What the Trainer records for these: the evaluation loaders and counts, whether a run raised,
# the checkpoint read, the running call.


def test_test_and_predict_loaders_and_counts() -> None:
    trainer, model, loader = Trainer(**QUIET), Line(), _loader(12)
    trainer.predict(model, loader)
    assert trainer.predict_dataloaders is loader and trainer.num_predict_batches == [3]


def test_interrupted_after_an_error() -> None:
    class Boom(Line):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    trainer = Trainer(max_epochs=1, **QUIET)
    with pytest.raises(RuntimeError):
        trainer.fit(Boom(), _loader())
    assert trainer.interrupted


def test_ckpt_path_is_the_file_read(tmp_path: Path) -> None:
    trainer, model = Trainer(max_epochs=1, **QUIET), Line()
    trainer.fit(model, _loader())
    path = trainer.save_checkpoint(tmp_path / "a.ckpt")
    trainer.validate(model, _loader(), ckpt_path=path, verbose=False)
    assert trainer.ckpt_path == str(path)


def test_training_is_true_in_setup_as_lightning() -> None:
    seen = []

    class Probe(Callback):
        def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
            seen.append(trainer.training)

    Trainer(max_epochs=1, callbacks=[Probe()], **QUIET).fit(Line(), _loader())
    assert seen == [True]


class _EpochEndReader(Module):
    """Reads `callback_metrics` in its epoch-end hooks, before and after logging there."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.seen: list[tuple[str, dict[str, float]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("tl", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("vl", self.layer(batch[0]).pow(2).mean())

    def on_validation_epoch_end(self) -> None:
        self.seen.append(("val before", dict(self.trainer.callback_metrics)))
        self.log("extra", 1.0)
        self.seen.append(("val after", dict(self.trainer.callback_metrics)))

    def on_train_epoch_end(self) -> None:
        self.log("extra_t", 2.0)
        self.seen.append(("train after", dict(self.trainer.callback_metrics)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_callback_metrics_are_live_in_the_modules_epoch_end_hooks() -> None:
    """Lightning's `callback_metrics` read in `on_validation_epoch_end` already holds the epoch's
    `validation_step` means, and what the hook logs shows at once (the same in
    `on_train_epoch_end`): `self.trainer.callback_metrics["val_loss"]` there is this epoch's."""
    torch.manual_seed(0)
    x = torch.randn(8, 2)
    model = _EpochEndReader()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(TensorDataset(x), batch_size=4), DataLoader(TensorDataset(x), batch_size=4))
    (_, before), (_, after), (_, train_after) = model.seen
    with torch.no_grad():
        expected = model.layer(x).pow(2).mean().item()  # both batches of 4: the mean of the two means
    assert before["vl"] == pytest.approx(expected) and "extra" not in before
    assert after["extra"] == 1.0 and train_after["extra_t"] == 2.0
    assert trainer.callback_metrics["vl"] == before["vl"]  # the hook saw the value the epoch closed with


def test_estimated_stepping_batches_in_configure_optimizers() -> None:
    """Lightning's OneCycleLR recipe: configure_optimizers reads the fit's total steps (from its
    train loader, prepared once: limit_train_batches and accumulation counted)."""
    lengths: list[int | float] = []

    class OneCycle(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            total = self.trainer.estimated_stepping_batches
            lengths.append(total)
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [{"scheduler": torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=total),
                                  "interval": "step"}]

    loader = DataLoader(TensorDataset(torch.randn(40, 2)), batch_size=4)  # 10 batches
    trainer = Trainer(max_epochs=3, limit_train_batches=0.5, accumulate_grad_batches=2, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(OneCycle(), loader)  # OneCycleLR raises if it is stepped more than total_steps times
    assert lengths == [3 * 3] and trainer.global_step == 9  # 5 batches, windows of 2 -> 3 steps per epoch


def test_a_callback_can_record_a_value_in_callback_metrics() -> None:
    """Lightning's pattern: a callback writes `trainer.callback_metrics[name] = value` and a
    monitoring callback (here EarlyStopping) acts on it; a later read still has it."""
    import callbacks

    class Score(Callback):
        def on_validation_epoch_end(self, trainer: Trainer, module: Any) -> None:
            trainer.callback_metrics["custom"] = torch.tensor(float(trainer.current_epoch == 0))  # improves once

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    stopper = callbacks.EarlyStopping("custom", mode="max", patience=1)
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = Trainer(max_epochs=5, callbacks=[Score(), stopper], logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(Net(), data, data)
    assert trainer.current_epoch == 2 and stopper.best_score == 1.0  # best at epoch 0, no improvement at 1
    assert trainer.callback_metrics["custom"] == 0.0
