"""LearningRateMonitor as Lightning's own tests specify it (tests_pytorch/callbacks/test_lr_monitor.py),
each scenario run under Lightning and here, with only the imports changed, and compared: the
names (`lr-SGD`, `lr-Adam/pg1`, `lr-Adam-1`, a scheduler's or a parameter group's name, the
key prefix), every recorded value (`.lrs`, `.last_momentum_values`,
`.last_weight_decay_values`), what reaches `trainer.callback_metrics`, and an EarlyStopping
watching the learning rate. `log_key_prefix` is newer than the Lightning installed here: its
cases compare with Lightning's run without the prefix, every key prefixed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import numpy as np
import torch
from torch import optim
from trainer import Trainer
from callbacks import EarlyStopping, LearningRateMonitor
from trainer.demos.boring_classes import BoringModel
from trainer.loggers import CSVLogger


def make_optimizers(model, kind):
    params = list(model.parameters())
    if kind == "default":
        return BoringModel.configure_optimizers(model)
    if kind in ("sgd_onecycle", "adam_onecycle"):
        opt = (optim.SGD(params, lr=1e-2, momentum=0.9) if kind.startswith("sgd")
               else optim.Adam(params, lr=1e-2, betas=(0.9, 0.999)))
        return [opt], [optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=10_000)]
    if kind == "asgd":
        opt = optim.ASGD(params, lr=1e-2)
        return [opt], [optim.lr_scheduler.StepLR(opt, step_size=1)]
    if kind == "sgd":
        return optim.SGD(params, lr=0.1)
    if kind in ("sgd_momentum", "adam_betas"):
        return optim.SGD(params, lr=1e-2, momentum=0.9) if kind == "sgd_momentum" else optim.Adam(params, lr=1e-2)
    if kind == "param_groups":
        opt = optim.Adam([{"params": params[:1], "lr": 0.01}, {"params": params[1:], "lr": 0.1}])
        return [opt], [optim.lr_scheduler.StepLR(opt, 1, gamma=0.1)]
    if kind == "custom_name":
        opt = optim.SGD(params, lr=0.1)
        return [opt], [{"scheduler": optim.lr_scheduler.StepLR(opt, step_size=1), "name": "my_logging_name"}]
    if kind == "pg_name":
        opt = optim.SGD([{"params": list(model.layer.parameters()), "name": "linear"}], lr=0.1)
        return [opt], [optim.lr_scheduler.StepLR(opt, step_size=1)]
    if kind == "groups_no_scheduler":
        return optim.Adam([{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "weight_decay": 0.1}],
                          lr=1e-2, betas=(0.7, 0.999))
    if kind == "halving":
        opt = optim.SGD(model.layer.parameters(), lr=0.1)
        return [opt], [optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]
    if kind == "float64":
        return optim.SGD(params, lr=np.float64(0.01))
    if kind == "adam_wd":
        opt = optim.Adam(params, lr=1e-2, betas=(0.9, 0.999), weight_decay=0.01)
        return [opt], [optim.lr_scheduler.StepLR(opt, step_size=1)]
    if kind in ("two", "two_scheduled"):
        first, second = optim.Adam(params, lr=1e-2), optim.Adam(params, lr=1e-2)
        if kind == "two":
            return [first, second]
        return [first, second], [optim.lr_scheduler.StepLR(first, 1, gamma=0.1), optim.lr_scheduler.StepLR(second, 1, gamma=0.1)]
    raise ValueError(kind)


class Model(BoringModel):
    def __init__(self, kind, manual=False):
        super().__init__()
        self.kind, self.manual = kind, manual
        if manual:
            self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        if not self.manual:
            return super().training_step(batch, batch_idx)
        for opt in self.optimizers():
            loss = self.loss(self.step(batch))
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def on_train_epoch_end(self):
        if self.manual and self.kind == "two_scheduled":
            for scheduler in self.lr_schedulers():
                scheduler.step()

    def configure_optimizers(self):
        return make_optimizers(self, self.kind)


def run(root, kind, monitor=None, flags=None, manual=False, stop=None):
    torch.manual_seed(0)
    model = Model(kind, manual)
    lr_monitor = LearningRateMonitor(**(monitor or {}))
    extra = [EarlyStopping(**stop)] if stop else []
    trainer = Trainer(default_root_dir=root, callbacks=[lr_monitor, *extra], logger=CSVLogger(root),
                      enable_progress_bar=False, enable_model_summary=False, **(flags or {}))
    trainer.fit(model)
    keys = set(lr_monitor.lrs) | set(lr_monitor.last_momentum_values) | set(lr_monitor.last_weight_decay_values)
    return {
        "lrs": {k: [float(v) for v in values] for k, values in lr_monitor.lrs.items()},
        "momentum": {k: None if v is None else float(v) for k, v in lr_monitor.last_momentum_values.items()},
        "weight_decay": {k: None if v is None else float(v) for k, v in lr_monitor.last_weight_decay_values.items()},
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items() if k in keys},
        "global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
        "stopped_epoch": extra[0].stopped_epoch if extra else None,
    }


def duplicate_names(root):
    """Lightning: test_lr_monitor_duplicate_custom_pg_names (two groups named alike: an error)."""
    class Twice(BoringModel):
        def __init__(self):
            super().__init__()
            self.linear_a, self.linear_b = torch.nn.Linear(32, 16), torch.nn.Linear(16, 2)

        def forward(self, x):
            return self.linear_b(self.linear_a(x))

        def configure_optimizers(self):
            groups = [{"params": list(self.linear_a.parameters()), "name": "linear"},
                      {"params": list(self.linear_b.parameters()), "name": "linear"}]
            opt = torch.optim.SGD(groups, lr=0.1)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]

    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_val_batches=2, limit_train_batches=2,
                      callbacks=[LearningRateMonitor()], logger=CSVLogger(root), enable_progress_bar=False,
                      enable_model_summary=False)
    try:
        trainer.fit(Twice())
    except Exception as error:  # Lightning's MisconfigurationException; ours is a ValueError
        return "identical" in str(error)
    return "no error"
'''

SPEC = Spec(SOURCE, "spec_lr_monitor")

SHORT = dict(max_epochs=2, limit_val_batches=2, limit_train_batches=5, log_every_n_steps=1)

CASES: dict[str, dict[str, Any]] = {
    "single_lr": dict(kind="default", flags=dict(max_epochs=2, limit_val_batches=0.1, limit_train_batches=0.5)),
    "sgd_momentum_onecycle": dict(kind="sgd_onecycle", monitor=dict(log_momentum=True, log_weight_decay=True), flags=SHORT),
    "adam_betas_onecycle": dict(kind="adam_onecycle", monitor=dict(log_momentum=True, log_weight_decay=True), flags=SHORT),
    "no_momentum": dict(kind="asgd", monitor=dict(log_momentum=True), flags=dict(SHORT, max_epochs=1)),
    "no_scheduler": dict(kind="sgd", flags=dict(max_epochs=2, limit_val_batches=0.1, limit_train_batches=0.5)),
    "no_scheduler_momentum": dict(kind="sgd_momentum", monitor=dict(log_momentum=True), flags=SHORT),
    "no_scheduler_adam": dict(kind="adam_betas", monitor=dict(log_momentum=True), flags=SHORT),
    "param_groups": dict(kind="param_groups", flags=dict(max_epochs=2, limit_val_batches=2, limit_train_batches=4)),
    "custom_name": dict(kind="custom_name", flags=dict(max_epochs=2, limit_val_batches=0.1, limit_train_batches=0.5)),
    "pg_name": dict(kind="pg_name", flags=dict(max_epochs=2, limit_val_batches=2, limit_train_batches=2)),
    "groups_no_scheduler": dict(kind="groups_no_scheduler", monitor=dict(log_momentum=True, log_weight_decay=True),
                                flags=dict(max_epochs=2, limit_val_batches=2, limit_train_batches=2)),
    "float64": dict(kind="float64", flags=dict(max_epochs=1, limit_train_batches=2, limit_val_batches=0)),
    "multi_step": dict(kind="two_scheduled", manual=True, monitor=dict(logging_interval="step"),
                       flags=dict(max_epochs=2, log_every_n_steps=2, limit_train_batches=7, limit_val_batches=0.1)),
    "multi_epoch": dict(kind="two_scheduled", manual=True, monitor=dict(logging_interval="epoch"),
                        flags=dict(max_epochs=2, log_every_n_steps=2, limit_train_batches=7, limit_val_batches=0.1)),
    "multi_no_scheduler_step": dict(kind="two", manual=True, monitor=dict(logging_interval="step"),
                                    flags=dict(max_epochs=2, log_every_n_steps=2, limit_train_batches=7, limit_val_batches=0.1)),
    "multi_no_scheduler_epoch": dict(kind="two", manual=True, monitor=dict(logging_interval="epoch"),
                                     flags=dict(max_epochs=2, log_every_n_steps=2, limit_train_batches=7, limit_val_batches=0.1)),
    "early_stopping_on_lr": dict(kind="halving", flags=dict(max_epochs=5, limit_val_batches=0, limit_train_batches=2),
                                 stop=dict(monitor="lr-SGD", mode="min", stopping_threshold=0.02,
                                           check_on_train_epoch_end=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lr_monitor(case: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("run", tmp_path, **CASES[case])
    assert ours == theirs


PREFIXED: dict[str, dict[str, Any]] = {
    "prefix": dict(kind="default", monitor=dict(log_key_prefix="optim/"),
                   flags=dict(max_epochs=2, limit_val_batches=0.1, limit_train_batches=0.5)),
    "prefix_momentum_wd": dict(kind="adam_wd", monitor=dict(log_momentum=True, log_weight_decay=True,
                                                            log_key_prefix="train/"), flags=SHORT),
    "multi_prefix": dict(kind="two_scheduled", manual=True, monitor=dict(log_key_prefix="opt/"),
                         flags=dict(max_epochs=2, limit_train_batches=3, limit_val_batches=0)),
}


@pytest.mark.parametrize("case", list(PREFIXED))
def test_log_key_prefix(case: str, tmp_path: Path) -> None:
    """Lightning (newer than 2.6): test_lr_monitor_log_key_prefix*: every key starts with the prefix."""
    options = PREFIXED[case]
    prefix = options["monitor"]["log_key_prefix"]
    ours = SPEC.run("ours", "run", tmp_path, **options)
    theirs = SPEC.run("lightning", "run", tmp_path,
                      **{**options, "monitor": {k: v for k, v in options["monitor"].items() if k != "log_key_prefix"}})
    for key in ("lrs", "momentum", "weight_decay", "callback_metrics"):
        theirs[key] = {prefix + name: value for name, value in theirs[key].items()}
    assert ours == theirs


def test_duplicate_group_names(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("duplicate_names", tmp_path)
    assert ours == theirs == True  # noqa: E712
