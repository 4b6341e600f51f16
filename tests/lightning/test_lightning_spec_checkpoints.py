"""ModelCheckpoint as Lightning's own tests specify it (tests_pytorch/checkpointing/
test_model_checkpoint.py and test_checkpoint_callback_frequency.py), each scenario run under
Lightning and here, with only the imports changed, and compared: the files in `dirpath` (names,
count, top-k, `last.ckpt`, links), what each file holds (epoch, global_step, the scheduler's
state, the callback's own state), the callback's attributes after fit (best/kth/last paths and
scores, `best_k_models`, `current_score`) and which files are written in which order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import datetime
import os
import torch
from trainer import Trainer
from callbacks import ModelCheckpoint
from trainer.demos.boring_classes import BoringModel


class Model(BoringModel):
    """Lightning's test models in one: per-batch random values logged in training
    (`train_log`, on_epoch) and validation (`val_log`), the loss as `early_stop_on`, an
    optional scheduler (StepLR, or ReduceLROnPlateau on `monitor`)."""

    def __init__(self, scheduler=None, monitor=None, nan_first=False, mode="min"):
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.train_values = torch.randn(64, 64, generator=generator)
        self.val_values = torch.randn(64, 64, generator=generator)
        self.val_count, self.scheduler, self.monitor, self.nan_first, self.mode = 0, scheduler, monitor, nan_first, mode

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_log", self.train_values[self.current_epoch, batch_idx], on_epoch=True)
        self.log("early_stop_on", out["loss"])
        return out

    def validation_step(self, batch, batch_idx):
        value = self.val_values[self.val_count, batch_idx]
        if self.nan_first and self.val_count == 0:
            value = torch.tensor(float("nan"))
        self.log("val_log", value)
        return super().validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.val_count += 1

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        if self.scheduler == "step":
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=2)]
        if self.scheduler == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return [optimizer], [{"scheduler": plateau, "monitor": self.monitor, "strict": True}]
        return optimizer


def name(path):
    return os.path.basename(str(path)) if path else path


def number(value):
    return None if value is None else float(value)


def contents(path):
    held = torch.load(path, weights_only=True)
    states = [state for key, state in held["callbacks"].items() if key.startswith("ModelCheckpoint")]
    mc = states[0] if states else {}
    sched = [{"step_count": s.get("_step_count"), "last_lr": s.get("_last_lr")} for s in held.get("lr_schedulers", [])]
    return {
        "epoch": held["epoch"], "global_step": held["global_step"], "schedulers": sched,
        "mc": {"monitor": mc.get("monitor"), "current_score": number(mc.get("current_score")),
               "best_model_score": number(mc.get("best_model_score")), "best_model_path": name(mc.get("best_model_path")),
               "kth_best_model_path": name(mc.get("kth_best_model_path")),
               "best_k_models": {name(k): float(v) for k, v in (mc.get("best_k_models") or {}).items()},
               "last_model_path": name(mc.get("last_model_path")),
               "dirpath_is_the_callbacks": mc.get("dirpath") == str(held_dirpath[0])},
    }


held_dirpath = [None]


def run(root, mc, flags, model=None, validation_step_none=False, val_loader_none=False, listings=False):
    torch.manual_seed(0)  # the same weights and data in both
    model_options = dict(model or {})
    monitor = mc.get("monitor")
    m = Model(monitor=monitor, **model_options)
    if validation_step_none:
        m.validation_step = None
    if val_loader_none:
        m.val_dataloader = None
    dirpath = root / "ckpts"
    mc = dict(mc)
    if "train_time_interval" in mc:
        mc["train_time_interval"] = datetime.timedelta(seconds=mc["train_time_interval"])
    checkpoint = ModelCheckpoint(dirpath=dirpath, **mc)
    held_dirpath[0] = dirpath
    seen = []

    if listings:
        original = m.on_train_epoch_start

        def on_train_epoch_start():
            seen.append(sorted(os.listdir(dirpath)) if os.path.isdir(dirpath) else [])
            original()

        m.on_train_epoch_start = on_train_epoch_start
    trainer = Trainer(default_root_dir=root, callbacks=[checkpoint], enable_progress_bar=False,
                      enable_model_summary=False, logger=False, **flags)
    written, save = [], trainer.save_checkpoint

    def save_checkpoint(filepath, *args, **kwargs):
        if os.path.dirname(str(filepath)) == str(dirpath):
            written.append(name(filepath))
        return save(filepath, *args, **kwargs)

    trainer.save_checkpoint = save_checkpoint
    trainer.fit(m)
    files = sorted(os.listdir(dirpath)) if os.path.isdir(dirpath) else []
    return {
        "files": files,
        "links": sorted(f for f in files if os.path.islink(dirpath / f)),
        "contents": {f: contents(dirpath / f) for f in files},
        "best_model_path": name(checkpoint.best_model_path), "best_model_score": number(checkpoint.best_model_score),
        "kth_best_model_path": name(checkpoint.kth_best_model_path), "kth_value": number(checkpoint.kth_value),
        "last_model_path": name(checkpoint.last_model_path), "current_score": number(checkpoint.current_score),
        "best_k_models": {name(k): float(v) for k, v in checkpoint.best_k_models.items()},
        "written": written, "listings": seen,
        "global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
    }


def reruns(root, mc, times=2):
    """Lightning: test_ckpt_version_after_rerun_new_trainer (a second run into the same dirpath
    adds -v1 files), test_ckpt_version_counter_disabled_after_rerun_new_trainer (overwrites)."""
    dirpath, kept = root / "ckpts", []
    for _ in range(times):
        torch.manual_seed(0)
        checkpoint = ModelCheckpoint(dirpath=dirpath, **mc)
        trainer = Trainer(max_epochs=2, limit_train_batches=1, limit_val_batches=1, default_root_dir=root,
                          callbacks=[checkpoint], logger=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(BoringModel())
        kept.append((sorted(name(f) for f in checkpoint.best_k_models), name(checkpoint.last_model_path),
                     name(checkpoint.best_model_path)))
    return kept, sorted(os.listdir(dirpath))


def state_key(root, **mc):
    return ModelCheckpoint(**mc).state_key
'''

SPEC = Spec(SOURCE, "spec_checkpoints")

SCORE = dict(limit_train_batches=5, limit_val_batches=7, max_epochs=3)


def compare(tmp_path: Path, mc: dict[str, Any], flags: dict[str, Any], **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return SPEC.compare("run", tmp_path, mc=mc, flags=flags, **options)


@pytest.mark.parametrize(("monitor", "options", "scheduler"), [
    ("val_log", {}, "step"), ("val_log", {}, "plateau"),
    ("train_log_epoch", {"validation_step_none": True}, "step"),
    ("train_log_epoch", {"validation_step_none": True}, "plateau"),
    ("train_log_epoch", {"val_loader_none": True}, "step"),
    ("train_log_epoch", {"val_loader_none": True}, "plateau"),
])
def test_score_and_ckpt(monitor: str, options: dict[str, Any], scheduler: str, tmp_path: Path) -> None:
    """Lightning: test_model_checkpoint_score_and_ckpt (a file per epoch named by its score,
    holding its epoch, step, the scheduler stepped for the epoch, and the callback's state).
    Lightning's `model.val_dataloaders = None` sets an unused name; here `val_dataloader = None`
    really removes validation, so the training value is monitored."""
    mc = {"filename": "{" + monitor + ":.4f}-{epoch}", "monitor": monitor, "save_top_k": -1}
    ours, theirs = compare(tmp_path, mc, SCORE, model={"scheduler": scheduler}, **options)
    assert ours == theirs


@pytest.mark.parametrize(("interval", "scheduler"), [(0.25, "plateau"), (0.25, "step"), (0.42, "step")])
def test_score_and_ckpt_val_check_interval(interval: float, scheduler: str, tmp_path: Path) -> None:
    """Lightning: test_model_checkpoint_score_and_ckpt_val_check_interval."""
    mc = {"filename": "{val_log:.4f}-{epoch}", "monitor": "val_log", "save_top_k": -1}
    flags = dict(limit_train_batches=12, limit_val_batches=7, max_epochs=3, val_check_interval=interval,
                 num_sanity_val_steps=0)
    ours, theirs = compare(tmp_path, mc, flags, model={"scheduler": scheduler})
    assert ours == theirs


@pytest.mark.parametrize(("epochs", "interval"), [(1, 1.0), (2, 1.0), (1, 0.25), (2, 0.3)])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("save_last", [False, True, "link"])
def test_top_k_frequency(epochs: int, interval: float, k: int, save_last: Any, tmp_path: Path) -> None:
    """Lightning: test_checkpoint_callback_frequency.py::test_default_checkpoint_freq and ::test_top_k."""
    mc = {"monitor": "early_stop_on", "save_top_k": k, "save_last": save_last}
    flags = dict(max_epochs=epochs, val_check_interval=interval, limit_train_batches=20, limit_val_batches=1)
    ours, theirs = compare(tmp_path, mc, flags)
    assert ours == theirs


@pytest.mark.parametrize("mc", [
    {"monitor": "early_stop_on", "save_top_k": -1, "save_last": True},
    {"monitor": "early_stop_on", "save_top_k": -1, "save_last": "link"},
    {"save_top_k": -1, "save_last": True},
    {"save_top_k": 1, "filename": "model"},
    {"save_top_k": 0},
    {"monitor": "early_stop_on", "save_top_k": 0},
    {"monitor": "early_stop_on", "save_top_k": -1, "mode": "max"},
    {"monitor": "early_stop_on", "save_top_k": 2, "mode": "max", "save_last": True},
], ids=["save_last", "save_last_link", "none_monitor_all_last", "none_monitor_one", "top_0", "top_0_monitor",
        "all_max", "top2_max_last"])
def test_save_last_and_top_k(mc: dict[str, Any], tmp_path: Path) -> None:
    """Lightning: test_model_checkpoint_save_last, test_none_monitor_not_alternating,
    test_model_checkpoint_save_last_none_monitor, test_model_checkpoint_topk_zero,
    test_model_checkpoint_topk_all (files after each epoch too)."""
    flags = dict(max_epochs=3, limit_train_batches=10, limit_val_batches=2)
    ours, theirs = compare(tmp_path, mc, flags, listings=True)
    assert ours == theirs


@pytest.mark.parametrize("every_n_epochs", [0, 1, 2, 3])
def test_every_n_epochs(every_n_epochs: int, tmp_path: Path) -> None:
    """Lightning: test_model_checkpoint_every_n_epochs."""
    mc = {"filename": "{epoch}", "save_top_k": -1, "every_n_epochs": every_n_epochs}
    ours, theirs = compare(tmp_path, mc, dict(max_epochs=5, limit_train_batches=1, limit_val_batches=1))
    assert ours == theirs


@pytest.mark.parametrize("mc", [
    {"filename": "{step}", "every_n_epochs": 0, "every_n_train_steps": 4, "save_top_k": -1},
    {"filename": "{step}", "every_n_train_steps": 3, "save_top_k": -1, "save_last": True},
    {"monitor": "early_stop_on", "every_n_train_steps": 5, "save_top_k": 2},
], ids=["every_4_steps", "every_3_steps_last", "every_5_steps_top2"])
def test_every_n_train_steps(mc: dict[str, Any], tmp_path: Path) -> None:
    """Lightning: test_ckpt_every_n_train_steps."""
    ours, theirs = compare(tmp_path, mc, dict(max_epochs=2, limit_train_batches=8, limit_val_batches=1))
    assert ours == theirs


@pytest.mark.parametrize("mode", ["min", "max"])
def test_nan_as_first(mode: str, tmp_path: Path) -> None:
    """Lightning: test_checkpointing_with_nan_as_first, test_current_score_when_nan."""
    mc = {"monitor": "val_log", "save_top_k": 1, "mode": mode}
    ours, theirs = compare(tmp_path, mc, dict(max_epochs=4, limit_train_batches=2, limit_val_batches=2),
                           model={"nan_first": True})
    assert ours == theirs


def test_check_val_every_n_epoch_top_k(tmp_path: Path) -> None:
    """Lightning: test_check_val_every_n_epochs_top_k_integration."""
    mc = {"monitor": "val_log", "save_top_k": -1, "filename": "{epoch}"}
    ours, theirs = compare(tmp_path, mc, dict(max_epochs=5, limit_train_batches=1, limit_val_batches=1,
                                              check_val_every_n_epoch=2, num_sanity_val_steps=0))
    assert ours == theirs


def test_no_validation_saves_at_train_epoch_end(tmp_path: Path) -> None:
    """Lightning: test_train_epoch_end_ckpt_with_no_validation, test_save_last_without_save_on_train_epoch_and_without_val."""
    mc = {"monitor": "train_log_epoch", "save_top_k": 2, "save_last": True}
    ours, theirs = compare(tmp_path, mc, dict(max_epochs=3, limit_train_batches=2, limit_val_batches=0))
    assert ours == theirs


@pytest.mark.parametrize("mc", [{"monitor": "val_loss"}, {}, {"monitor": "acc", "mode": "max", "every_n_train_steps": 5}])
def test_state_key(mc: dict[str, Any], tmp_path: Path) -> None:
    """Lightning: test_model_checkpoint_state_key (the key of its state in a checkpoint's "callbacks")."""
    ours, theirs = SPEC.compare("state_key", tmp_path, **mc)
    assert ours == theirs


@pytest.mark.parametrize("mc", [
    {"save_top_k": -1, "monitor": "epoch", "filename": "{epoch}"},
    {"save_top_k": -1, "monitor": "epoch", "filename": "{epoch}", "save_last": True, "enable_version_counter": False},
    {"save_top_k": 1, "filename": "model"},
    {"save_top_k": 2, "monitor": "step", "mode": "max", "save_last": True},
], ids=["versions", "no_version_counter", "none_monitor", "top2_last"])
def test_reruns_into_the_same_folder(mc: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reruns", tmp_path, mc=mc)
    assert ours == theirs
