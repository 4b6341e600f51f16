"""Weight averaging (EMA) equals a hand-written loop that updates a
`torch.optim.swa_utils.AveragedModel` after every optimizer step that changed the weights,
validates with the average, and resumes exactly (mid-epoch, mid-validation, amp skips).

The 2-process DDP case runs tests/helpers/scripts/ema_worker.py under torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn

import callbacks
from tests.helpers.checkpoints import SaveAt, fresh_model, scramble_global_rng, shuffled
from tests.helpers.reference import assert_same_weights, loader, make_data, make_model, reference_fit, weights
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu", num_sanity_val_steps=0)


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs by {(a[key] - b[key]).abs().max()}"


def by_hand(precision: str = "fp32", epochs: int = 2, averaged: Any = None, should: Any = None, **model_kwargs: Any):
    """The hand-written loop with an AveragedModel updated after each step that stepped."""
    model = make_model(**model_kwargs)
    ema = (averaged or (lambda m: AveragedModel(m, avg_fn=get_ema_avg_fn(0.9), use_buffers=True)))(model)
    torch.manual_seed(1)

    def on_step(stepped: bool, index: int) -> None:
        if stepped and (should is None or should(index)):
            ema.update_parameters(model)

    info = reference_fit(model, loader(make_data()), precision=precision, epochs=epochs, on_step=on_step)
    return model, ema, info


class SeenByValidation(Callback):
    """The weights validation runs with, and those training continues with after it."""

    def __init__(self) -> None:
        self.validated: list[dict[str, torch.Tensor]] = []

    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None:
        self.validated.append(weights(module))


def fit(averaging: Callback, precision: str = "fp32", epochs: int = 2, val: bool = False, extra: tuple = (), **model_kwargs: Any):
    model = make_model(**model_kwargs)
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, max_epochs=epochs, callbacks=[averaging, *extra], **QUIET)
    trainer.fit(model, loader(make_data()), loader(make_data(12, seed=3), shuffle=False) if val else None)
    return model, trainer


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_ema_equals_the_hand_written_averaged_model(precision):
    blow_up = (3, 12) if precision == "amp" else ()  # amp: two overflows the GradScaler skips
    reference, ema, info = by_hand(precision, blow_up_at=blow_up)
    averaging = callbacks.EMAWeightAveraging(decay=0.9)
    model, trainer = fit(averaging, precision, blow_up_at=blow_up)
    if precision == "amp":
        assert info["skipped"] == trainer.state.skipped_steps >= 2  # the scale's first overflows too
    assert averaging.average_model is not None
    assert int(averaging.average_model.n_averaged) == info["steps"] - info["skipped"] == 20 - trainer.state.skipped_steps
    equal(weights(model), weights(ema.module))  # after fit the module holds the average
    equal(weights(averaging.average_model.module), weights(reference))  # ... and the training weights are kept


def test_validation_runs_with_the_average_and_training_continues_with_its_own_weights():
    model = make_model()
    ema = AveragedModel(model, avg_fn=get_ema_avg_fn(0.9), use_buffers=True)
    torch.manual_seed(1)
    at_epoch_end: list[dict[str, torch.Tensor]] = []
    batches, val = len(loader(make_data())), loader(make_data(12, seed=3), shuffle=False)

    def on_step(stepped: bool, index: int) -> None:
        ema.update_parameters(model)
        if (index + 1) % batches == 0:  # the epoch's end: validation (its loader draws a seed, as the Trainer's does)
            at_epoch_end.append(weights(ema.module))
            for _ in val:
                pass

    reference_fit(model, loader(make_data()), epochs=2, on_step=on_step)
    seen = SeenByValidation()
    ours, _ = fit(callbacks.EMAWeightAveraging(decay=0.9), val=True, extra=(seen,))
    assert len(seen.validated) == 2
    for validated, expected in zip(seen.validated, at_epoch_end):
        equal(validated, expected)
    equal(weights(ours), weights(ema.module))


def test_weight_averaging_takes_averaged_model_options():
    _, ema, _ = by_hand(averaged=lambda m: AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(0.8), use_buffers=True))
    model, _ = fit(callbacks.WeightAveraging(multi_avg_fn=get_ema_multi_avg_fn(0.8)))
    equal(weights(model), weights(ema.module))
    _, swa, _ = by_hand(averaged=lambda m: AveragedModel(m, use_buffers=True))  # no function: SWA's equal average
    model, _ = fit(callbacks.WeightAveraging())
    equal(weights(model), weights(swa.module))


def test_update_schedule_follows_lightning():
    ema = callbacks.EMAWeightAveraging(update_every_n_steps=5, update_starting_at_step=10)
    assert [ema.should_update(step_idx=i) for i in (5, 9, 10, 11, 14, 15)] == [False, False, True, False, False, True]
    by_epoch = callbacks.EMAWeightAveraging(update_starting_at_epoch=2)
    assert [by_epoch.should_update(epoch_idx=i) for i in range(4)] == [False, False, True, True]
    rule = lambda i: i >= 4 and i % 3 == 0  # noqa: E731
    _, reference, _ = by_hand(should=rule)
    model, _ = fit(callbacks.EMAWeightAveraging(decay=0.9, update_every_n_steps=3, update_starting_at_step=4))
    equal(weights(model), weights(reference.module))
    with pytest.raises(ValueError, match="decay"):
        callbacks.EMAWeightAveraging(decay=1.5)


def test_batchnorm_buffers_are_averaged():
    def make() -> Any:
        torch.manual_seed(0)
        net = make_model(dropout=0.0)
        net.net[1] = torch.nn.Sequential(torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        return net

    reference = make()
    ema = AveragedModel(reference, avg_fn=get_ema_avg_fn(0.9), use_buffers=True)
    torch.manual_seed(1)
    data = make_data(36)  # no batch of one sample (BatchNorm refuses it in training)
    reference_fit(reference, loader(data), epochs=2, on_step=lambda stepped, i: ema.update_parameters(reference))
    ours = make()
    torch.manual_seed(1)
    Trainer(max_epochs=2, callbacks=[callbacks.EMAWeightAveraging(decay=0.9)], **QUIET).fit(ours, loader(data))
    equal(weights(ours), weights(ema.module))
    assert "net.1.0.running_mean" in weights(ours)


# ------------------------------------------------------------------------- resume
def uninterrupted(tmp_path: Path, precision: str = "fp32", **model_kwargs: Any):
    model, averaging = make_model(**model_kwargs), callbacks.EMAWeightAveraging(decay=0.9)
    torch.manual_seed(1)
    run = Trainer(precision=precision, max_epochs=3, logger=False, enable_progress_bar=False, device="cpu",
                  root_dir=tmp_path / "full", callbacks=[averaging])
    run.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False))
    assert averaging.average_model is not None
    return weights(model), weights(averaging.average_model.module)


def resumed(tmp_path: Path, path: Path, precision: str = "fp32", **model_kwargs: Any):
    scramble_global_rng()
    model, averaging = fresh_model(**model_kwargs), callbacks.EMAWeightAveraging(decay=0.9)
    run = Trainer(precision=precision, max_epochs=3, logger=False, enable_progress_bar=False, device="cpu",
                  root_dir=tmp_path / "resumed", callbacks=[averaging])
    run.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False), ckpt_path=path)
    assert averaging.average_model is not None
    return weights(model), weights(averaging.average_model.module)


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_resume_mid_epoch_is_exact(tmp_path, precision):
    blow_up = (4, 17) if precision == "amp" else ()  # a skipped step on each side of the cut
    average, training = uninterrupted(tmp_path, precision, blow_up_at=blow_up)
    model, averaging = make_model(blow_up_at=blow_up), callbacks.EMAWeightAveraging(decay=0.9)
    torch.manual_seed(1)
    # ModelCheckpoint-like saves listed before the callback: the file holds this step's update
    path = tmp_path / "step15.ckpt"
    first = Trainer(precision=precision, max_epochs=3, max_steps=15, logger=False, enable_progress_bar=False,
                    device="cpu", root_dir=tmp_path / "first", callbacks=[SaveAt(15, path), averaging])
    first.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False))
    saved = load_checkpoint(path)
    assert saved["loop"]["epoch"] == 1 and 0 < saved["loop"]["batches_done"] < 10
    equal(saved["module"], saved["state_dict"])
    assert set(saved["current_model_state"]) == set(saved["module"]) and "n_averaged" in saved["averaging_state"]
    assert not torch.equal(saved["module"]["net.0.weight"], saved["current_model_state"]["net.0.weight"])
    blow = tuple(b - 15 for b in blow_up if b >= 15)  # the fresh model counts its calls from the resume
    got_average, got_training = resumed(tmp_path, path, precision, blow_up_at=blow)
    equal(got_average, average)
    equal(got_training, training)


class SaveDuringValidation(Callback):
    def __init__(self, path: Path) -> None:
        self.path, self.done = path, False

    def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == 1 and batch_idx == 1 and not self.done:
            self.done = True
            trainer.save_checkpoint(self.path)


def test_checkpoint_written_during_validation_resumes_exactly(tmp_path):
    average, training = uninterrupted(tmp_path)
    model, averaging = make_model(), callbacks.EMAWeightAveraging(decay=0.9)
    torch.manual_seed(1)
    path = tmp_path / "in_validation.ckpt"
    run = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, device="cpu", root_dir=tmp_path / "first",
                  callbacks=[averaging, SaveDuringValidation(path)])
    run.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False))
    equal(weights(model), average)
    got_average, got_training = resumed(tmp_path, path)
    equal(got_average, average)
    equal(got_training, training)


def test_after_fit_checkpoints_hold_the_average_for_evaluation(tmp_path):
    average, training = uninterrupted(tmp_path)
    run_dir = next((tmp_path / "full").rglob("last.ckpt"))
    saved = load_checkpoint(run_dir)
    equal(saved["module"], average)  # what evaluation and export load
    equal(saved["current_model_state"], training)  # what a resume continues from
    evaluated = fresh_model()
    Trainer(**QUIET).validate(evaluated, loader(make_data(12, seed=3), shuffle=False), ckpt_path=run_dir)
    equal(weights(evaluated), average)


def test_a_checkpoint_without_averaging_starts_the_average_from_its_weights(tmp_path):
    model = make_model()
    torch.manual_seed(1)
    plain = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, device="cpu", root_dir=tmp_path / "plain")
    plain.fit(model, shuffled(make_data()))
    start = weights(model)
    averaging = callbacks.EMAWeightAveraging(decay=0.9)
    continued = fresh_model()
    Trainer(max_epochs=1, max_steps=10, callbacks=[averaging], **QUIET).fit(
        continued, shuffled(make_data()), ckpt_path=plain.log_dir / "last.ckpt")
    assert averaging.average_model is not None and int(averaging.average_model.n_averaged) == 0
    equal(weights(continued), start)  # no step taken: the average is the restored weights


def test_fsdp_is_refused():
    class FakeFSDP:
        name = "fsdp"

    class Host:
        strategy = FakeFSDP()

    with pytest.raises(ValueError, match="FSDP"):
        callbacks.EMAWeightAveraging().on_fit_start(Host(), make_model())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- DDP
def test_ddp_two_processes_equal_a_hand_written_ddp_loop(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    worker = Path(__file__).parents[1] / "helpers" / "scripts" / "ema_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    ranks = [torch.load(tmp_path / f"ema_rank{r}.pt", weights_only=False) for r in range(2)]
    for precision in ("fp32", "amp"):
        zero, one = ranks[0][precision], ranks[1][precision]
        equal(zero["average"], zero["hand_average"])
        equal(zero["training"], zero["hand_training"])
        equal(zero["average"], one["average"])
        assert zero["n_averaged"] == zero["hand_n_averaged"]
    assert ranks[0]["amp"]["skipped"] == 1
    # rank 0 counted its first micro-batch's FLOPs (it writes the scalars), and still equals rank 1
    assert ranks[0]["fp32"]["flops_per_sample"] == 480 and ranks[1]["fp32"]["flops_per_sample"] is None


def test_checkpoint_written_after_fit_resumes_exactly(tmp_path):
    average, training = uninterrupted(tmp_path)
    model, averaging = make_model(), callbacks.EMAWeightAveraging(decay=0.9)
    torch.manual_seed(1)
    two = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, device="cpu", root_dir=tmp_path / "two",
                  callbacks=[averaging])
    two.fit(model, shuffled(make_data()), loader(make_data(12, seed=3), shuffle=False))
    path = two.save_checkpoint(tmp_path / "after_fit.ckpt")  # the module holds the average now
    saved = load_checkpoint(path)
    assert averaging.average_model is not None
    equal(saved["module"], weights(model))
    equal(saved["current_model_state"], weights(averaging.average_model.module))
    got_average, got_training = resumed(tmp_path, path)
    equal(got_average, average)
    equal(got_training, training)
