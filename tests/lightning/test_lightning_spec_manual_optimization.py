"""Manual optimization as Lightning's own tests specify it (tests_pytorch/trainer/optimization/
test_manual_optimization.py), each scenario run under Lightning and here, with only the imports
changed, and compared: the weights, `global_step` (one per optimizer step), how often
`manual_backward` reaches backward (`on_before_backward`/`on_after_backward`), closures that
backward twice, optimizers stepped at different frequencies with extra step arguments, what is
logged from inside closures, `lr_schedulers()`, ReduceLROnPlateau, and a scheduler that is not
a PyTorch one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
import torch.nn.functional as F
from trainer import Trainer, seed_everything
from trainer.demos.boring_classes import BoringModel, ManualOptimBoringModel


class Counting(BoringModel):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.backwards = [0, 0]
        self.grads_seen = []

    def on_before_backward(self, loss):
        self.backwards[0] += 1

    def on_after_backward(self):
        self.backwards[1] += 1


class TwoOptimizers(Counting):
    """Lightning's ManualOptModel: two SGDs, the second after a double backward."""

    def __init__(self, log=False):
        super().__init__()
        self.do_log = log

    def training_step(self, batch, batch_idx):
        opt_a, opt_b = self.optimizers()
        self.grads_seen.append(self.layer.weight.grad is None)
        loss_1 = self.step(batch[0])
        self.manual_backward(loss_1)
        opt_a.step()
        opt_a.zero_grad()
        self.grads_seen.append(self.layer.weight.grad is None)
        loss_2 = self.step(batch[0])
        self.manual_backward(loss_2, retain_graph=True)
        self.manual_backward(loss_2)
        opt_b.step()
        opt_b.zero_grad()
        self.grads_seen.append(self.layer.weight.grad is None)
        if self.do_log:
            self.log("a", loss_2, on_epoch=True)
        return loss_2

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)


class Closure(Counting):
    """Lightning's test_step_with_optimizer_closure: two backwards with dropout inside the closure."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def compute_loss():
            return self.loss(F.dropout(self(F.dropout(batch[0], 0.1)), 0.1))

        def closure():
            losses = []
            for index in range(2):
                loss = compute_loss()
                losses.append(loss)
                self.manual_backward(loss, retain_graph=index == 0)
            loss = torch.stack(losses).mean()
            self.losses.append(float(loss))
            self.log("train_loss", loss, on_step=True, prog_bar=True, on_epoch=True)

        opt.step(closure=closure)
        opt.zero_grad()


class ClosureTwice(Counting):
    """Lightning's test_step_with_optimizer_closure_2: one loss, backwarded twice in the closure."""

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self(batch[0]).sum()

        def closure():
            self.manual_backward(loss, retain_graph=True)
            self.manual_backward(loss)

        opt.step(closure=closure)


class Frequencies(Counting):
    """Lightning's test_step_with_optimizer_closure_with_different_frequencies: a generator
    stepped every 2 batches (with an extra step argument), a discriminator every 4."""

    def training_step(self, batch, batch_idx):
        opt_gen, opt_dis = self.optimizers()

        def compute_loss():
            return self.loss(F.dropout(self(F.dropout(batch[0], 0.1)), 0.1))

        def gen_closure():
            loss = compute_loss()
            self.log("loss_gen", loss, on_step=True, on_epoch=True)
            self.manual_backward(loss)

        def dis_closure():
            loss = compute_loss()
            self.log("loss_dis", loss, on_step=True, on_epoch=True)
            self.manual_backward(loss)

        gen_closure()
        if batch_idx % 2 == 0:
            opt_gen.step(closure=gen_closure)
            opt_gen.zero_grad()
        if batch_idx % 4 == 0:
            opt_dis.step(closure=dis_closure)
            opt_dis.zero_grad()

    def configure_optimizers(self):
        return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.Adam(self.layer.parameters(), lr=0.001)]


MODELS = {"two": TwoOptimizers, "closure": Closure, "closure_twice": ClosureTwice, "frequencies": Frequencies}


def run(root, model, batches=2, **options):
    seed_everything(1)
    module = MODELS[model](**options)
    trainer = Trainer(default_root_dir=root, limit_train_batches=batches, limit_val_batches=0, max_epochs=1,
                      log_every_n_steps=1, enable_model_summary=False, enable_progress_bar=False, logger=False,
                      enable_checkpointing=False)
    trainer.fit(module)
    mine = lambda d: {k: float(v) for k, v in d.items() if not k.startswith("train/")}
    return {
        "weights": {k: v.tolist() for k, v in module.state_dict().items()},
        "global_step": trainer.global_step, "backwards": module.backwards, "grads_seen": module.grads_seen,
        "logged": mine(trainer.logged_metrics), "callback_metrics": mine(trainer.callback_metrics),
        "progress_bar": mine(trainer.progress_bar_metrics),
        "adam_steps": [float(s["step"]) for opt in trainer.optimizers for s in opt.state.values() if "step" in s],
    }


def schedulers(root):
    """Lightning: test_lr_schedulers (`lr_schedulers()` returns them, in order)."""
    seen = []

    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            first, second = self.lr_schedulers()
            seen.append((first is self.scheduler_1, second is self.scheduler_2))

        def configure_optimizers(self):
            opt_1 = torch.optim.SGD(self.parameters(), lr=0.1)
            opt_2 = torch.optim.SGD(self.parameters(), lr=0.1)
            self.scheduler_1 = torch.optim.lr_scheduler.StepLR(opt_1, step_size=1)
            self.scheduler_2 = torch.optim.lr_scheduler.StepLR(opt_2, step_size=1)
            return [opt_1, opt_2], [self.scheduler_1, self.scheduler_2]

    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Model())
    return seen, trainer.global_step


def plateau(root, as_dict):
    """Lightning: test_lr_schedulers_reduce_lr_on_plateau (stepped by the user in manual optimization)."""
    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def on_train_epoch_end(self):
            self.lr_schedulers().step(torch.tensor(0.0))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
            if as_dict:
                scheduler = {"scheduler": scheduler, "monitor": "train_loss", "interval": "step"}
            return [optimizer], [scheduler]

    trainer = Trainer(default_root_dir=root, max_epochs=3, limit_train_batches=1, limit_val_batches=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False)
    model = Model()
    trainer.fit(model)
    return [g["lr"] for g in trainer.optimizers[0].param_groups], [c.interval for c in trainer.lr_scheduler_configs]


def not_stepped(root):
    """Lightning: test_lr_scheduler_step_not_called (the Trainer never steps a manual scheduler)."""
    model = ManualOptimBoringModel()
    trainer = Trainer(max_epochs=1, default_root_dir=root, fast_dev_run=2, enable_progress_bar=False)
    trainer.fit(model)
    return [s.last_epoch for s in [c.scheduler for c in trainer.lr_scheduler_configs]], trainer.global_step


def foreign_scheduler(root, automatic):
    """Lightning: test_manual_optimization_with_non_pytorch_scheduler (fine in manual
    optimization, an error in automatic)."""
    class Incompatible:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def state_dict(self):
            return {}

        def load_state_dict(self, _):
            pass

    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = automatic

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.1)
            return [optimizer], [Incompatible(optimizer)]

    trainer = Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, default_root_dir=root)
    try:
        trainer.fit(Model())
    except Exception as error:  # Lightning's MisconfigurationException; ours a ValueError
        return "error", "scheduler" in str(error).lower()
    return "ran"
'''

SPEC = Spec(SOURCE, "spec_manual_optimization")


@pytest.mark.parametrize(("model", "options"), [
    ("two", {}), ("two", {"log": True}), ("closure", {}), ("closure_twice", {"batches": 4}), ("frequencies", {"batches": 8}),
], ids=["call_counts", "log", "closure", "closure_twice", "frequencies"])
def test_manual_steps(model: str, options: dict[str, Any], tmp_path: Path) -> None:
    """Lightning: test_multiple_optimizers_manual_call_counts, ..._manual_log,
    test_step_with_optimizer_closure, ..._closure_2, ..._with_different_frequencies."""
    ours, theirs = SPEC.compare("run", tmp_path, model=model, **options)
    # the bar here also shows the loss a training_step returns, as `loss` (docs/lightning.md)
    ours["progress_bar"].pop("loss", None)
    if model == "frequencies":
        # a value logged per step in batches between two optimizer steps: one value per optimizer
        # step here (their mean), Lightning's last batch's (docs/lightning.md); the epoch values agree
        for key in ("logged", "callback_metrics", "progress_bar"):
            ours[key] = {k: v for k, v in ours[key].items() if not k.endswith("_step")}
            theirs[key] = {k: v for k, v in theirs[key].items() if not k.endswith("_step")}
    assert ours == theirs


def test_lr_schedulers(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("schedulers", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("as_dict", [True, False])
def test_plateau_stepped_by_the_user(as_dict: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("plateau", tmp_path, as_dict=as_dict)
    assert ours == theirs


def test_scheduler_not_stepped_by_the_trainer(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("not_stepped", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("automatic", [True, False])
def test_scheduler_that_is_not_pytorchs(automatic: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("foreign_scheduler", tmp_path, automatic=automatic)
    assert ours == theirs
