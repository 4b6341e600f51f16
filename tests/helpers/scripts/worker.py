"""Runs DDP scenarios under `torchrun --nproc_per_node=2`; each rank saves its results.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 worker.py PHASE OUT_DIR
PHASE "main" runs every scenario, "resume" continues the checkpoint "main" left mid-run.
The test (tests/strategies/test_ddp.py) reads OUT_DIR/PHASE_rank{r}.pt and checks the numbers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.reference import TinyNet, make_data, weights
from callbacks import ModelCheckpoint
from trainer import Callback, Trainer
from trainer.precision import AMP

RANK = int(os.environ["RANK"])
SCALER = {"init_scale": 2.0**10}


class DDPNet(TinyNet):
    """TinyNet plus per-rank behaviour: inject a non-finite loss, or skew the RNG streams."""

    def __init__(self, blow_up_rank: int = -1, blow_up_call: int = -1, skew_rng: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.blow_up_rank, self.blow_up_call, self.skew_rng = blow_up_rank, blow_up_call, skew_rng

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.skew_rng:  # each rank's RNG stream differs, so a resume must restore rngs[rank]
            torch.rand(RANK + 1)
        call = self.calls
        loss = super().training_step(batch, batch_idx)
        if RANK == self.blow_up_rank and call == self.blow_up_call:
            loss = loss * float("nan")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        per_sample = ((self(x).float() - y) ** 2).mean(dim=1)
        self.log("val/loss", per_sample.mean(), batch_size=len(x))
        self.log("val/count", float(len(x)), reduce="sum")
        self.log("val/max", per_sample.max(), reduce="max")


def model(seed: int = 0, **kwargs: Any) -> DDPNet:
    torch.manual_seed(seed)
    kwargs.setdefault("dropout", 0.0)
    return DDPNet(**kwargs)


def trainer(**kwargs: Any) -> Trainer:
    options: dict[str, Any] = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, strategy="ddp", device="cpu"
    )
    options.update(kwargs)
    return Trainer(**options)


class CountAllReduces(Callback):
    """Counts DDP's gradient all-reduces (one per bucket) through a communication hook."""

    def __init__(self) -> None:
        self.calls = 0

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks real annotations
            self.calls += 1
            return default_hooks.allreduce_hook(None, bucket)

        trainer.strategy._ddp.register_comm_hook(None, hook)


class StopOnRankZero(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if RANK == 0 and trainer.global_step == self.at_step:
            trainer.request_stop()


class Uneven(DistributedSampler):
    """Rank 0 reads 3 samples, rank 1 reads 7: sample-weighted averaging matters."""

    def __iter__(self) -> Any:
        return iter([0, 1, 2] if self.rank == 0 else [3, 4, 5, 6, 7, 8, 9])

    def __len__(self) -> int:
        return 3 if self.rank == 0 else 7


def parity(results: dict[str, Any]) -> None:
    data = make_data(36)
    for precision in ("amp", "fp32"):  # fp32 last: validation below runs in fp32
        for accumulate in (1, 2):
            counter = CountAllReduces()
            net = model()
            t = trainer(
                precision=AMP(**SCALER) if precision == "amp" else "fp32",
                max_epochs=2,
                accumulate_grad_batches=accumulate,
                callbacks=[counter],
            )
            t.fit(net, DataLoader(data, batch_size=4, shuffle=False))
            results[f"parity/{precision}/{accumulate}"] = {
                "weights": weights(net),
                "global_step": t.global_step,
                "allreduces": counter.calls,
                "scale": float(t.precision.scaler.get_scale()) if precision == "amp" else None,
            }
    # validation after fit (the process group is still there): weighted, summed, max metrics
    val = make_data(10, seed=1)
    results["val/uneven"] = t.validate(net, DataLoader(val, batch_size=2, sampler=Uneven(val, 2, RANK)))
    results["val/padded"] = t.validate(net, DataLoader(make_data(5, seed=2), batch_size=2))
    results["val/weights"] = weights(net)
    results["val/callback_metrics"] = t.callback_metrics


def nonfinite(results: dict[str, Any]) -> None:
    data = make_data(16)
    for precision in ("amp", "fp32"):
        net = model(blow_up_rank=1, blow_up_call=1)
        t = trainer(precision=AMP(**SCALER) if precision == "amp" else "fp32", max_epochs=1, nonfinite_loss="skip")
        t.fit(net, DataLoader(data, batch_size=4))
        results[f"nonfinite/{precision}"] = {
            "weights": weights(net),
            "global_step": t.global_step,
            "skipped": t.state.skipped_steps,
            "scale": float(t.precision.scaler.get_scale()) if precision == "amp" else None,
        }


class SaveAtStep(Callback):
    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def rollback(results: dict[str, Any], out: Path) -> None:
    """Rank 1's loss is nan at step 2 (once): every rank rolls back to step 1's checkpoint and
    replays with that window skipped, ending where the skip did."""
    net = model(blow_up_rank=1, blow_up_call=1)
    t = trainer(max_epochs=1, nonfinite_loss="rollback", nonfinite_lr_backoff=1.0, root_dir=str(out / "rollback"),
                callbacks=[SaveAtStep(1, out / "rollback_step1.ckpt")])
    t.fit(net, DataLoader(make_data(16), batch_size=4))
    results["rollback"] = {"weights": weights(net), "global_step": t.global_step, "skipped": t.state.skipped_steps,
                           "windows": list(t.state.skipped_windows), "calls": net.calls}


class BatchLosses(Callback):
    """Each step's loss on this rank (one micro-batch per step)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))


def spike_mean(results: dict[str, Any]) -> None:
    """loss_spike_factor under DDP: the ranks see different batches, yet hold one mean."""
    seen = BatchLosses()
    t = trainer(max_epochs=1, loss_spike_factor=100.0, callbacks=[seen])
    t.fit(model(), DataLoader(make_data(40), batch_size=4))
    results["spike"] = {"mean": float(t.state.loss_mean), "count": t.state.loss_count, "losses": seen.losses}


def stop_agreement(results: dict[str, Any]) -> None:
    t = trainer(max_epochs=3, log_every_n_steps=4, callbacks=[StopOnRankZero(at_step=3)])
    t.fit(model(), DataLoader(make_data(36), batch_size=4))
    results["stop/global_step"] = t.global_step


class RankScored(DDPNet):
    """Logs a per-step "score" that falls on rank 0 and rises on rank 1."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step
        self.log("score", float(-step if RANK == 0 else step))
        return super().training_step(batch, batch_idx)


def rank_zero_io(results: dict[str, Any], out: Path) -> None:
    # Ranked by a metric that disagrees across ranks: every rank must follow rank 0's
    # decision (a save is collective), and only rank 0 makes the default folder.
    best = ModelCheckpoint(monitor="score", every_n_train_steps=2, every_n_epochs=None)
    t = trainer(logger=True, enable_checkpointing=True, log_every_n_steps=2, max_epochs=2, root_dir=out / "io",
                callbacks=[best])
    if RANK == 0:
        t.log_dir  # rank 0 alone makes its folder before fit (as the CLI does for config.yaml)
    torch.manual_seed(0)
    net = RankScored(dropout=0.0)
    t.fit(net, DataLoader(make_data(20), batch_size=4), DataLoader(make_data(6, seed=1), batch_size=2))
    t.save_checkpoint(t.log_dir / "manual.ckpt")
    results["io/pid"] = os.getpid()
    results["io/log_dir"] = str(t.log_dir)
    results["io/best"] = (best.best_model_path, best.best_k_models)


def resume_run(out: Path, *, max_steps: int | None, ckpt_path: Any = None, root: str = "resume") -> Trainer:
    t = trainer(
        max_epochs=2, max_steps=max_steps, seed=7, accumulate_grad_batches=2, enable_checkpointing=True,
        root_dir=out / root, precision=AMP(**SCALER),
    )
    net = model(dropout=0.1, skew_rng=True)
    t.fit(net, DataLoader(make_data(40), batch_size=4, shuffle=True), ckpt_path=ckpt_path)
    return t


def fail_together(results: dict[str, Any]) -> None:
    """A non-finite loss on rank 1 only: the check is agreed, so both ranks raise."""
    try:
        trainer(max_epochs=1).fit(model(blow_up_rank=1, blow_up_call=1), DataLoader(make_data(16), batch_size=4))
        results["error/raised"] = False
    except FloatingPointError as error:
        results["error/raised"] = "non-finite loss" in str(error)


def main() -> None:
    phase, out = sys.argv[1], Path(sys.argv[2])
    results: dict[str, Any] = {"rank": RANK}
    if phase == "main":
        parity(results)
        nonfinite(results)
        rollback(results, out)
        spike_mean(results)
        stop_agreement(results)
        rank_zero_io(results, out)
        full = resume_run(out, max_steps=None, root="full")
        results["resume/full"] = weights(full._run.module)
        results["resume/full_step"] = full.global_step
        cut = resume_run(out, max_steps=4)
        results["resume/cut_state"] = cut.state.state_dict()
        results["resume/ckpt"] = str(cut.log_dir / "last.ckpt")
        fail_together(results)
    else:
        ckpt = (out / "main_rank0.txt").read_text().strip()
        resumed = resume_run(out, max_steps=None, ckpt_path=ckpt, root="resumed")
        results["resume/resumed"] = weights(resumed._run.module)
        results["resume/resumed_step"] = resumed.global_step
    torch.save(results, out / f"{phase}_rank{RANK}.pt")
    if phase == "main" and RANK == 0:
        (out / "main_rank0.txt").write_text(results["resume/ckpt"])


if __name__ == "__main__":
    main()
