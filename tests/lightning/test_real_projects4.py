"""More real Lightning projects nobody here wrote, with only their imports changed
(tests/helpers/lightning_projects/real_*.py; each cites its source and what was shrunk or
substituted), trained under this package and under Lightning 2.6 in one process and compared
with `torch.equal`: weights, counters, `callback_metrics`, what validate/test return,
checkpoint files, and what the projects record themselves.

Accounted for (docs/lightning.md): `validate`/`test` with one loader return the dict itself
(Lightning: a one-item list); our own `train/*` scalars join `callback_metrics` and
`logged_metrics` (`lightnings_values` compares what Lightning reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (the fixture, shared with the example ports)
from tests.helpers.lightning_projects import assert_same_run, float_values as metrics, assert_same_weights, both, lightnings_values, load_source

pytest.importorskip("lightning")


# ------------------------------- the Lightning-Hydra template: torchmetrics objects, partial factories
def test_hydra_template_logs_metric_objects_and_tests_the_best_checkpoint(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_hydra_template", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(ours["val"], theirs["val"])
    assert {"train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best"} <= set(theirs["val"])
    assert ours["test"] == theirs["test"][0]
    assert ours["best"] == theirs["best"] and ours["files"] == theirs["files"]
    assert "last.ckpt" in ours["files"]
    assert ours["lr"] == theirs["lr"]
    assert_same_weights(ours["tested"], theirs["tested"])  # the best checkpoint's weights, read back


# ---------------------------------------- a VAE annealed by trainer.state.stage, epoch and step
@pytest.mark.parametrize("schedule", ["linear", "sigmoid", "stairs"])
def test_vae_annealing_reads_the_trainer_state_stage(tmp_path: Path, schedule: str) -> None:
    ours, theirs = both("real_vae_annealing", tmp_path, schedule=schedule)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    lightnings_values(metrics(ours["logged"]), metrics(theirs["logged"]))
    assert ours["factors"] == theirs["factors"]  # the stage each step saw and the factor it made of it
    assert {stage for stage, _ in theirs["factors"]} == {"RunningStage.SANITY_CHECKING", "RunningStage.TRAINING",
                                                          "RunningStage.VALIDATING"}
    assert ours["hparams"] == theirs["hparams"] and "vae" not in theirs["hparams"]
    assert ours["stages"] == theirs["stages"] and ours["state"] == theirs["state"]


STATES = '''
import torch
import trainer as L
from torch.utils.data import DataLoader, TensorDataset
from trainer.trainer.states import RunningStage, TrainerFn, TrainerStatus


class Model(L.LightningModule):
    def __init__(self, seen):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen = seen

    def note(self, where):
        state = self.trainer.state
        self.seen.append((where, state.fn, state.stage, state.status, state.finished, state.stopped,
                          None if state.stage is None else (state.stage.evaluating, state.stage.dataloader_prefix)))

    def setup(self, stage):
        self.note(f"setup {stage}")

    def teardown(self, stage):
        self.note(f"teardown {stage}")

    def configure_optimizers(self):
        self.note("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def training_step(self, batch, batch_idx):
        self.note("training_step")
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.note("validation_step")

    def test_step(self, batch, batch_idx):
        self.note("test_step")

    def predict_step(self, batch, batch_idx):
        self.note("predict_step")
        return self.layer(batch[0])


HOOKS = ["on_fit_start", "on_sanity_check_start", "on_sanity_check_end", "on_train_start", "on_train_epoch_start",
         "on_validation_start", "on_validation_epoch_end", "on_train_epoch_end", "on_train_end", "on_fit_end",
         "on_test_start", "on_predict_start"]


class Watch(L.Callback):
    def __init__(self, seen):
        self.seen = seen


for _hook in HOOKS:
    def _make(name):
        def hook(self, trainer, module):
            module.note(name)
        return hook
    setattr(Watch, _hook, _make(_hook))


def main(root):
    seen = []
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = L.Trainer(max_epochs=1, callbacks=[Watch(seen)], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    model = Model(seen)
    before = (trainer.state.fn, trainer.state.stage, trainer.state.status)
    trainer.fit(model, data, data)
    after_fit = (trainer.state.fn, trainer.state.stage, trainer.state.status)
    trainer.validate(model, data, verbose=False)
    trainer.test(model, data, verbose=False)
    trainer.predict(model, data)
    enums = (TrainerFn.FITTING == "FIT", RunningStage.TRAINING == "train", "validate" == RunningStage.VALIDATING,
             RunningStage.SANITY_CHECKING.evaluating, TrainerStatus.INTERRUPTED.stopped,
             {RunningStage.TESTING: 1}.get("test"), [m.value for m in RunningStage], str(TrainerFn.TESTING))
    return [before, after_fit, *seen], enums
'''


def test_trainer_state_fn_stage_and_status_in_every_hook_as_lightnings(tmp_path: Path) -> None:
    """`trainer.state.fn` / `.stage` / `.status` (Lightning's `TrainerState`) and the enums of
    `trainer.trainer.states`, read before, inside every stage's hooks and steps, and after each
    call: Lightning's values, each the same enum member and the same string."""
    ours = load_source(STATES, "ours", "states").main(str(tmp_path / "ours"))
    theirs = load_source(STATES, "lightning", "states").main(str(tmp_path / "lightning"))
    assert [tuple(str(v) for v in row) for row in ours[0]] == [tuple(str(v) for v in row) for row in theirs[0]]
    assert ours[0] == theirs[0] and ours[1] == theirs[1]
    stages = {str(row[2]) for row in theirs[0][2:]}
    assert {"RunningStage.TRAINING", "RunningStage.SANITY_CHECKING", "RunningStage.VALIDATING",
            "RunningStage.TESTING", "RunningStage.PREDICTING"} <= stages
    assert {"setup TrainerFn.FITTING", "teardown TrainerFn.TESTING"} <= {row[0] for row in theirs[0][2:]}


def test_trainer_state_still_reads_and_writes_the_loop_counters(tmp_path: Path) -> None:
    """`trainer.state.skipped_steps`, `.batches_done`, ... (docs/logging.md) read the loop's own
    state; Lightning's names can't be assigned."""
    from torch.utils.data import DataLoader, TensorDataset

    from trainer import LightningModule, Trainer

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, root_dir=tmp_path)
    assert str(trainer.state.status) == "TrainerStatus.INITIALIZING" and trainer.state.fn is None
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4))
    assert trainer.state.epoch == 1 and trainer.state.skipped_steps == 0 and trainer.state.global_step == 3
    trainer.state.skipped_steps = 2
    assert trainer._run.state.skipped_steps == 2
    with pytest.raises(AttributeError, match="trainer.state.stage is set by the Trainer"):
        trainer.state.stage = "train"  # type: ignore[misc]


# ------------------------------------------- a flow-matching refiner: log_dict, its own clipping
@pytest.mark.parametrize("mode", ["cartesian_optimizer", "flexbond4d_only_optimizer", "flexbond4d_hybrid_optimizer"])
def test_flow_refiner_clips_and_logs_in_configure_gradient_clipping(tmp_path: Path, mode: str) -> None:
    ours, theirs = both("real_flow_refiner", tmp_path, mode=mode)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"grad_norm", "learning_rate", "train/loss_step", "train/loss_epoch", "val/loss"} <= set(theirs["val"])
    # log_every_n_steps=2 and 5 steps an epoch: the last step is no logging step; Lightning's
    # logged_metrics still holds its values (it takes every step's), and so does ours
    lightnings_values(metrics(ours["logged"]), metrics(theirs["logged"]))


LOGGED = '''
import torch
import trainer as L
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss_step_only", loss)
        self.log("both", loss * 2, on_step=True, on_epoch=True)
        self.log("hidden", loss * 3, logger=False)
        self.log("shared", loss + 100)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())
        self.log("shared", float(batch_idx))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Reader(L.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen.append(("batch", trainer.global_step, {k: float(v) for k, v in trainer.logged_metrics.items()}))

    def on_train_epoch_end(self, trainer, module):
        self.seen.append(("epoch", trainer.global_step, {k: float(v) for k, v in trainer.logged_metrics.items()}))


def main(root, max_steps):
    L.seed_everything(3)
    reader = Reader()
    data = DataLoader(TensorDataset(torch.randn(20, 4)), batch_size=4, shuffle=True)
    trainer = L.Trainer(max_epochs=2, max_steps=max_steps, logger=False, log_every_n_steps=3, callbacks=[reader],
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        num_sanity_val_steps=0, default_root_dir=root)
    trainer.fit(Model(), data, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    return reader.seen, {k: float(v) for k, v in trainer.logged_metrics.items()}
'''


@pytest.mark.parametrize("max_steps", [-1, 7])
def test_logged_metrics_take_every_steps_values_as_lightnings(tmp_path: Path, max_steps: int) -> None:
    """`trainer.logged_metrics` holds each step's values from that step on, whether or not the
    step writes to the logger (log_every_n_steps=3), and a validation's value of a name training
    logs too replaces the training step's, as Lightning's (read in the batch and epoch hooks and
    after fit; a run stopped by max_steps between logging steps too)."""
    ours = load_source(LOGGED, "ours", "logged").main(str(tmp_path / "ours"), max_steps)
    theirs = load_source(LOGGED, "lightning", "logged").main(str(tmp_path / "lightning"), max_steps)
    rows = list(theirs[0])
    if max_steps > 0:  # Lightning ends the cut epoch with on_train_epoch_end; here it stays unfinished (docs/lightning.md)
        assert rows[-1][:2] == ("epoch", max_steps)
        rows = rows[:-1]
    assert [(kind, step) for kind, step, _ in ours[0]] == [(kind, step) for kind, step, _ in rows]
    for (_, _, mine), (_, _, other) in zip(ours[0], rows, strict=True):
        lightnings_values(mine, other)
    after = dict(theirs[1])
    if max_steps > 0:  # the cut epoch's means: Lightning closes the epoch, here it stays open (docs/lightning.md)
        after.pop("both_epoch")
    lightnings_values(ours[1], after)
    assert "hidden" not in theirs[1] and "loss_step_only" in theirs[1]


# --------------------------- an autoregressive LSTM forecaster: early stop, top-5 files, torch.load
def test_lstm_forecaster_stops_early_keeps_the_top_five_and_reloads_by_torch_load(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_lstm_forecaster", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert theirs["stopped_epoch"] > 0 and ours["stopped_epoch"] == theirs["stopped_epoch"]
    assert ours["wait"] == theirs["wait"]
    assert ours["files"] == theirs["files"] and len(theirs["files"]) == 5
    assert ours["top"] == theirs["top"] and ours["best"] == theirs["best"] and ours["best_score"] == theirs["best_score"]
    assert_same_weights(ours["reloaded"], theirs["reloaded"])  # torch.load(best)['state_dict'] into a new wrapper


# -------------------- a Kaggle solution: a timm scheduler through lr_scheduler_step, EMA validation
def test_rna_solution_steps_a_timm_scheduler_by_lr_scheduler_step(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_rna_timm", tmp_path)
    assert_same_run(ours, theirs)  # the EMA copy included
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"loss", "loss_step", "loss_epoch", "val_loss", "lr-AdamW/pg1", "lr-AdamW/pg2"} <= set(theirs["val"])
    assert ours["lrs"] == theirs["lrs"] and len(theirs["lrs"]) == 4  # scheduler.step(epoch=self.current_epoch)
    assert ours["monitor"] == theirs["monitor"]  # what LearningRateMonitor read off the non-torch scheduler
    assert ours["best"] == theirs["best"] and ours["last"] == theirs["last"] and ours["files"] == theirs["files"]
    assert ours["csv"] == theirs["csv"] and ours["csv"].count("\n") > 100  # the test predictions, through numpy and pandas


# --------------------------- Deep SVDD on machine sounds: a module that builds its own Trainer
def test_svdd_experiment_builds_its_own_trainer_and_keeps_its_centre_in_checkpoints(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_svdd_audio", tmp_path)
    assert_same_run(ours, theirs)  # the centre buffer (registered as None, set in on_fit_start) included
    lightnings_values(ours["val"], theirs["val"])
    assert {"train_loss", "val_auroc"} <= set(theirs["val"])
    assert ours["files"] == theirs["files"] == ["best.ckpt", "initial.ckpt", "last.ckpt"]
    assert ours["best_score"] == theirs["best_score"] and ours["lr"] == theirs["lr"]
    assert ours["csv"] == theirs["csv"] and ours["csv"].count("\n") == 19  # file ids, scores, labels of the test set
    assert [s for s in ours["seen"] if s[0] == "test_auroc"] == [s for s in theirs["seen"] if s[0] == "test_auroc"]
    assert torch.equal(ours["reloaded_c"], theirs["reloaded_c"])  # on_load_checkpoint of best.ckpt
    # on_save_checkpoint saw the same centre each time; it runs more often here: the Trainer
    # also writes its own last.ckpt at every epoch end (docs/lightning.md, enable_checkpointing)
    saved = [c for kind, c in ours["seen"] if kind == "saved"]
    their_saved = [c for kind, c in theirs["seen"] if kind == "saved"]
    assert len(saved) >= len(their_saved) and all(torch.equal(c, their_saved[0]) for c in saved + their_saved)


def test_a_module_holds_the_trainer_it_assigns_itself(tmp_path: Path) -> None:
    """Lightning's `LightningModule.trainer` setter: `self.trainer = Trainer(...)` in `__init__`
    keeps that Trainer (the module is its only owner) until fit attaches it; None detaches; a
    copy leaves it behind."""
    import copy
    import gc

    from trainer import LightningModule, Trainer

    class Child(LightningModule):
        pass

    class Owner(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.child = Child()
            self.trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, root_dir=tmp_path)

    model = Owner()
    gc.collect()
    assert isinstance(model.trainer, Trainer) and model.child.trainer is model.trainer
    with pytest.raises(RuntimeError, match="not attached to a Trainer"):
        copy.deepcopy(model).trainer  # noqa: B018
    model.trainer = None
    with pytest.raises(RuntimeError, match="not attached to a Trainer"):
        model.trainer  # noqa: B018


# -------------------------------- a recommender whose setup/teardown take the stage only by name
def test_ncf_recommender_datamodule_setup_takes_kwargs_only(tmp_path: Path) -> None:
    """`setup(self, **kwargs)` (and a callback's `setup(trainer, pl_module, **kwargs)`): Lightning
    passes the stage by name to the DataModule's, the callbacks' and the module's setup and
    teardown, so these run there; they run here too, with the same stages."""
    ours, theirs = both("real_ncf_recommender", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert ours["validate"] == theirs["validate"][0] and ours["test"] == theirs["test"][0]
    assert ours["stages"] == theirs["stages"] == ["fit", "teardown fit", "validate", "teardown validate", "test",
                                                  "teardown test"]
    assert ours["seen"] == theirs["seen"]


def test_lambda_callback_setup_receives_the_stage_by_name(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from callbacks import LambdaCallback
    from trainer import LightningModule, Trainer

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.stages: list[str] = []

        def setup(self, **kwargs: Any) -> None:
            self.stages.append(kwargs["stage"])

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seen: list[str] = []
    model = Model()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, root_dir=tmp_path,
                      callbacks=[LambdaCallback(setup=lambda trainer, module, stage: seen.append(stage))])
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    assert seen == model.stages == ["fit"]
