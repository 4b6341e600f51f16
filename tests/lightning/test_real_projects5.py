"""Real Lightning projects nobody here wrote, with only their imports changed
(tests/helpers/lightning_projects/real_*.py; each cites its source and what was shrunk or
substituted), trained under this package and under Lightning 2.6 in one process and compared
with `torch.equal`: weights, counters, `callback_metrics`, what `test` returns, checkpoint
files, learning rates and param groups, and what the projects record themselves.

This set exercises what earlier sets did not: a `BaseFinetuning` callback unfreezing in two
milestones into new param groups (`initial_denom_lr`) with BatchNorm kept frozen; SWA from an
int epoch with annealing over a model with BatchNorm, `grad_norm` logged from
`on_before_optimizer_step`, a scheduler dict with `"strict": False` and a `ModelCheckpoint`
whose monitor never appears; manual optimization with two AdamW optimizers and two
schedulers stepped every batch (and a Python float logged through `log_dict`);
`val_check_interval=0.5` with a `ModelCheckpoint` whose file name holds a metric with a
slash, a model logging its own `train/loss`, and `test(ckpt_path="best")`; two validation
loaders each watched by a callback that logs from `on_validation_batch_end` with
`add_dataloader_idx=True`, and `predict` returning the step's dicts; a fine-tuning run cut
after a milestone and resumed with `fit(ckpt_path=...)`.

Accounted for (docs/lightning.md): `test` with one loader returns the dict itself (Lightning: a
one-item list); our own `train/*` scalars join `callback_metrics` (`lightnings_values` compares
what Lightning reports); `last.ckpt` is written by the Trainer itself; SWA's BatchNorm pass
runs when training ends, not as an extra epoch (one step and one epoch fewer, and the values
training_step logs in that extra epoch are Lightning's only); `/` in a checkpoint's rendered
name becomes `_`, and without a logger the checkpoints sit in the run folder; a resume
restores the random streams (a resumed run draws its own data order, not Lightning's).

Found and fixed here (each test failed before its fix): a `BaseFinetuning` resume left the
restored groups frozen; `TensorBoardLogger(version="")` raised; a `ModelCheckpoint` whose
`dirpath` is the run folder wrote `last-v1.ckpt`; `on_before_zero_grad` ran right after the
step instead of at Lightning's place; a module overriding `optimizer_zero_grad` could not
checkpoint between steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (the fixture, shared with the example ports)
from tests.helpers.lightning_projects import assert_same_run, float_values as metrics, assert_same_weights, both, lightnings_values, load_source, run

pytest.importorskip("lightning")
pytest.importorskip("torchmetrics")
pytest.importorskip("sklearn")


# ---------------------------------------- bkntr/brainways: milestone fine-tuning into new param groups
def test_brainways_unfreezes_in_milestones_into_new_param_groups(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_brainways_finetune", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"train_hem_acc", "val_ap_mae", "val_loss"} <= set(theirs["val"])
    assert ours["test"] == theirs["test"][0]
    # three groups: the head, then each milestone's layers at a tenth of the lr, weight decay kept
    assert ours["groups"] == theirs["groups"] and len(theirs["groups"]) == 3
    assert ours["frozen"] == theirs["frozen"] and all(theirs["frozen"].values())
    assert ours["bn_tracking"] == theirs["bn_tracking"]
    assert ours["best"] == theirs["best"] and ours["best_score"] == theirs["best_score"]
    assert [name for name in ours["files"] if name != "last.ckpt"] == theirs["files"]


# ---------------------------------------- a Kaggle survival notebook: SWA, grad_norm, an absent monitor
def test_pairwise_ranking_notebook_with_swa_and_grad_norms(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_pairwise_ranking_swa", tmp_path)
    # Lightning's SWA adds a BatchNorm epoch (one more step and epoch): the weights are equal
    assert_same_run(ours, theirs, steps_differ_by=1)
    extra_epoch = {"train_loss", "train_loss_epoch", "train_loss_step", "race_loss", "aux_loss"}
    theirs_seen = {key: value for key, value in metrics(theirs["val"]).items() if key not in extra_epoch}
    lightnings_values(metrics(ours["val"]), theirs_seen)
    assert "grad_2.0_norm_total" in theirs_seen and "lr-Adam" in theirs_seen
    assert extra_epoch <= set(ours["val"])
    assert ours["test"] == theirs["test"][0]
    assert ours["lr"] == theirs["lr"]
    assert ours["index"] == theirs["index"]  # the fold drawn from NumPy's global generator
    assert ours["best"] == theirs["best"] == "" and ours["files"] == theirs["files"] == []


# ---------------------------------------- a HiFi-GAN: manual optimization, two optimizers, two schedulers
@pytest.mark.parametrize("train_discriminator", [True, False])
def test_hifigan_steps_two_optimizers_and_two_schedulers_by_hand(tmp_path: Path, one_thread: None,
                                                                 train_discriminator: bool) -> None:
    ours, theirs = both("real_hifigan_manual", tmp_path, train_discriminator=train_discriminator)
    assert_same_run(ours, theirs)
    assert ours["trainer"].global_step == (12 if train_discriminator else 6)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert ours["lrs"] == theirs["lrs"] and ours["lrs"][0] < 1e-4


# ---------------------------------------- DecDTW's audio alignment: slashes in names, half-epoch validation
def test_music_dtw_validates_twice_an_epoch_and_tests_the_best_checkpoint(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_music_dtw", tmp_path)
    assert_same_run(ours, theirs)
    # `train/loss` is the model's own here: its value wins over the Trainer's scalar of that name
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert ours["test"] == theirs["test"][0]  # from the best checkpoint, read back
    # the same checkpoint chosen; Lightning keeps the "/" of `{val/loss}` (a folder `epoch=01-val/`),
    # here it becomes "_" (docs/lightning.md), in the run's folder (no logger: `default/version_0`)
    assert theirs["best"].replace("val/loss", "val_loss").split("/")[-1] == ours["best"].split("/")[-1]
    assert [name.split("/")[-1] for name in ours["files"] if not name.endswith("last.ckpt")] == \
        [name.replace("val/loss", "val_loss").split("/")[-1] for name in theirs["files"]]
    assert len(theirs["files"]) == 1


def test_brainways_resumed_after_a_milestone_trains_its_unfrozen_groups(tmp_path: Path, one_thread: None) -> None:
    # cut after epoch 2 (the first milestone's group in the checkpoint), resumed by a fresh
    # model whose `freeze_before_training` froze that group again: the restored group trains,
    # as in the run never cut (Lightning restores the group but leaves its parameters frozen)
    straight = run("real_brainways_finetune", "ours", tmp_path / "straight")
    resumed = run("real_brainways_finetune", "ours", tmp_path / "resumed", stop_after=2)
    assert_same_weights(resumed["model"], straight["model"])
    assert resumed["groups"] == straight["groups"]
    assert float(resumed["val"]["val_loss"]) == float(straight["val"]["val_loss"])


# ---------------------------------------- OML: a metric callback per validation loader, logging from a callback
def test_oml_metric_callbacks_log_per_validation_loader(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_oml_two_loaders", tmp_path)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"OVERALL/cmc/1/dataloader_idx_0", "OVERALL/norm/mean/dataloader_idx_1", "triplet_loss_epoch",
            "active_tri", "lr"} <= set(theirs["val"])
    assert ours["validate"] == theirs["validate"] and len(theirs["validate"]) == 2
    assert torch.equal(ours["predicted"], theirs["predicted"])
    assert ours["predicted_keys"] == theirs["predicted_keys"] and ours["lr"] == theirs["lr"]


# ---------------------------------------- a PESTO fine-tuning script: version="", a callback's last.ckpt in the run folder
def test_pesto_run_folder_without_version_shares_its_last_checkpoint(tmp_path: Path, one_thread: None) -> None:
    ours, theirs = both("real_pesto_finetune", tmp_path, resume=True)
    assert_same_run(ours, theirs)
    lightnings_values(metrics(ours["val"]), metrics(theirs["val"]))
    assert {"train/grad_norm_pre_clip", "train/grad_norm_post_clip", "lr-Adam", "train_loss"} <= set(theirs["val"])
    assert ours["offsets"] == theirs["offsets"] and len(theirs["offsets"]) == 3  # a new loader every epoch
    # TensorBoardLogger(version=""): no version folder, the run folder is save_dir/name itself
    assert ours["log_dir"] == ours["run_dir"] and theirs["log_dir"] == theirs["run_dir"]
    # ModelCheckpoint(dirpath=<run folder>, save_last=True): one last.ckpt, the Trainer's own file too
    assert ours["last"] == theirs["last"] == "last.ckpt"
    assert ours["best"] == theirs["best"] and ours["files"] == theirs["files"] and ours["lr"] == theirs["lr"]
    # resumed from that last.ckpt (the data differ from Lightning's: its offsets come from fresh random streams)
    again, other = ours["resumed"], theirs["resumed"]
    assert again["trainer"].global_step == other["trainer"].global_step == 12
    assert again["last"] == other["last"] == "last.ckpt"
    assert not [name for name in again["files"] if "-v" in name]


ZERO_GRAD_OVERRIDE = '''
import torch
import trainer as L
from torch.utils.data import DataLoader, TensorDataset
from trainer.callbacks import ModelCheckpoint


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=False)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(root):
    L.seed_everything(0)
    every = ModelCheckpoint(dirpath=root / "ckpts", monitor="loss", every_n_train_steps=1, save_top_k=-1,
                            filename="{epoch}-{step}")
    trainer = L.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=root, callbacks=[every])
    model = Model()
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 3)), batch_size=4))
    return model, sorted(path.name for path in (root / "ckpts").iterdir())
'''


def test_a_zero_grad_override_leaves_the_steps_gradients_and_still_checkpoints_every_step(tmp_path: Path) -> None:
    # the gradients an `optimizer_zero_grad` override finds are the finished step's, not a window in progress
    (ours, our_files), (theirs, their_files) = (
        load_source(ZERO_GRAD_OVERRIDE, framework, "zero_grad_override").main(tmp_path / framework)
        for framework in ("ours", "lightning"))
    assert_same_weights(ours, theirs)
    assert our_files == their_files and len(their_files) == 6


SWA_WITH_ZERO_GRAD_HOOK = '''
import torch
import trainer as L
from torch.utils.data import DataLoader, TensorDataset
from trainer.callbacks import StochasticWeightAveraging


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Norms(L.Callback):
    def __init__(self):
        self.seen = []

    def on_before_zero_grad(self, trainer, pl_module, optimizer):
        grads = [p.grad.norm() for p in pl_module.parameters() if p.grad is not None]
        self.seen.append((trainer.global_step, float(torch.stack(grads).norm()) if grads else None))


def main(root):
    L.seed_everything(0)
    norms = Norms()
    trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root,
                        callbacks=[StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1), norms])
    model = Model()
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 3)), batch_size=4, shuffle=True))
    return {"model": model, "trainer": trainer, "seen": norms.seen}
'''


def test_swa_keeps_its_gradients_when_a_callback_of_ones_own_watches_zero_grad(tmp_path: Path) -> None:
    ours, theirs = (load_source(SWA_WITH_ZERO_GRAD_HOOK, framework, "swa_zero_grad").main(tmp_path / framework)
                    for framework in ("ours", "lightning"))
    assert_same_run(ours, theirs, steps_differ_by=1)  # Lightning's SWA BatchNorm epoch: one step more
    # the hook sees what Lightning's sees, step by step (Lightning's extra epoch adds its own calls)
    assert ours["seen"] == theirs["seen"][:len(ours["seen"])] and ours["seen"][0] == (0, None)
