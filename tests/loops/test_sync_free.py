"""The non-finite guard without a host read per step: with a fused optimizer
(`fused=True`) a step whose loss is nan/inf is skipped on the device through the optimizer's
`found_inf`, counted on the device and reported at the next logging step."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from tests.loops.test_hot_path import host_reads  # noqa: F401  (fixture)
from trainer import Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class Fused(TinyNet):
    def __init__(self, blow_up_at: tuple[int, ...] = ()) -> None:
        super().__init__(dropout=0.0, blow_up_at=blow_up_at)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01, fused=True)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_no_host_read_per_step_with_a_fused_optimizer(host_reads, precision, tmp_path):  # noqa: F811
    steps, every = 20, 5
    trainer = Trainer(precision=precision, max_steps=steps, log_every_n_steps=every, root_dir=tmp_path,
                      enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0, device="cpu")
    trainer.fit(Fused(), loader(make_data(200)))
    reads = dict(host_reads)
    assert reads.pop("tolist", 0) == steps // every  # the logging step's batched read
    assert reads == {"item": steps // every}  # the device skip count, read at the same logging steps


def test_a_nonfinite_step_is_skipped_on_the_device_and_counted():
    torch.manual_seed(0)
    model = Fused(blow_up_at=(3,))
    reference = copy.deepcopy(model)
    trainer = Trainer(max_epochs=1, nonfinite_loss="skip", log_every_n_steps=4, **QUIET)
    trainer.fit(model, loader(make_data(), shuffle=False))
    assert trainer.state.skipped_steps == 1 and trainer.global_step == 10
    opt = torch.optim.Adam(reference.parameters(), lr=0.01, fused=True)
    for i, batch in enumerate(loader(make_data(), shuffle=False)):
        loss = reference.training_step(batch, i)
        if torch.isfinite(loss):  # the hand-written loop skips that step
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
    assert_same_weights(model, reference)


def test_error_mode_raises_at_the_next_logging_step_with_the_weights_untouched_by_it():
    torch.manual_seed(0)
    model = Fused(blow_up_at=(2,))
    with pytest.raises(FloatingPointError, match=r"1 of optimizer steps 1\.\.4") as caught:
        Trainer(max_epochs=1, log_every_n_steps=4, **QUIET).fit(model, loader(make_data(), shuffle=False))
    assert "skipped those steps on the device" in str(caught.value)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_guard_can_be_turned_off():
    torch.manual_seed(0)
    model = TinyNet(dropout=0.0, blow_up_at=(2,))
    Trainer(max_steps=4, nonfinite_loss="off", **QUIET).fit(model, loader(make_data(), shuffle=False))
    assert not all(torch.isfinite(p).all() for p in model.parameters())  # no guard: it reached the weights


def test_amp_with_a_fused_optimizer_reads_nothing_per_step(host_reads, tmp_path):  # noqa: F811
    """The GradScaler's skip decision stays on the device (the fused kernel applies it); the
    skip count is read with the logging step's other values."""
    steps, every = 20, 5
    trainer = Trainer(precision="amp", max_steps=steps, log_every_n_steps=every, root_dir=tmp_path,
                      enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0, device="cpu")
    trainer.fit(Fused(), loader(make_data(200)))
    reads = dict(host_reads)
    assert reads.pop("tolist", 0) == steps // every
    assert reads == {"item": steps // every}


def test_amp_with_a_fused_optimizer_counts_its_device_skips_like_the_scaler():
    """An overflowing step is skipped by the fused kernel and counted at the next logging step;
    the weights equal PyTorch's AMP recipe with the same fused optimizer."""
    torch.manual_seed(0)
    model = Fused(blow_up_at=(3,))
    reference = copy.deepcopy(model)
    trainer = Trainer(precision="amp", max_epochs=1, log_every_n_steps=4, **QUIET)
    trainer.fit(model, loader(make_data(), shuffle=False))
    opt = torch.optim.Adam(reference.parameters(), lr=0.01, fused=True)
    scaler = torch.amp.GradScaler("cpu")
    skipped = 0
    for i, batch in enumerate(loader(make_data(), shuffle=False)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = reference.training_step(batch, i)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped += scaler.get_scale() < scale  # the scale backs off exactly on a skipped step
        opt.zero_grad(set_to_none=True)
    assert skipped >= 1 and trainer.state.skipped_steps == skipped and trainer.global_step == 10
    assert_same_weights(model, reference)
    assert float(trainer.precision.scaler.get_scale()) == float(scaler.get_scale())


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_ddp_reads_the_host_once_per_step_and_not_at_all_with_a_fused_optimizer(tmp_path):
    """Under DDP the guard's flag is made and all-reduced on the device: one read per step
    (the agreed flag), and none with a fused optimizer (the flag's maximum over ranks goes to
    the optimizer as its found_inf). The rest are logging-step reads."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers.scripts.sync_worker import EVERY, STEPS

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(root / "tests" / "helpers" / "scripts" / "sync_worker.py"), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    logging_steps = STEPS // EVERY
    for rank in range(2):
        results = torch.load(tmp_path / f"sync_rank{rank}.pt", weights_only=False)
        for precision in ("fp32", "bf16"):
            plain, fused = results[f"{precision}/plain"]["reads"], results[f"{precision}/fused"]["reads"]
            assert set(plain) == set(fused) == {"item", "tolist"}  # no float()/bool() of a tensor, no .cpu()
            assert plain["tolist"] == fused["tolist"] == logging_steps
            # fused: the skip count at each logging step and the agreed stop check at each but the last
            assert fused["item"] == 2 * logging_steps - 1
            assert plain["item"] - fused["item"] == STEPS - logging_steps  # exactly one more per step
        for case in ("skip/fused", "skip/plain"):  # rank 1's nan skips the step on both ranks
            assert results[case]["skipped"] == 1
    other = torch.load(tmp_path / "sync_rank1.pt", weights_only=False)
    for case in ("skip/fused", "skip/plain"):
        mine = results[case]["weights"]
        assert all(torch.equal(mine[k], other[case]["weights"][k]) for k in mine)
        assert all(torch.isfinite(v).all() for v in mine.values())


def test_amp_with_a_fused_optimizer_reads_nothing_per_step_with_the_usual_callbacks(host_reads, tmp_path):  # noqa: F811
    """ModelCheckpoint and LearningRateMonitor do not need to know at once whether the GradScaler
    skipped a step, so they must not bring back the per-step read of its verdict. Reads per step:
    the difference between a 16-step and a 6-step fit (the fixed costs of a fit cancel out)."""
    from callbacks import LearningRateMonitor, ModelCheckpoint

    def reads(steps: int) -> dict[str, int]:
        host_reads.clear()
        trainer = Trainer(precision="amp", max_steps=steps, log_every_n_steps=100, root_dir=tmp_path / str(steps),
                          enable_progress_bar=False, num_sanity_val_steps=0, device="cpu",
                          callbacks=[ModelCheckpoint(dirpath=tmp_path / f"ckpt{steps}"), LearningRateMonitor()])
        trainer.fit(Fused(), loader(make_data(200)))
        assert trainer.global_step == steps
        return dict(host_reads)

    short, long = reads(6), reads(16)
    per_step = {name: (long.get(name, 0) - short.get(name, 0)) / 10 for name in set(short) | set(long)}
    assert all(count == 0 for count in per_step.values()), per_step
