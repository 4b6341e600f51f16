"""Resumed runs end with weights `torch.equal` to the run that was never interrupted.

Every resumed run starts from a *new* model instance with other initial weights and
from other global seeds, so each piece of state (weights, optimizer momentum, scheduler,
GradScaler scale and growth tracker, every RNG stream, the epoch's data order, the loop
position) has to come from the checkpoint: dropping any of them changes the weights.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.helpers.checkpoints import CountingData, SaveAt, fresh_model, scramble_global_rng, shuffled, trainer
from tests.helpers.reference import assert_same_weights, make_data, make_model
from trainer import Callback
from trainer.checkpoint import load_checkpoint
from trainer.precision import AMP

BATCHES = 10  # 37 samples, batch size 4: the last batch holds one sample


def _precision(name: str) -> Any:
    # amp with a small growth interval, so the growth tracker matters as much as the scale
    return AMP(growth_interval=3) if name == "amp" else name


def uninterrupted(tmp_path, precision="fp32", k=1, epochs=3, data=None, callbacks=(), **model_kwargs):
    model = make_model(**model_kwargs)
    torch.manual_seed(1)
    run = trainer(tmp_path / "full", precision=_precision(precision), max_epochs=epochs,
                  accumulate_grad_batches=k, callbacks=list(callbacks))
    run.fit(model, shuffled(data if data is not None else make_data()))
    return model, run


def resume(path, tmp_path, precision="fp32", k=1, epochs=3, data=None, loader=None, **model_kwargs):
    scramble_global_rng()
    model = fresh_model(**model_kwargs)
    run = trainer(tmp_path / "resumed", precision=_precision(precision), max_epochs=epochs, accumulate_grad_batches=k)
    run.fit(model, loader if loader is not None else shuffled(data if data is not None else make_data()), ckpt_path=path)
    return model, run


@pytest.mark.parametrize("where", ["epoch_boundary", "mid_epoch"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_resume_after_max_steps_is_exact(tmp_path, precision, k, where):
    per_epoch = math.ceil(BATCHES / k)  # k=3: windows of 3, 3, 3 and 1 micro-batches
    stop = per_epoch if where == "epoch_boundary" else per_epoch + per_epoch // 2 + 1
    reference, _ = uninterrupted(tmp_path, precision, k, scheduler="step")

    model = make_model(scheduler="step")
    torch.manual_seed(1)
    first = trainer(tmp_path / "first", precision=_precision(precision), max_epochs=3, max_steps=stop, accumulate_grad_batches=k)
    first.fit(model, shuffled(make_data()))
    saved = load_checkpoint(first.log_dir / "last.ckpt")
    if where == "epoch_boundary":  # max_steps ending an epoch finishes that epoch
        assert (saved["loop"]["epoch"], saved["loop"]["batches_done"]) == (1, 0)
    else:
        assert saved["loop"]["epoch"] == 1 and 0 < saved["loop"]["batches_done"] < BATCHES
    assert saved["cut"]["clean"] is True

    resumed, run = resume(first.log_dir / "last.ckpt", tmp_path, precision, k, scheduler="step")
    assert run.global_step == 3 * per_epoch and run.current_epoch == 3
    assert_same_weights(reference, resumed)


def test_checkpoint_from_a_callback_mid_epoch_with_uneven_windows(tmp_path):
    # 41 samples -> 11 micro-batches; k=2 leaves a last window of one. Step 8 is mid epoch 1.
    data = make_data(41)
    path = tmp_path / "mid.ckpt"
    reference, _ = uninterrupted(tmp_path, "fp32", 2, data=data, callbacks=[SaveAt(8, path)], scheduler="epoch")
    saved = load_checkpoint(path)
    assert (saved["loop"]["epoch"], saved["loop"]["batches_done"], saved["loop"]["global_step"]) == (1, 4, 8)
    resumed, _ = resume(path, tmp_path, "fp32", 2, data=data, scheduler="epoch")
    assert_same_weights(reference, resumed)


class RecordScale(SaveAt):
    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            self.scale = trainer.precision.scaler.get_scale()
            self.skipped = trainer.state.skipped_steps
        super().on_train_step_end(trainer, module, stepped)


def test_amp_overflow_skips_and_the_scale_are_in_the_checkpoint(tmp_path):
    # 2**40 overflows float16 gradients: the first steps are skipped while the scale backs off.
    path = tmp_path / "amp.ckpt"
    record = RecordScale(13, path)
    model = make_model()
    torch.manual_seed(1)
    strategy = AMP(init_scale=2.0**40, growth_interval=4)
    trainer(tmp_path / "full", precision=strategy, max_epochs=3, callbacks=[record]).fit(model, shuffled(make_data()))
    assert record.skipped > 0 and record.scale < 2.0**40

    saved = torch.load(path, weights_only=True)
    assert saved["precision"]["name"] == "amp"
    assert saved["precision"]["state"]["scale"] == record.scale
    assert saved["loop"]["skipped_steps"] == record.skipped

    scramble_global_rng()
    resumed = fresh_model()
    run = trainer(tmp_path / "resumed", precision=AMP(init_scale=2.0**40, growth_interval=4), max_epochs=3)
    run.fit(resumed, shuffled(make_data()), ckpt_path=path)
    assert_same_weights(model, resumed)
    assert run.precision.scaler.get_scale() == strategy.scaler.get_scale()


@pytest.mark.parametrize("stop", [20, 24])  # the end of epoch 1, and mid epoch 2
def test_loader_with_its_own_generator(tmp_path, stop):
    def make_loader() -> DataLoader:  # as a script would: a new generator with the same seed
        return shuffled(make_data(), generator=torch.Generator().manual_seed(3))

    model = make_model()
    torch.manual_seed(1)
    trainer(tmp_path / "full", max_epochs=3).fit(model, make_loader())
    first = make_model()
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, max_steps=stop)
    run.fit(first, make_loader())
    resumed, _ = resume(run.log_dir / "last.ckpt", tmp_path, loader=make_loader())
    assert_same_weights(model, resumed)


def test_mid_epoch_resume_loads_no_skipped_sample(tmp_path):
    full_data = CountingData()
    reference, _ = uninterrupted(tmp_path, data=full_data)
    first_data = CountingData()
    model = make_model()
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, max_steps=16)  # 6 batches into epoch 1
    run.fit(model, shuffled(first_data))
    resumed_data = CountingData()
    resumed, _ = resume(run.log_dir / "last.ckpt", tmp_path, data=resumed_data)
    assert_same_weights(reference, resumed)
    # Exactly the samples the interrupted run didn't load: none of the 6 skipped batches.
    assert resumed_data.calls == full_data.calls - first_data.calls == (4 + 4 + 4 + 1) + 37


class ShuffledStream(IterableDataset):
    """An iterable dataset that shuffles with the global torch RNG when iterated."""

    def __init__(self) -> None:
        self.data = make_data()

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        for index in torch.randperm(len(self.data)).tolist():
            yield self.data[index]


class Batches:
    """A plain unsized iterable of batches (no len), shuffled with the global torch RNG."""

    def __iter__(self):
        data = make_data()
        order = torch.randperm(len(data))
        for start in range(0, len(data), 4):
            yield data[order[start:start + 4]]


@pytest.mark.parametrize("make_loader", [lambda: DataLoader(ShuffledStream(), batch_size=4), Batches],
                         ids=["iterable_dataset", "unsized_iterable"])
def test_other_iterables_are_replayed_and_stay_exact(tmp_path, make_loader):
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    trainer(tmp_path / "full", max_epochs=3).fit(model, make_loader())
    first = make_model(lr=0.01)
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, max_steps=15)
    run.fit(first, make_loader())
    resumed, _ = resume(run.log_dir / "last.ckpt", tmp_path, loader=make_loader(), lr=0.01)
    assert_same_weights(model, resumed)


def test_stateful_dataloader_is_used_through_its_state_dict(tmp_path):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make_loader(data):
        return stateful.StatefulDataLoader(data, batch_size=4, shuffle=True)

    full_data = CountingData()
    model = make_model()
    torch.manual_seed(1)
    trainer(tmp_path / "full", max_epochs=3).fit(model, make_loader(full_data))
    first_data, first = CountingData(), make_model()
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, max_steps=16)
    run.fit(first, make_loader(first_data))
    resumed_data = CountingData()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchdata's own deprecation notices
        resumed, _ = resume(run.log_dir / "last.ckpt", tmp_path, loader=make_loader(resumed_data))
    assert_same_weights(model, resumed)
    assert resumed_data.calls == full_data.calls - first_data.calls


class SaveAtEpochStart(Callback):
    def __init__(self, epoch: int, path) -> None:
        self.epoch, self.path = epoch, path

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.save_checkpoint(self.path)


def test_checkpoint_at_epoch_start_and_after_fit(tmp_path):
    at_start = tmp_path / "epoch2.ckpt"
    reference, _ = uninterrupted(tmp_path, k=2, callbacks=[SaveAtEpochStart(2, at_start)])
    resumed, _ = resume(at_start, tmp_path, k=2)
    assert_same_weights(reference, resumed)

    model = make_model()
    torch.manual_seed(1)
    short = trainer(tmp_path / "short", max_epochs=2, accumulate_grad_batches=2)
    short.fit(model, shuffled(make_data()))
    short.save_checkpoint(tmp_path / "after_fit.ckpt")  # outside fit: always a clean cut
    resumed, _ = resume(tmp_path / "after_fit.ckpt", tmp_path, k=2)
    assert_same_weights(reference, resumed)


class Interrupt(Callback):
    def __init__(self, step: int, hook: str) -> None:
        self.step, self.hook = step, hook

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if self.hook == "step_end" and trainer.global_step == self.step:
            raise KeyboardInterrupt

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.hook == "batch_end" and trainer.global_step == self.step and batch_idx % 3 == 1:
            raise KeyboardInterrupt


def test_interrupt_between_steps_resumes_exactly(tmp_path):
    reference, _ = uninterrupted(tmp_path, k=3)
    model = make_model()
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, accumulate_grad_batches=3, callbacks=[Interrupt(6, "step_end")])
    with pytest.raises(KeyboardInterrupt):
        run.fit(model, shuffled(make_data()))
    assert load_checkpoint(run.log_dir / "last.ckpt")["cut"]["clean"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean cut resumes without a warning
        resumed, _ = resume(run.log_dir / "last.ckpt", tmp_path, k=3)
    assert_same_weights(reference, resumed)


def test_interrupt_inside_a_window_is_marked_and_resume_warns(tmp_path):
    model = make_model()
    torch.manual_seed(1)
    run = trainer(tmp_path / "first", max_epochs=3, accumulate_grad_batches=3, callbacks=[Interrupt(5, "batch_end")])
    with pytest.raises(KeyboardInterrupt):
        run.fit(model, shuffled(make_data()))
    saved = load_checkpoint(run.log_dir / "last.ckpt")
    assert saved["cut"]["clean"] is False and "accumulation window" in saved["cut"]["reason"]
    assert saved["loop"]["global_step"] == 5 and saved["loop"]["batches_done"] == 3  # step 6 re-reads its window
    assert_same_weights_to_checkpoint(model, saved)
    with pytest.warns(UserWarning, match="not bit-identical"):
        _, resumed_run = resume(run.log_dir / "last.ckpt", tmp_path, k=3)
    assert resumed_run.global_step == 12


def assert_same_weights_to_checkpoint(model: torch.nn.Module, saved: dict[str, Any]) -> None:
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved["module"][key]), key


class SaveInside(Callback):
    def __init__(self, path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 2:
            trainer.save_checkpoint(self.path)


@pytest.mark.parametrize("k", [2, 4])
def test_saving_inside_a_window_is_refused_clearly(tmp_path, k):
    path = tmp_path / "inside.ckpt"  # batch 2 is inside a window of 2 (batches 2-3) and of 4 (0-3)
    run = trainer(tmp_path / "run", max_epochs=1, accumulate_grad_batches=k, callbacks=[SaveInside(path)])
    with pytest.raises(RuntimeError, match="inside an accumulation window") as caught:
        run.fit(make_model(), shuffled(make_data()))
    assert str(path) in str(caught.value) and "on_train_batch_end of a window's last" in str(caught.value)
    assert not path.exists()


@pytest.mark.parametrize("k", [1, 3])
def test_saving_from_on_train_batch_end_after_a_step_is_a_clean_cut(tmp_path, k):
    """Lightning's rule: on_train_batch_end of a window's last micro-batch runs after its
    optimizer step, so global_step, the weights and a checkpoint saved there are after it."""
    path = tmp_path / "after.ckpt"  # batch 2 ends the first window of 3, and any window of 1
    run = trainer(tmp_path / "run", max_epochs=1, accumulate_grad_batches=k, callbacks=[SaveInside(path)])
    run.fit(make_model(), shuffled(make_data()))
    saved = load_checkpoint(path)
    assert saved["cut"]["clean"] is True
    assert saved["loop"]["global_step"] == 3 // k and saved["loop"]["batches_done"] == 3


class FailAt(Callback):
    """Raises in on_train_batch_start of optimizer step `step` (0: before any step)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("user code failed")


def test_an_error_keeps_this_fits_steps_in_last_ckpt_but_never_overwrites_it_with_none(tmp_path):
    """A failing fit writes last.ckpt when it took steps (its work is kept); one that fails before
    its first step leaves the run's earlier last.ckpt as it was."""
    first = trainer(tmp_path, max_epochs=1, run_name="same")
    first.fit(make_model(), shuffled(make_data()))
    last = first._run.checkpoints.last_path
    before = load_checkpoint(last)["loop"]["global_step"]
    with pytest.raises(RuntimeError, match="user code failed"):
        trainer(tmp_path, max_epochs=3, run_name="same", callbacks=[FailAt(0)]).fit(make_model(seed=5), shuffled(make_data()))
    assert load_checkpoint(last)["loop"]["global_step"] == before  # untouched: no step to keep
    with pytest.raises(RuntimeError, match="user code failed"):
        trainer(tmp_path, max_epochs=3, run_name="same", callbacks=[FailAt(before + 3)]).fit(
            make_model(), shuffled(make_data()), ckpt_path=last)
    assert load_checkpoint(last)["loop"]["global_step"] == before + 3  # the three new steps are kept
