"""Checkpoints read the Lightning way, and a run Lightning 2.x checkpointed continues here.

Our files carry Lightning's keys (`state_dict`, `epoch`, `global_step`, `hyper_parameters`,
`optimizer_states`, `lr_schedulers`) as the same objects as ours, so nothing is stored twice;
older versions of our format still load. A Lightning file is built here the way Lightning's
`dump_checkpoint` writes it (src/lightning/pytorch/trainer/connectors/checkpoint_connector.py):
state dicts of a real model, optimizer and scheduler, and its loops' progress records for each
place Lightning saves from, then continued by our Trainer and compared with a hand-written
continuation from the same states.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from tests.helpers.checkpoints import trainer
from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data, make_model
from trainer import Callback
from trainer.checkpoint import FORMAT_VERSION, CheckpointError, load_checkpoint, save_atomic

LIGHTNING_KEYS = ("state_dict", "epoch", "global_step", "hyper_parameters", "optimizer_states", "lr_schedulers")
BATCHES = 10  # make_data(): 37 samples in batches of 4


def sequential() -> DataLoader:
    return loader(make_data(), shuffle=False)


class Plain(torch.nn.Module):
    """TinyNet's architecture as a plain torch module: no trainer involved."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))


# --------------------------------------------------------------- our files, Lightning's keys
def test_our_checkpoint_loads_the_lightning_way_into_plain_torch(tmp_path: Path) -> None:
    run = trainer(tmp_path, max_epochs=2)
    model = make_model(scheduler="epoch")
    run.fit(model, loader(make_data()))
    state = torch.load(run.log_dir / "last.ckpt", weights_only=True)
    assert state["format_version"] == FORMAT_VERSION == 3
    plain = Plain()
    plain.load_state_dict(state["state_dict"])  # strict: every key, every shape
    assert_same_weights(plain, model)
    assert state["state_dict"] is state["module"]  # one object in the file
    assert state["hyper_parameters"] is state["hparams"] and state["hyper_parameters"]["scheduler"] == "epoch"
    assert (state["epoch"], state["global_step"]) == (1, 2 * BATCHES)  # the epoch that ended, as Lightning's epoch-end files
    optimizer = torch.optim.SGD(plain.parameters(), lr=1.0, momentum=0.0)
    optimizer.load_state_dict(state["optimizer_states"][0])
    assert optimizer.param_groups[0]["momentum"] == 0.9 and len(optimizer.state) == 4
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)
    scheduler.load_state_dict(state["lr_schedulers"][0])
    assert scheduler.last_epoch == 2 and scheduler.step_size == 2
    assert state["lr_schedulers"][0] is state["schedulers"][0]["state"] and state["schedulers"][0]["class"] == "StepLR"


def test_lightning_keys_do_not_store_the_tensors_twice(tmp_path: Path) -> None:
    class Wide(TinyNet):
        def __init__(self) -> None:
            super().__init__(dropout=0.0)
            self.wide = torch.nn.Linear(512, 512)  # 1 MiB of weights

    run = trainer(tmp_path, max_steps=2)
    run.fit(Wide(), sequential())
    run.save_checkpoint(tmp_path / "with.ckpt")
    state = torch.load(tmp_path / "with.ckpt", weights_only=True)
    for key in LIGHTNING_KEYS:
        state.pop(key)
    save_atomic(state, tmp_path / "without.ckpt")
    with_keys, without = (tmp_path / "with.ckpt").stat().st_size, (tmp_path / "without.ckpt").stat().st_size
    assert without > 2**20
    assert with_keys - without < 4096, (with_keys, without)  # references and a few keys, not a second copy


def test_epoch_and_global_step_mean_what_lightning_writes(tmp_path: Path) -> None:
    import callbacks

    every_epoch = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1)
    run = trainer(tmp_path, max_epochs=2, callbacks=[every_epoch])
    run.fit(make_model(), sequential())
    for epoch in (0, 1):  # the file named epoch=N holds epoch N, as Lightning's do
        saved = torch.load(tmp_path / "ck" / f"epoch={epoch}-step={(epoch + 1) * BATCHES}.ckpt", weights_only=True)
        assert (saved["epoch"], saved["global_step"]) == (epoch, (epoch + 1) * BATCHES)
    inside = trainer(tmp_path / "inside", max_steps=BATCHES + 3)
    inside.fit(make_model(), sequential())
    saved = torch.load(inside.log_dir / "last.ckpt", weights_only=True)
    assert (saved["epoch"], saved["global_step"], saved["loop"]["batches_done"]) == (1, BATCHES + 3, 3)  # the epoch in progress


def test_a_hook_that_replaces_state_dict_decides_the_weights(tmp_path: Path) -> None:
    class DropsTheHead(TinyNet):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:  # Lightning's idiom
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith("net.3")}

    run = trainer(tmp_path, max_steps=1)
    run.fit(DropsTheHead(), sequential())
    run.save_checkpoint(tmp_path / "x.ckpt")
    state = torch.load(tmp_path / "x.ckpt", weights_only=True)
    assert state["module"] is state["state_dict"] and not any(k.startswith("net.3") for k in state["module"])


def test_a_weights_only_file_has_state_dict(tmp_path: Path) -> None:
    import callbacks

    weights = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", save_weights_only=True)
    trainer(tmp_path, max_epochs=1, callbacks=[weights]).fit(make_model(), sequential())
    state = torch.load(weights.best_model_path, weights_only=True)
    Plain().load_state_dict(state["state_dict"])
    assert state["state_dict"] is state["module"] and (state["epoch"], state["global_step"]) == (0, BATCHES)


def _as_version(state: dict[str, Any], version: int) -> dict[str, Any]:
    """A current checkpoint in the layout an older version of ours wrote."""
    old = {k: v for k, v in state.items() if k not in LIGHTNING_KEYS}
    old["format_version"] = version
    schedulers = old.pop("schedulers")
    if version == 2:
        old["lr_schedulers"] = schedulers
    else:  # 1: one optimizer and one scheduler, bare
        old["optimizer"] = old.pop("optimizers")[0]["state"]
        old["lr_scheduler"] = schedulers[0]["state"] if schedulers else None
    return old


@pytest.mark.parametrize("version", [1, 2])
def test_files_of_older_versions_still_load_and_resume_exactly(tmp_path: Path, version: int) -> None:
    first = trainer(tmp_path / "first", max_steps=BATCHES + 4)
    first.fit(make_model(scheduler="epoch"), loader(make_data()))
    current = torch.load(first.log_dir / "last.ckpt", weights_only=True)
    old = tmp_path / f"v{version}.ckpt"
    if version == 1:
        torch.save(_as_version(current, 1), old)  # that version wrote no whole-file checksum
    else:
        save_atomic(_as_version(current, 2), old)
    loaded = load_checkpoint(old)
    assert loaded["format_version"] == version and loaded["state_dict"] is loaded["module"]
    assert loaded["optimizer_states"][0] is loaded["optimizers"][0]["state"] and loaded["epoch"] == 1

    finals = []
    for path in (first.log_dir / "last.ckpt", old):
        model = make_model(seed=7, scheduler="epoch")
        trainer(tmp_path / path.stem, max_epochs=3).fit(model, loader(make_data()), ckpt_path=path)
        finals.append(model)
    assert_same_weights(finals[0], finals[1])


# ------------------------------------------------------------------ Lightning's own files
def _progress(ready: int, started: int, processed: int, completed: int, total: dict[str, int] | None = None) -> dict[str, Any]:
    current = {"ready": ready, "started": started, "processed": processed, "completed": completed}
    return {"total": dict(total or current), "current": current}


def _loops(where: str, epochs: int, batches: int, global_step: int) -> dict[str, Any]:
    """Lightning's `loops` entry, as its fit loop leaves it at each place it saves from:
    `epoch_end` (ModelCheckpoint in on_train_epoch_end after `epochs` epochs), `fit_end`
    (trainer.save_checkpoint after fit), `mid_epoch` (on_train_batch_end, `batches` into
    epoch `epochs`)."""
    if where == "epoch_end":
        epoch = _progress(epochs, epochs, epochs, epochs - 1)
        batch = {**_progress(BATCHES, BATCHES, BATCHES, BATCHES), "is_last_batch": True}
    elif where == "fit_end":
        epoch = _progress(epochs, epochs, epochs, epochs)
        batch = {**_progress(BATCHES, BATCHES, BATCHES, BATCHES), "is_last_batch": True}
    else:
        epoch = _progress(epochs + 1, epochs + 1, epochs, epochs)
        batch = {**_progress(batches, batches, batches, batches - 1), "is_last_batch": False}
    done = epochs * BATCHES + (batches if where == "mid_epoch" else 0)
    batch["total"] = {"ready": done, "started": done, "processed": done, "completed": done - (where == "mid_epoch")}
    step = {"total": {"ready": global_step, "completed": global_step}, "current": {"ready": global_step, "completed": global_step}}
    evaluation = {"state_dict": {}, "batch_progress": {**_progress(0, 0, 0, 0), "is_last_batch": False}}
    return {
        "fit_loop": {
            "state_dict": {},
            "epoch_loop.state_dict": {"_batches_that_stepped": global_step},
            "epoch_loop.batch_progress": batch,
            "epoch_loop.scheduler_progress": {"total": {"ready": epochs, "completed": epochs}, "current": {"ready": 0, "completed": 0}},
            "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": step, "zero_grad": copy.deepcopy(step)}},
            "epoch_loop.manual_optimization.optim_step_progress": {"total": {"ready": 0, "completed": 0}, "current": {"ready": 0, "completed": 0}},
            "epoch_loop.val_loop.state_dict": {},
            "epoch_loop.val_loop.batch_progress": evaluation["batch_progress"],
            "epoch_progress": epoch,
        },
        "validate_loop": evaluation, "test_loop": copy.deepcopy(evaluation), "predict_loop": copy.deepcopy(evaluation),
    }


def hand_epochs(model: torch.nn.Module, optimizer: Any, scheduler: Any, epochs: int, skip: int = 0) -> None:
    """The hand-written loop: SGD steps over the sequential batches, the scheduler per epoch."""
    model.train()
    for epoch in range(epochs):
        for index, (x, y) in enumerate(sequential()):
            if epoch == 0 and index < skip:
                continue
            F.mse_loss(model(x).float(), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        scheduler.step()


def lightning_run(epochs: int, batches: int = 0) -> tuple[TinyNet, Any, Any]:
    """A model, optimizer and scheduler trained by hand as a Lightning run would have been."""
    model = make_model(seed=3, dropout=0.0, scheduler="epoch")
    setup = model.configure_optimizers()
    optimizer, scheduler = setup["optimizer"], setup["lr_scheduler"]["scheduler"]
    hand_epochs(model, optimizer, scheduler, epochs)
    if batches:
        for index, (x, y) in enumerate(sequential()):
            if index == batches:
                break
            F.mse_loss(model(x).float(), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return model, optimizer, scheduler


def lightning_file(path: Path, where: str, epochs: int, batches: int = 0, **extra: Any) -> tuple[TinyNet, Any, Any]:
    """Write what Lightning 2.x's dump_checkpoint writes for that run; return its objects."""
    model, optimizer, scheduler = lightning_run(epochs, batches if where == "mid_epoch" else 0)
    global_step = epochs * BATCHES + (batches if where == "mid_epoch" else 0)
    checkpoint = {
        "epoch": {"epoch_end": epochs - 1, "fit_end": epochs, "mid_epoch": epochs}[where],  # trainer.current_epoch then
        "global_step": global_step,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": model.state_dict(),
        "loops": _loops(where, epochs, batches, global_step),
        "callbacks": {
            "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, 'train_time_interval': None}": {
                "monitor": None, "best_model_score": None, "best_model_path": str(path), "current_score": None,
                "dirpath": str(path.parent), "best_k_models": {}, "kth_best_model_path": "", "kth_value": torch.tensor(float("inf")),
                "last_model_path": "",
            }
        },
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
        "hparams_name": "kwargs",
        "hyper_parameters": {"lr": 0.05, "dropout": 0.0, "optimizer": "sgd", "scheduler": "epoch", "blow_up_at": ()},
        **extra,
    }
    torch.save(checkpoint, path)  # Lightning's _atomic_save: torch.save into a buffer, then the file
    return model, optimizer, scheduler


@pytest.mark.parametrize(("where", "batches"), [("epoch_end", 0), ("fit_end", 0), ("mid_epoch", 4)])
def test_a_lightning_run_continues_as_the_hand_written_loop(tmp_path: Path, where: str, batches: int) -> None:
    path = tmp_path / "lightning.ckpt"
    model, optimizer, scheduler = lightning_file(path, where, epochs=2, batches=batches)
    hand_epochs(model, optimizer, scheduler, epochs=2, skip=batches)  # the rest of the run, by hand

    ours = make_model(seed=11, dropout=0.0, scheduler="epoch")  # other initial weights: all of them are taken over
    run = trainer(tmp_path / "ours", max_epochs=4)
    with pytest.warns(UserWarning, match="PyTorch Lightning 2.4.0") as caught:
        run.fit(ours, sequential(), ckpt_path=path)
    message = next(str(w.message) for w in caught if "PyTorch Lightning" in str(w.message))
    assert "random streams" in message and "position in the data order" in message and "lightning.ckpt" in message
    assert ("4 batches into epoch 2" in message) == (where == "mid_epoch")
    assert_same_weights(ours, model)
    assert (run.global_step, run.current_epoch) == (4 * BATCHES, 4)
    assert run.lr_scheduler_configs[0].scheduler.state_dict() == scheduler.state_dict()


@pytest.mark.parametrize("key", ["MixedPrecision", "native_amp_scaling_state"])
def test_lightning_gradscaler_state_reaches_amp(tmp_path: Path, key: str) -> None:
    path = tmp_path / "amp.ckpt"
    scaler = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 7}
    lightning_file(path, "fit_end", epochs=1, **{key: scaler})
    run = trainer(tmp_path / "ours", precision="amp", max_epochs=1)  # nothing left to train: the restore alone
    with pytest.warns(UserWarning, match="GradScaler's state"):
        run.fit(make_model(dropout=0.0, scheduler="epoch"), sequential(), ckpt_path=path)
    state = run.precision.scaler.state_dict()
    assert (state["scale"], state["_growth_tracker"]) == (1024.0, 7)


def test_a_lightning_weights_only_file_evaluates_but_does_not_resume(tmp_path: Path) -> None:
    model, _, _ = lightning_run(1)
    path = tmp_path / "weights.ckpt"
    torch.save({"epoch": 0, "global_step": BATCHES, "pytorch-lightning_version": "2.4.0", "state_dict": model.state_dict(),
                "loops": _loops("epoch_end", 1, 0, BATCHES)}, path)
    with pytest.raises(CheckpointError, match="weights only"):
        trainer(tmp_path / "a", max_epochs=2).fit(make_model(dropout=0.0), sequential(), ckpt_path=path)
    evaluated = make_model(seed=5, dropout=0.0)
    trainer(tmp_path / "b").validate(evaluated, sequential(), ckpt_path=path)
    assert_same_weights(evaluated, model)


class Probe(Callback):
    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        self.seen = checkpoint


def test_lightning_keys_stay_visible_to_on_load_checkpoint_and_callback_states_start_fresh(tmp_path: Path) -> None:
    path = tmp_path / "l.ckpt"
    lightning_file(path, "epoch_end", epochs=1, my_key=torch.arange(3))  # what a module's on_save_checkpoint added
    probe = Probe()
    with pytest.warns(UserWarning, match="callback states"):
        trainer(tmp_path / "ours", max_epochs=2, callbacks=[probe]).fit(make_model(dropout=0.0, scheduler="epoch"), sequential(), ckpt_path=path)
    assert torch.equal(probe.seen["my_key"], torch.arange(3)) and probe.seen["hparams_name"] == "kwargs"
    assert probe.seen["callbacks"] == {} and "ModelCheckpoint{" in next(iter(probe.seen["lightning_callbacks"]))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.update(state_dict="oops"), "'state_dict' is a str"),
        (lambda c: c.update(global_step=-1), "'global_step' is -1"),
        (lambda c: c.update(optimizer_states={"a": 1}), "'optimizer_states' is not a list"),
        (lambda c: c.update(hyper_parameters=argparse.Namespace(lr=0.1)), "add_safe_globals"),
    ],
)
def test_a_garbled_lightning_file_is_refused_naming_it(tmp_path: Path, change: Any, expected: str) -> None:
    path = tmp_path / "garbled.ckpt"
    lightning_file(path, "fit_end", epochs=1)
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="garbled.ckpt") as raised:
        trainer(tmp_path / "ours", max_epochs=2).fit(make_model(dropout=0.0, scheduler="epoch"), sequential(), ckpt_path=path)
    assert expected in str(raised.value) and "PyTorch Lightning" in str(raised.value)


def test_a_lightning_file_of_another_model_or_optimizers_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "other.ckpt"
    lightning_file(path, "fit_end", epochs=1)
    with pytest.raises(CheckpointError, match=r"other\.ckpt.*1 optimizer.*returned 0|other\.ckpt.*holds 1 LR scheduler"):
        trainer(tmp_path / "a", max_epochs=2).fit(make_model(dropout=0.0), sequential(), ckpt_path=path)  # no scheduler
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"] = {"encoder.weight": torch.zeros(2, 2)}
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"other\.ckpt.*missing: net\.0\.bias.*unexpected: encoder\.weight"):
        trainer(tmp_path / "b", max_epochs=2).fit(make_model(dropout=0.0, scheduler="epoch"), sequential(), ckpt_path=path)


def test_a_foreign_file_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.ckpt"
    torch.save({"epoch": 1, "state_dict": {}}, path)  # no Lightning version, no marker of ours
    with pytest.raises(CheckpointError, match="foreign.ckpt.*not a checkpoint of this trainer"):
        load_checkpoint(path)
