"""Validation inside `fit` is the user's own loop's validation: it draws from the random
streams exactly as a hand-written `for epoch: train(); evaluate()` loop does (so the weights
are that loop's, in every precision and at every cadence), `isolate_validation_rng=True` is
the loop that snapshots and restores around evaluation, and every validation, mid-epoch
ones included, reports the batch-size-weighted mean over the whole validation set."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import DTYPES, TinyNet, assert_same_weights, make_data
from trainer import Callback, Trainer
from trainer._utils import rng_state, set_rng_state

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


def loaders() -> tuple[DataLoader, DataLoader]:
    train = DataLoader(make_data(40), batch_size=4, shuffle=True)  # 10 batches
    val = DataLoader(make_data(15, seed=3), batch_size=4, shuffle=True)  # 4 batches (4, 4, 4, 3); shuffling draws
    return train, val


def by_trainer(precision: str, interval: int | float | None, **kwargs: Any) -> tuple[TinyNet, Trainer]:
    torch.manual_seed(0)
    model = TinyNet()
    torch.manual_seed(1)
    train, val = loaders()
    trainer = Trainer(precision=precision, max_epochs=2, val_check_interval=interval, **{**QUIET, **kwargs})
    trainer.fit(model, train, val)
    return model, trainer


def by_hand(precision: str, every: int | None, isolate: bool = False) -> tuple[TinyNet, list[float]]:
    """The loop a user writes: train, and evaluate every `every` batches (None: at each
    epoch's end), each evaluation a plain pass over the validation DataLoader."""
    torch.manual_seed(0)
    model = TinyNet()
    torch.manual_seed(1)
    train, val = loaders()
    dtype = DTYPES[precision]
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    optimizer = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    val_losses: list[float] = []

    def evaluate() -> None:
        saved = rng_state() if isolate else None
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, y in val:
                with autocast():
                    loss = torch.nn.functional.mse_loss(model(x).float(), y)
                total, count = total + float(loss) * len(x), count + len(x)
        model.train()
        val_losses.append(total / count)
        if saved is not None:
            set_rng_state(saved)

    model.train()
    for _ in range(2):
        for i, batch in enumerate(train):
            with autocast():
                loss = model.training_step(batch, i)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if every is not None and (i + 1) % every == 0:
                evaluate()
        if every is None:
            evaluate()
    return model, val_losses


class Record(Callback):
    """What every (non-sanity) validation left in callback_metrics."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if not trainer.sanity_checking:
            self.values.append(trainer.callback_metrics["val/loss"])


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize(("interval", "every"), [(None, None), (3, 3), (0.5, 5)], ids=["epoch-end", "every-3", "half"])
def test_validation_draws_like_the_hand_written_loop(precision: str, interval: Any, every: Any) -> None:
    record = Record()
    model, trainer = by_trainer(precision, interval, callbacks=[record])
    reference, val_losses = by_hand(precision, every)
    assert_same_weights(model, reference)
    # Every validation point, mid-epoch ones included, reports the whole set's weighted mean.
    assert record.values == pytest.approx(val_losses, rel=1e-6, abs=1e-7)
    assert len(record.values) == (2 if every is None else 2 * (10 // every))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_isolated_validation_equals_a_loop_that_restores_the_random_streams(precision: str) -> None:
    model, _ = by_trainer(precision, 3, isolate_validation_rng=True)
    reference, _ = by_hand(precision, 3, isolate=True)
    assert_same_weights(model, reference)
    plain, _ = by_hand(precision, 3)
    with pytest.raises(AssertionError):  # the two loops differ, so the comparison can fail
        assert_same_weights(plain, reference)


def test_the_sanity_check_changes_no_weight() -> None:
    with_sanity, _ = by_trainer("fp32", None, num_sanity_val_steps=-1)
    without, _ = by_trainer("fp32", None, num_sanity_val_steps=0)
    assert_same_weights(with_sanity, without)


class Collect:
    """A logger that keeps what it was given."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: Any, step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, metrics: Any = None) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_mid_epoch_validations_reach_the_logger_at_their_step(tmp_path) -> None:
    logger = Collect()
    record = Record()
    by_trainer("fp32", 5, callbacks=[record], logger=logger, root_dir=tmp_path)
    _, val_losses = by_hand("fp32", 5)
    written = [(step, row["val/loss"]) for step, row in logger.rows if "val/loss" in row]
    assert [step for step, _ in written] == [5, 10, 15, 20]
    assert [value for _, value in written] == pytest.approx(val_losses, rel=1e-6)
    assert record.values == pytest.approx(val_losses, rel=1e-6)


def test_sigterm_stops_at_the_next_step_even_before_min_epochs(tmp_path) -> None:
    class Preempt(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == 5:
                os.kill(os.getpid(), signal.SIGTERM)

    torch.manual_seed(0)
    trainer = Trainer(max_epochs=40, min_epochs=20, min_steps=300, callbacks=[Preempt()], root_dir=tmp_path,
                      logger=False, enable_progress_bar=False)
    previous = signal.getsignal(signal.SIGTERM)
    trainer.fit(TinyNet(), loaders()[0])
    assert trainer.global_step == 5
    assert (trainer.log_dir / "last.ckpt").exists()
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is fit's only while it runs


def test_a_stop_request_still_waits_for_min_epochs() -> None:
    class Ask(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            trainer.request_stop()

    torch.manual_seed(0)
    trainer = Trainer(max_epochs=5, min_epochs=2, callbacks=[Ask()], **QUIET)
    trainer.fit(TinyNet(), loaders()[0])
    assert trainer.global_step == 20


def test_fast_dev_run_with_the_profiler_writes_nothing(tmp_path) -> None:
    trainer = Trainer(fast_dev_run=2, profiler=True, root_dir=tmp_path, enable_progress_bar=False)
    trainer.fit(TinyNet(), *loaders())
    assert trainer.global_step == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_mid_epoch_validations_agree_across_ranks(tmp_path, strategy: str) -> None:
    """Under 2 processes every mid-epoch validation reports the whole set's weighted mean
    (each rank's own sums, all-reduced, are the check), and both ranks hold the same value."""
    import subprocess
    import sys
    from pathlib import Path

    if not torch.distributed.is_available():
        pytest.skip("needs torch.distributed")
    root = Path(__file__).resolve().parents[2]
    worker = Path(__file__).parents[1] / "helpers" / "scripts" / "validation_worker.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
               strategy, str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert [p["step"] for p in rank0] == [3.0, 6.0, 9.0, 12.0]  # 6 batches a rank: at 3 and at the epoch's end
    for point0, point1 in zip(rank0, rank1):
        assert point0["reported"] == point1["reported"]
        assert point0["samples"] == 14.0
        assert point0["reported"] == pytest.approx(point0["expected"], rel=1e-5)
