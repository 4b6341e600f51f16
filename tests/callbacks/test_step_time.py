"""`StepTimeBreakdown`: every step cut into phases that add up to it, written at logging steps,
and a verdict naming the slow rank and phase (2 Gloo processes, one rank made slow on purpose)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from callbacks import StepTimeBreakdown
from tests.helpers.launch import ROOT, run_torchrun
from tests.helpers.reference import RecordingLogger, TinyNet, make_data
from trainer import Trainer
from trainer.logging.step_time import PHASES, diagnose

WORKER = ROOT / "tests" / "helpers" / "scripts" / "step_time_worker.py"


def test_two_ranks_the_slow_one_is_named_and_each_ranks_phases_add_up_to_its_steps(tmp_path: Path) -> None:
    done = run_torchrun(WORKER, str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for scenario, verdict in (("collate", "input-bound on rank 1:"),
                              ("forward", "rank 1 is a straggler in forward+backward:")):
        for rank in (0, 1):
            result = json.loads((tmp_path / f"{scenario}_rank{rank}.json").read_text())
            assert result["summary"].startswith(verdict), result
            own = result["per_rank"][rank]
            assert math.isclose(sum(own[p] for p in PHASES), own["step"], rel_tol=1e-9)
            # the same steps timed by another clock, between the same hooks
            assert own["step"] == pytest.approx(result["wall_per_step"], rel=0.05, abs=0.005)
        fast, slow = json.loads((tmp_path / f"{scenario}_rank0.json").read_text())["per_rank"]
        assert fast["collective_wait"] > 0.5 * fast["step"]  # rank 0 waits for rank 1 in the all-reduce


def slow_collate(items: list[Any]) -> Any:
    time.sleep(0.03)
    return default_collate(items)


def slower_collate(items: list[Any]) -> Any:
    time.sleep(0.15)
    return default_collate(items)


def test_one_process_with_accumulation_and_validation_writes_every_phase_and_says_input_bound(tmp_path: Path) -> None:
    torch.manual_seed(0)
    logger, breakdown = RecordingLogger(), StepTimeBreakdown(warmup_steps=1)
    trainer = Trainer(max_steps=7, accumulate_grad_batches=2, log_every_n_steps=3, val_check_interval=8,
                      device="cpu", logger=logger, root_dir=tmp_path, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0, callbacks=[breakdown])
    trainer.fit(TinyNet(dropout=0.0), DataLoader(make_data(64), batch_size=4, collate_fn=slow_collate),
                DataLoader(make_data(8), batch_size=4, collate_fn=slower_collate))
    written = [(step, row) for step, row in logger.rows if "step_time/step" in row]
    assert [step for step, _ in written] == [3, 6, 7]  # and the rest when fit ends
    assert set(written[0][1]) == {f"step_time/{p}" for p in (*PHASES, "step")}
    assert breakdown.steps == 6
    (own,) = breakdown.per_rank
    assert own["input_wait"] > 0.6 * own["step"]  # two fetches of 30 ms per step; validation not counted
    assert own["other"] < 0.2 * own["step"]  # the validation (2 batches of 150 ms) is not a step's time
    assert breakdown.summary.startswith("input-bound: waiting for the loader takes")


def test_without_the_callback_the_loop_has_no_clock() -> None:
    trainer = Trainer(max_steps=1, device="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(TinyNet(dropout=0.0), DataLoader(make_data(8), batch_size=4))
    assert trainer._loop.clock is None


def test_the_verdicts() -> None:
    def rank(**phases: float) -> dict[str, float]:
        values = dict.fromkeys(PHASES, 0.001) | phases
        return values | {"step": sum(values[p] for p in PHASES)}

    assert diagnose([rank(collective_wait=0.5), rank(collective_wait=0.5)]).startswith("collective wait dominates")
    assert diagnose([rank(forward_backward=0.5)]).startswith("compute-bound: forward+backward takes")
    assert diagnose([rank(optimizer=0.3, collective_wait=0.01), rank(collective_wait=0.3)]).startswith(
        "rank 0 is a straggler in optimizer step")
    assert diagnose([rank(input_wait=0.3), rank(input_wait=0.3)]).startswith("input-bound on every rank")


def test_manual_optimization_counts_training_step_as_compute_and_every_batch_as_a_step() -> None:
    from tests.helpers.gan import make_gan, make_points, points_loader

    breakdown = StepTimeBreakdown(warmup_steps=1)
    trainer = Trainer(max_epochs=1, device="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[breakdown])
    trainer.fit(make_gan(), points_loader(make_points(24)))  # 6 batches, two optimizer steps each
    (own,) = breakdown.per_rank
    assert breakdown.steps == 5
    assert own["optimizer"] == own["collective_wait"] == 0.0  # inside training_step: forward_backward
    assert own["forward_backward"] > own["input_wait"] + own["transfer"] + own["other"]
    assert math.isclose(sum(own[p] for p in PHASES), own["step"], rel_tol=1e-9)
