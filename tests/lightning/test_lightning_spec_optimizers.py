"""configure_optimizers and LR schedulers as Lightning's own tests specify them
(tests_pytorch/trainer/optimization/test_optimizers.py), each scenario run under Lightning and
here, with only the imports changed, and compared: every return form's optimizers and scheduler
configs (interval, frequency, monitor, strict, name), the learning rates after training, how
often schedulers step (per epoch with `check_val_every_n_epoch`, per step, with `frequency`),
ReduceLROnPlateau's monitor (missing: an error, `strict=False`: skipped), what a checkpoint
holds of the schedulers, and `lr_scheduler_step` for a custom scheduler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch import optim
from trainer import Trainer
from callbacks import ModelCheckpoint
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)


def forms(model, form):
    a = optim.Adam(model.parameters(), lr=0.002)
    b = optim.SGD(model.parameters(), lr=0.002)
    sched = optim.lr_scheduler.StepLR(a, 1, gamma=0.5)
    return {
        "single": lambda: a,
        "tuple_of_two": lambda: (a, b),
        "list_of_two": lambda: [a, b],
        "two_lists": lambda: ([a], [sched]),
        "list_and_scheduler": lambda: ([a], sched),
        "dict": lambda: {"optimizer": a, "lr_scheduler": sched},
        "dict_only_optimizer": lambda: {"optimizer": a},
        "list_of_dicts": lambda: [{"optimizer": a, "lr_scheduler": sched},
                                  {"optimizer": b, "lr_scheduler": optim.lr_scheduler.StepLR(b, 1, gamma=0.5)}],
        "step_interval": lambda: {"optimizer": a, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2}},
        "step_frequency_3": lambda: {"optimizer": a, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 3}},
        "epoch_frequency": lambda: {"optimizer": a, "lr_scheduler": {"scheduler": sched, "frequency": 2, "name": "mine"}},
        "plateau": lambda: {"optimizer": a, "lr_scheduler": optim.lr_scheduler.ReduceLROnPlateau(a, patience=0),
                            "monitor": "foo"},
        "plateau_step": lambda: ([a], [
            {"scheduler": optim.lr_scheduler.ReduceLROnPlateau(a, patience=0), "interval": "step", "monitor": "foo"},
            {"scheduler": optim.lr_scheduler.StepLR(a, step_size=1), "interval": "step"}]),
    }[form]


def configs(trainer):
    return [(c.interval, c.frequency, c.monitor, c.strict, c.name, type(c.scheduler).__name__)
            for c in trainer.lr_scheduler_configs]


def run(root, form, manual=False, flags=None):
    torch.manual_seed(0)

    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            self.log("foo", float(batch_idx % 3))
            if not manual:
                return super().training_step(batch, batch_idx)
            for opt in self.optimizers() if isinstance(self.optimizers(), list) else [self.optimizers()]:
                loss = self.loss(self.step(batch))
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

        def configure_optimizers(self):
            return forms(self, form)()

    model = Model()
    trainer = Trainer(default_root_dir=root, enable_checkpointing=False, **QUIET,
                      **(flags or dict(max_epochs=3, limit_train_batches=4, limit_val_batches=1)))
    trainer.fit(model)
    return {"optimizers": [type(o).__name__ for o in trainer.optimizers], "configs": configs(trainer),
            "lrs": [[g["lr"] for g in o.param_groups] for o in trainer.optimizers],
            "scheduler_steps": [getattr(c.scheduler, "last_epoch", None) for c in trainer.lr_scheduler_configs],
            "global_step": trainer.global_step,
            "weights": {k: v.tolist() for k, v in model.state_dict().items()}}


def plateau_errors(root, how, strict=True, complete_epoch=True):
    """Lightning: test_reducelronplateau_with_no_monitor_raises (and ..._in_lr_scheduler_dict),
    test_lr_scheduler_strict (an unlogged monitor: an error, or skipped with strict=False)."""
    model = BoringModel()
    optimizer = optim.Adam(model.parameters())
    plateau = optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    model.configure_optimizers = {
        "list": lambda: ([optimizer], [plateau]),
        "dict": lambda: {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau}},
        "giraffe": lambda: {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "giraffe",
                                                                     "strict": strict}},
    }[how]
    flags = dict(max_epochs=1, max_steps=-1) if complete_epoch else dict(max_epochs=None, max_steps=1)
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=1, enable_checkpointing=False,
                      **QUIET, **flags)
    try:
        trainer.fit(model)
    except Exception as error:  # Lightning's MisconfigurationException, ours a ValueError
        return "error", "monitor" in str(error) or "giraffe" in str(error), plateau.last_epoch
    return "ran", trainer.global_step, plateau.last_epoch


def epoch_frequency(root, check_val_every_n_epoch):
    """Lightning: test_lr_scheduler_epoch_step_frequency (once per epoch, validating or not)."""
    torch.manual_seed(0)
    model = BoringModel()
    trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=2,
                      check_val_every_n_epoch=check_val_every_n_epoch, max_epochs=4, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return [c.scheduler.last_epoch for c in trainer.lr_scheduler_configs], trainer.optimizers[0].param_groups[0]["lr"]


def state_before_saving(root, every_n_train_steps, epoch_interval):
    """Lightning: test_lr_scheduler_state_updated_before_saving (a checkpoint holds the
    scheduler already stepped for the step or epoch it follows)."""
    saved = []

    class Model(BoringModel):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1)
            config = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=10)}
            if not epoch_interval:
                config["interval"] = "step"
            return [optimizer], [config]

    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=1, **QUIET,
                      callbacks=[ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=every_n_train_steps)])
    trainer.fit(Model())
    import os
    for name in sorted(os.listdir(root / "ckpts")):
        held = torch.load(root / "ckpts" / name, weights_only=True)
        saved.append((name, held["global_step"], held["lr_schedulers"][0]["_step_count"], held["lr_schedulers"][0]["_last_lr"]))
    return saved


def step_hook(root):
    """Lightning: test_lr_scheduler_step_hook (a custom scheduler stepped through lr_scheduler_step)."""
    calls = []

    class CustomEpochScheduler:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def step(self, epoch):
            calls.append(("custom", epoch))

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            pass

    class Model(BoringModel):
        def lr_scheduler_step(self, scheduler, metric):
            if isinstance(scheduler, torch.optim.lr_scheduler.StepLR):
                calls.append(("step_lr", self.trainer.global_step))
                super().lr_scheduler_step(scheduler, metric)
            else:
                scheduler.step(epoch=self.current_epoch)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.layer.parameters(), lr=1e-2)
            first = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1), "interval": "step"}
            return [optimizer], [first, CustomEpochScheduler(optimizer)]

    trainer = Trainer(default_root_dir=root, enable_checkpointing=False, max_epochs=3, limit_train_batches=2,
                      limit_val_batches=0, **QUIET)
    trainer.fit(Model())
    return calls

def lr_seen_by_hooks(root, accumulate):
    """The learning rate each hook sees around an epoch's end: an epoch-interval StepLR steps
    right after the epoch's last optimizer step, the ReduceLROnPlateau after the epoch's
    validation and on_train_epoch_end."""
    from trainer import Callback

    seen = []

    def lr(module, where):
        seen.append((where, module.trainer.current_epoch, module.trainer.global_step,
                     [round(group["lr"], 8) for group in module.trainer.optimizers[0].param_groups]))

    class Model(BoringModel):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=0)
            return [optimizer], [step, {"scheduler": plateau, "monitor": "val_loss"}]

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", 1.0)  # never improves: the plateau cuts after its first epoch

        def on_train_batch_end(self, outputs, batch, batch_idx):
            lr(self, "on_train_batch_end")

        def on_validation_epoch_end(self):
            lr(self, "on_validation_epoch_end")

        def on_train_epoch_end(self):
            lr(self, "on_train_epoch_end")

    class Watch(Callback):
        def on_train_epoch_start(self, trainer, module):
            lr(module, "on_train_epoch_start")

    trainer = Trainer(default_root_dir=root, max_epochs=3, limit_train_batches=3, limit_val_batches=1,
                      num_sanity_val_steps=0, accumulate_grad_batches=accumulate, callbacks=[Watch()], **QUIET)
    trainer.fit(Model())
    return seen
'''

SPEC = Spec(SOURCE, "spec_optimizers")


@pytest.mark.parametrize(("form", "manual"), [
    ("single", False), ("tuple_of_two", True), ("list_of_two", True), ("two_lists", False),
    ("list_and_scheduler", False), ("dict", False), ("dict_only_optimizer", False), ("list_of_dicts", True),
    ("step_interval", False), ("epoch_frequency", False), ("plateau", False), ("plateau_step", False),
])
def test_return_forms(form: str, manual: bool, tmp_path: Path) -> None:
    """Lightning: test_optimizer_return_options, test_configure_optimizer_from_dict,
    test_reducelronplateau_scheduling, test_optimizer_with_scheduling, test_multi_optimizer_with_scheduling."""
    ours, theirs = SPEC.compare("run", tmp_path, form=form, manual=manual)
    assert ours == theirs


def test_step_frequency_counts_optimizer_steps(tmp_path: Path) -> None:
    """A documented difference (docs/lightning.md): `frequency` of a step-interval scheduler
    counts optimizer steps over the run here, batches within each epoch in Lightning; with 4
    batches per epoch and frequency 3, 4 steps in 12 here, 3 (one per epoch) in Lightning."""
    ours, theirs = SPEC.compare("run", tmp_path, form="step_frequency_3")
    assert ours["scheduler_steps"] == [4] and theirs["scheduler_steps"] == [3]


@pytest.mark.parametrize(("how", "strict", "complete_epoch"), [
    ("list", True, True), ("dict", True, True), ("giraffe", True, True), ("giraffe", False, True),
])
def test_plateau_monitor(how: str, strict: bool, complete_epoch: bool, tmp_path: Path) -> None:
    """Lightning: test_reducelronplateau_with_no_monitor_raises, test_lr_scheduler_strict. (A
    strict monitor never logged is reported here after the first batch, before an epoch ends,
    docs/logging.md "Monitored metrics": a run stopped by max_steps=1 raises where Lightning's
    never reaches the check.)"""
    ours, theirs = SPEC.compare("plateau_errors", tmp_path, how=how, strict=strict, complete_epoch=complete_epoch)
    assert ours == theirs


@pytest.mark.parametrize("every", [1, 2])
def test_epoch_scheduler_frequency(every: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("epoch_frequency", tmp_path, check_val_every_n_epoch=every)
    assert ours == theirs


@pytest.mark.parametrize(("every_n_train_steps", "epoch_interval"), [
    (None, True), (2, False),
    (2, True),
])
def test_scheduler_state_in_checkpoints(every_n_train_steps: Any, epoch_interval: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("state_before_saving", tmp_path, every_n_train_steps=every_n_train_steps,
                                epoch_interval=epoch_interval)
    assert ours == theirs


def test_lr_scheduler_step_hook(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("step_hook", tmp_path)
    assert ours == theirs


def test_learning_rate_seen_by_hooks_around_an_epochs_end(tmp_path: Path) -> None:
    """Lightning: the epoch's StepLR steps before on_train_batch_end of its last batch, the
    ReduceLROnPlateau after on_train_epoch_end (with a short last accumulation window too)."""
    ours, theirs = SPEC.compare("lr_seen_by_hooks", tmp_path, accumulate=2)
    assert ours == theirs
    assert len({entry[3][0] for entry in ours}) > 3  # both schedulers changed the rate
