"""`callbacks.ModelCheckpoint`: which files exist after a run, and its state across a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import ModelCheckpoint
from tests.helpers.checkpoints import scramble_global_rng, shuffled, trainer
from tests.helpers.reference import TinyNet, assert_same_weights, make_data
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint

SCORES = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0, 0.5]  # val/loss by epoch


class Scored(TinyNet):
    """TinyNet whose val/loss is scripted per epoch, so the ranking is known in advance."""

    def __init__(self) -> None:
        super().__init__(lr=0.01)  # stays finite over seven epochs

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", torch.tensor(SCORES[self.trainer.current_epoch]))


def scored(seed: int = 0) -> Scored:
    torch.manual_seed(seed)
    return Scored()


def fit(tmp_path: Path, checkpoint: ModelCheckpoint, epochs: int, ckpt_path: Any = None, name: str = "run", **kwargs: Any) -> Trainer:
    run = trainer(tmp_path / name, max_epochs=epochs, callbacks=[checkpoint], **kwargs)
    run.fit(scored(), shuffled(make_data()), shuffled(make_data(12, seed=1)), ckpt_path=ckpt_path)
    return run


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_top_k_keeps_the_best_files_and_sanitises_names(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", filename="e{epoch}-val/loss={val/loss:.1f}", monitor="val/loss", save_top_k=2,
                         auto_insert_metric_name=False)
    fit(tmp_path, mc, epochs=5)
    assert names(tmp_path / "ck") == ["e3-val_loss=1.0.ckpt", "e4-val_loss=2.0.ckpt"]
    assert mc.best_model_path == str(tmp_path / "ck" / "e3-val_loss=1.0.ckpt") and mc.best_model_score == 1.0
    assert set(mc.best_k_models.values()) == {1.0, 2.0}


def test_mode_max_and_default_dirpath(tmp_path):
    mc = ModelCheckpoint(monitor="val/loss", mode="max", save_top_k=1)
    run = fit(tmp_path, mc, epochs=4)
    folder = run.log_dir / "checkpoints"
    assert names(folder) == ["epoch=0-step=10.ckpt"]  # 5.0 stays the largest
    assert mc.best_model_path == str(folder / "epoch=0-step=10.ckpt")
    assert mc.dirpath == str(folder)  # a string, as Lightning's: `dirpath + "/name"` works


def test_dirpath_is_a_string_as_given_or_set(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "given")
    assert mc.dirpath == str(tmp_path / "given")
    mc.dirpath = tmp_path / "moved"  # Lightning lets a script point it elsewhere before fit
    fit(tmp_path, mc, epochs=1)
    assert mc.dirpath == str(tmp_path / "moved") and Path(mc.best_model_path).parent == tmp_path / "moved"
    assert ModelCheckpoint().dirpath is None


def test_every_n_train_steps_and_save_last(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=4, every_n_epochs=None, save_top_k=-1, save_last=True)
    fit(tmp_path, mc, epochs=2)  # 20 steps
    assert names(tmp_path / "ck") == sorted(
        [f"epoch={(s - 1) // 10}-step={s}.ckpt" for s in (4, 8, 12, 16, 20)] + ["last.ckpt"])
    assert load_checkpoint(tmp_path / "ck" / "epoch=1-step=12.ckpt")["loop"]["global_step"] == 12
    assert load_checkpoint(tmp_path / "ck" / "last.ckpt")["loop"]["global_step"] == 20


def test_without_monitor_top_1_keeps_the_latest(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck")
    fit(tmp_path, mc, epochs=3)
    assert names(tmp_path / "ck") == ["epoch=2-step=30.ckpt"]


def test_resume_keeps_the_best_k_bookkeeping(tmp_path):
    def make() -> ModelCheckpoint:
        return ModelCheckpoint(dirpath=tmp_path / "ck", filename="{epoch}", monitor="val/loss", save_top_k=2)

    first = make()
    run = fit(tmp_path, first, epochs=3)
    assert names(tmp_path / "ck") == ["epoch=1.ckpt", "epoch=2.ckpt"]  # 3.0 and 4.0
    again = make()
    fit(tmp_path, again, epochs=7, ckpt_path=run.log_dir / "last.ckpt", name="resumed")
    assert again.best_k_models == {str(tmp_path / "ck" / "epoch=3.ckpt"): 1.0, str(tmp_path / "ck" / "epoch=6.ckpt"): 0.5}
    # Files of the first run that fell out of the top 2 were deleted by the resumed run.
    assert names(tmp_path / "ck") == ["epoch=3.ckpt", "epoch=6.ckpt"]
    uninterrupted = make()
    uninterrupted.dirpath = tmp_path / "ck_full"
    fit(tmp_path, uninterrupted, epochs=7, name="full")
    assert names(tmp_path / "ck_full") == names(tmp_path / "ck")


def test_an_epoch_end_file_resumes_exactly(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", filename="{epoch}", save_top_k=-1)
    model = scored()
    torch.manual_seed(1)
    run = trainer(tmp_path / "full", max_epochs=3, callbacks=[mc], accumulate_grad_batches=3)
    run.fit(model, shuffled(make_data()), shuffled(make_data(12, seed=1)))
    saved = load_checkpoint(tmp_path / "ck" / "epoch=1.ckpt")
    assert (saved["loop"]["epoch"], saved["loop"]["batches_done"]) == (2, 0)  # epoch 1 is finished in it
    scramble_global_rng()
    resumed = Scored()
    trainer(tmp_path / "resumed", max_epochs=3, accumulate_grad_batches=3).fit(
        resumed, shuffled(make_data()), shuffled(make_data(12, seed=1)), ckpt_path=tmp_path / "ck" / "epoch=1.ckpt")
    assert_same_weights(model, resumed)


class FailingSaves(Trainer):
    """The disk fills up when the save of the best epoch (3) is written, at the end of fit."""

    def save_checkpoint(self, path: Any, weights_only: bool = False) -> Path:
        if Path(path).name == "epoch=3.ckpt":
            raise OSError(f"No space left on device: {path}")
        return super().save_checkpoint(path)


def test_retention_happens_only_after_the_new_file_is_written(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", filename="{epoch}", monitor="val/loss", save_top_k=1)
    run = FailingSaves(max_epochs=4, callbacks=[mc], logger=False, enable_progress_bar=False, root_dir=tmp_path,
                       enable_checkpointing=False, device="cpu")
    with pytest.raises(OSError, match="No space"):
        run.fit(scored(), shuffled(make_data()), shuffled(make_data(12, seed=1)))
    # epoch=3.ckpt (1.0) would have replaced epoch=1.ckpt (3.0): the failed write deleted nothing and
    # the bookkeeping still names only the file that exists.
    assert names(tmp_path / "ck") == ["epoch=1.ckpt"]
    assert mc.best_k_models == {str(tmp_path / "ck" / "epoch=1.ckpt"): 3.0}
    assert mc.best_model_path == str(tmp_path / "ck" / "epoch=1.ckpt")


def test_missing_monitor_names_the_metrics_that_exist(tmp_path):
    mc = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val/acc")
    with pytest.raises(KeyError, match=r"(?s)'val/acc'.*Logged so far: .*val/loss"):
        fit(tmp_path, mc, epochs=1)


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "best"}, "mode=...) expected 'min' or 'max'. Received: 'best'"),
    ({"save_top_k": -2}, "save_top_k=...) expected an int >= -1"),
    ({"save_top_k": 3}, "needs monitor"),
    ({"every_n_train_steps": -1}, "every_n_train_steps=...) expected an int >= 0 (0: never)"),
    ({"every_n_epochs": 1.5}, "every_n_epochs=...) expected an int >= 0 (0: never)"),
    ({"filename": "{val/loss:d}"}, "format spec 'd'"),
    ({"filename": "{epoch"}, "balanced braces"),
])
def test_invalid_arguments_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)").replace("...", r"\.\.\.")):
        ModelCheckpoint(**kwargs)


def test_mid_epoch_validation_files_resume_exactly(tmp_path):
    """val_check_interval=0.5 (save_on_train_epoch_end resolves to False): a file after every
    validation, the mid-epoch ones included, and each resumes to the uninterrupted run's weights."""
    def run(name: str, mc: ModelCheckpoint, ckpt_path: Any = None) -> Scored:
        model = scored()
        torch.manual_seed(1)
        trainer(tmp_path / name, max_epochs=2, val_check_interval=0.5, accumulate_grad_batches=2, callbacks=[mc]).fit(
            model, shuffled(make_data()), shuffled(make_data(12, seed=1)), ckpt_path=ckpt_path)
        return model

    full = run("full", ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1))
    # 10 batches in windows of 2: validation after the step that holds batch 5 (step 3) and at the epoch's end.
    files = ["epoch=0-step=3.ckpt", "epoch=0-step=5.ckpt", "epoch=1-step=8.ckpt", "epoch=1-step=10.ckpt"]
    assert names(tmp_path / "ck") == sorted(files)
    mid = load_checkpoint(tmp_path / "ck" / "epoch=0-step=3.ckpt")
    assert (mid["loop"]["epoch"], mid["loop"]["batches_done"], mid["loop"]["validation_pending"]) == (0, 6, False)
    for start in ("epoch=0-step=3.ckpt", "epoch=0-step=5.ckpt", "epoch=1-step=8.ckpt"):
        scramble_global_rng()
        again = ModelCheckpoint(dirpath=tmp_path / start, save_top_k=-1)
        resumed = run(f"from-{start}", again, ckpt_path=tmp_path / "ck" / start)
        assert_same_weights(full, resumed)
        for later in names(tmp_path / start):  # the files the resumed run wrote are the uninterrupted run's
            ours, reference = load_checkpoint(tmp_path / start / later), load_checkpoint(tmp_path / "ck" / later)
            assert all(torch.equal(ours["state_dict"][k], v) for k, v in reference["state_dict"].items()), later
        assert names(tmp_path / start) == sorted(files[files.index(start) + 1:])


class Nudge(Callback):
    """Changes the weights after every batch, as an EMA callback does."""

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        with torch.no_grad():
            module.net[0].weight.mul_(0.9)


class Snapshot(Callback):
    """Records the weights at on_train_batch_end, after the callbacks listed before it."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.setdefault(trainer.global_step, {k: v.clone() for k, v in module.state_dict().items()})


class NudgedInHook(Scored):
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        with torch.no_grad():
            self.net[0].bias.add_(1.0)


def test_step_files_hold_the_state_after_the_earlier_batch_end_hooks(tmp_path):
    """every_n_train_steps saves in on_train_batch_end (Lightning's): after the step and the callbacks
    listed before it, before the module's own hook (which Lightning calls after the callbacks')."""
    mc, snapshot = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2, save_top_k=-1), Snapshot()
    torch.manual_seed(0)
    model = NudgedInHook()
    trainer(tmp_path / "run", max_epochs=1, accumulate_grad_batches=2, callbacks=[Nudge(), mc, snapshot]).fit(
        model, shuffled(make_data()))
    assert names(tmp_path / "ck") == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
    for step in (2, 4):
        saved = load_checkpoint(tmp_path / "ck" / f"epoch=0-step={step}.ckpt")["state_dict"]
        seen = snapshot.seen[step]
        assert all(torch.equal(saved[k], seen[k]) for k in seen)
    # ...and the module's hook ran after the save: its nudge is in the weights but not in the file.
    last = load_checkpoint(tmp_path / "ck" / "epoch=0-step=4.ckpt")["state_dict"]
    assert not torch.equal(last["net.0.bias"], model.state_dict()["net.0.bias"])


def test_checkpoint_callbacks_run_after_the_others_as_in_lightning(tmp_path):
    from trainer import Callback, Trainer
    from trainer.callback import Checkpoint

    class Other(Callback):
        pass

    saver, first, second = ModelCheckpoint(dirpath=tmp_path), Other(), Other()
    run = Trainer(callbacks=[saver, first, second], logger=False)
    assert run.callbacks == [first, second, saver] and isinstance(saver, Checkpoint)
