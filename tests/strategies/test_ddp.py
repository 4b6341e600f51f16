"""DDP: two processes launched by torchrun on CPU (Gloo) against one-process references.

Two torchrun launches in all (a module-scoped fixture): "main" runs every scenario of
tests/helpers/scripts/worker.py, "resume" continues in a new 2-process run the checkpoint
"main" wrote mid-epoch. Each rank saves its results; the checks are here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.reference import DTYPES, make_data, make_model, reference_fit, weights
from trainer import Trainer
from trainer.strategies.sampler import _with_distributed_sampler
from trainer.distributed import DDP, SingleDevice, resolve_strategy

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "worker.py"
SCALER = {"init_scale": 2.0**10}


def torchrun(phase: str, out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), phase, str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ddp")
    torchrun("main", out)
    torchrun("resume", out)
    load = lambda name: torch.load(out / name, weights_only=False)  # noqa: E731  (our own files)
    return {"out": out, "main": [load("main_rank0.pt"), load("main_rank1.pt")],
            "resume": [load("resume_rank0.pt"), load("resume_rank1.pt")]}


def assert_equal_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def split_reference(precision: str, accumulate: int, epochs: int = 2) -> dict[str, torch.Tensor]:
    """One process, global batch 8, each step's gradient taken as DDP does: the mean of the
    two ranks' halves (rank r holds samples r, r+2, ...), each half under autocast/scaler."""
    data, model = make_data(36), make_model(dropout=0.0)
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp", **SCALER)
    ranks = [[data[i] for i in range(r, len(data), 2)] for r in range(2)]
    batches = [[torch.utils.data.default_collate(part[i:i + 4]) for i in range(0, len(part), 4)] for part in ranks]
    n = len(batches[0])
    for _ in range(epochs):
        for i in range(n):
            start = (i // accumulate) * accumulate
            window = min(accumulate, n - start)
            for r in range(2):
                autocast = torch.autocast("cpu", dtype=DTYPES[precision]) if precision != "fp32" else contextlib.nullcontext()
                with autocast:
                    loss = model.training_step(batches[r][i], i)
                scaler.scale(loss / window).backward()
            if i - start + 1 < window:
                continue
            for p in model.parameters():
                p.grad /= 2  # DDP averages over the 2 ranks
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
    return weights(model)


# ------------------------------------------------------------------ two-process runs
@pytest.mark.parametrize("precision", ["fp32", "amp"])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_ranks_equal_and_match_one_process_with_the_global_batch(runs, precision, accumulate):
    rank0, rank1 = (r[f"parity/{precision}/{accumulate}"] for r in runs["main"])
    assert_equal_weights(rank0["weights"], rank1["weights"])
    # plain one-process loop: DataLoader(batch_size=2*4) over the same data, 2 epochs
    model = make_model(dropout=0.0)
    ref = reference_fit(model, DataLoader(make_data(36), batch_size=8), precision=precision, epochs=2,
                        accumulate=accumulate, scaler_kwargs=SCALER)
    assert rank0["global_step"] == ref["steps"]
    assert rank0["scale"] == ref["scale"]
    if precision == "fp32":
        assert max_difference(rank0["weights"], weights(model)) < 1e-5
    else:  # float16 rounds the 8-sample gradient differently from two 4-sample halves
        assert max_difference(rank0["weights"], weights(model)) < 2e-3
    assert max_difference(rank0["weights"], split_reference(precision, accumulate)) < 1e-5


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_gradients_are_all_reduced_once_per_optimizer_step(runs, precision):
    for accumulate in (1, 2):
        for result in (r[f"parity/{precision}/{accumulate}"] for r in runs["main"]):
            # one bucket (tiny model): no_sync on every micro-batch but the window's last
            assert result["allreduces"] == result["global_step"] == (10 if accumulate == 1 else 6)


def test_validation_metrics_are_global_sample_weighted_averages(runs):
    rank0, rank1 = runs["main"]
    model = make_model(dropout=0.0)
    model.load_state_dict(rank0["val/weights"])
    model.eval()

    def per_sample(data: TensorDataset, order: list[int]) -> torch.Tensor:
        x, y = data.tensors
        with torch.no_grad():
            return ((model(x[order]) - y[order]) ** 2).mean(dim=1)

    uneven = per_sample(make_data(10, seed=1), list(range(10)))  # rank 0: 3 samples, rank 1: 7
    padded = per_sample(make_data(5, seed=2), [0, 2, 4, 1, 3, 0])  # DistributedSampler pads with sample 0
    for ranks_result in (rank0, rank1):
        assert ranks_result["val/uneven"]["val/loss"] == pytest.approx(float(uneven.mean()), rel=1e-5)
        assert ranks_result["val/uneven"]["val/count"] == 10.0
        assert ranks_result["val/uneven"]["val/max"] == pytest.approx(float(uneven.max()), rel=1e-6)
        assert ranks_result["val/padded"]["val/loss"] == pytest.approx(float(padded.mean()), rel=1e-5)
        assert ranks_result["val/padded"]["val/count"] == 6.0
    # a per-rank average of batch means would differ: the weighting matters here
    unweighted = (uneven[:3].mean() + uneven[3:].mean()) / 2
    assert abs(float(unweighted) - rank0["val/uneven"]["val/loss"]) > 1e-3
    for name in ("val/loss", "val/count", "val/max"):
        assert rank0["val/callback_metrics"][name] == rank1["val/callback_metrics"][name]


@pytest.mark.parametrize("precision", ["amp", "fp32"])
def test_a_nonfinite_step_on_one_rank_is_skipped_on_all(runs, precision):
    rank0, rank1 = (r[f"nonfinite/{precision}"] for r in runs["main"])
    assert rank0["skipped"] == rank1["skipped"] == 1
    assert rank0["global_step"] == rank1["global_step"] == 2
    assert rank0["scale"] == rank1["scale"] == (SCALER["init_scale"] / 2 if precision == "amp" else None)
    assert_equal_weights(rank0["weights"], rank1["weights"])


def test_a_nonfinite_loss_on_one_rank_rolls_back_every_rank(runs):
    """nonfinite_loss="rollback" (no backoff): both ranks go back to step 1's checkpoint and skip
    the recorded window in the replay, ending with the weights of the run that skipped it."""
    rank0, rank1 = (r["rollback"] for r in runs["main"])
    skipped = runs["main"][0]["nonfinite/fp32"]["weights"]
    for result in (rank0, rank1):
        assert result["windows"] == [(0, 1, 2)] and result["global_step"] == 2 and result["skipped"] == 1
        assert result["calls"] == 2  # step 1, the poisoned step 2; the replay ran nothing (step 2 skipped unrun)
        assert_equal_weights(result["weights"], skipped)


def test_the_loss_spike_mean_is_the_mean_over_every_rank(runs):
    """loss_spike_factor: each rank trains on other batches, yet both hold the running mean of
    the ranks' averaged losses, so rank 0's mean in a checkpoint is every rank's."""
    rank0, rank1 = (r["spike"] for r in runs["main"])
    assert rank0["count"] == rank1["count"] == len(rank0["losses"]) == len(rank1["losses"]) == 5
    assert rank0["losses"] != rank1["losses"]
    expected = sum((a + b) / 2 for a, b in zip(rank0["losses"], rank1["losses"])) / 5
    assert rank0["mean"] == rank1["mean"] == pytest.approx(expected, rel=1e-6)


def test_a_nonfinite_loss_on_one_rank_raises_on_both(runs):
    for result in runs["main"]:
        assert result["error/raised"] is True



def test_a_stop_requested_on_rank_zero_stops_every_rank_at_the_next_logging_step(runs):
    assert [r["stop/global_step"] for r in runs["main"]] == [4, 4]  # asked at step 3, log_every_n_steps=4


def test_only_rank_zero_writes_files(runs):
    rank0, rank1 = runs["main"]
    assert rank0["io/log_dir"] == rank1["io/log_dir"]  # rank 0's folder, shared with every rank
    root = runs["out"] / "io"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    events = [f for f in files if ".tfevents." in f]
    run = "default/version_0/"
    assert [f for f in files if f not in events] == [run + "checkpoints/epoch=1-step=6.ckpt", run + "hparams.yaml",
                                                     run + "last.ckpt", run + "manual.ckpt"]
    assert events and all(f.startswith(run) for f in events)
    assert all(f".{rank0['io/pid']}." in f and f".{rank1['io/pid']}." not in f for f in events)
    folders = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())
    assert folders == ["default", "default/version_0", "default/version_0/checkpoints"]  # none made by rank 1
    # ModelCheckpoint ranked by a metric that differs per rank (rank 1's rises): rank 0 decides for all
    best = str(root / run / "checkpoints/epoch=1-step=6.ckpt")
    assert rank0["io/best"] == rank1["io/best"] == (best, {best: -5.0})  # rank 0's score (step 6 ran at global_step 5)
    state = torch.load(root / run / "last.ckpt", weights_only=True)
    assert len(state["rng"]) == len(state["data"]) == 2  # every rank's RNG states and data order


def test_the_checkpoint_holds_each_ranks_own_data_order_state(runs):
    state = torch.load(runs["main"][0]["resume/ckpt"], weights_only=True)
    assert len(state["data"]) == 2
    starts = [per_rank["epoch_start"]["torch"] for per_rank in state["data"]]  # epoch 1: streams skewed per rank
    assert not torch.equal(starts[0], starts[1])


def test_a_mid_epoch_checkpoint_resumes_exactly_in_a_new_two_process_run(runs):
    cut = runs["main"][0]["resume/cut_state"]
    assert cut["global_step"] == 4 and cut["batches_done"] == 2  # mid-epoch, accumulation 2
    for main, resumed in zip(runs["main"], runs["resume"]):
        assert resumed["resume/resumed_step"] == main["resume/full_step"] == 6
        assert_equal_weights(main["resume/full"], resumed["resume/resumed"])
    assert_equal_weights(runs["resume"][0]["resume/resumed"], runs["resume"][1]["resume/resumed"])


# --------------------------------------------------------------- in-process (no group)
def test_strategy_resolution(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(resolve_strategy("auto", "cpu"), SingleDevice)
    with pytest.raises(ValueError, match="expected to run under torchrun"):
        Trainer(strategy="ddp", device="cpu")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    made = []  # the group is made when the strategy is bound (a DistributedSampler may follow)
    monkeypatch.setattr(DDP, "_group", lambda self: made.append(self))
    strategy = resolve_strategy("auto", "auto")
    assert made == [strategy]
    assert isinstance(strategy, DDP) and (strategy.rank, strategy.world_size) == (1, 2)
    assert not strategy.is_global_zero and strategy.device == torch.device("cpu")
    with pytest.warns(UserWarning, match="every process trains its own model"):
        assert isinstance(resolve_strategy("single", "cpu"), SingleDevice)
    with pytest.raises(ValueError, match="expected a 'cuda' or 'cpu' device"):
        resolve_strategy("ddp", "meta")


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loaders_get_a_distributed_sampler_keeping_shuffle_and_drop_last(shuffle, drop_last):
    data = make_data(11)
    loader = DataLoader(data, batch_size=2, shuffle=shuffle, drop_last=drop_last, collate_fn=lambda b: b)
    shares = [_with_distributed_sampler(loader, r, 2, lambda seed: seed) for r in range(2)]
    for share in shares:
        assert isinstance(share.sampler, DistributedSampler)
        assert share.sampler.shuffle is shuffle and share.drop_last is drop_last
        assert share.collate_fn is loader.collate_fn and share.batch_size == 2
    indices = [list(share.sampler) for share in shares]
    assert len(indices[0]) == len(indices[1]) == (5 if drop_last else 6)
    if not shuffle:
        assert indices[0] == [0, 2, 4, 6, 8] + ([] if drop_last else [10])
    covered = set(indices[0]) | set(indices[1])
    assert covered == set(range(10 if drop_last else 11)) or (shuffle and drop_last and len(covered) == 10)
    shares[0].sampler.set_epoch(1)
    assert (list(shares[0].sampler) != indices[0]) is shuffle


def test_loaders_left_alone_or_refused():
    data = make_data(8)
    own = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, num_replicas=2, rank=0))
    assert _with_distributed_sampler(own, 0, 2, lambda s: s) is own

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(data)

    stream = DataLoader(Stream(), batch_size=2)
    with pytest.warns(UserWarning, match="IterableDataset"):
        assert _with_distributed_sampler(stream, 0, 2, lambda s: s) is stream
    batches = [data[0:2]]
    with pytest.warns(UserWarning, match="not a torch DataLoader"):
        assert _with_distributed_sampler(batches, 0, 2, lambda s: s) is batches
    weighted = DataLoader(data, batch_size=2, sampler=torch.utils.data.WeightedRandomSampler([1.0] * 8, 8))
    with pytest.raises(ValueError, match="Received: sampler WeightedRandomSampler"):
        _with_distributed_sampler(weighted, 0, 2, lambda s: s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _with_distributed_sampler(DataLoader(data, batch_size=2), 0, 2, lambda s: s)


def test_a_failing_fit_keeps_the_group_and_releases_it_at_exit(monkeypatch):
    """One process under a torchrun-like environment (world size 1: no peer to race with)."""
    import socket

    import torch.distributed as dist

    from tests.helpers.reference import TinyNet

    class Broken(TinyNet):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("user code failed")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)).items():
        monkeypatch.setenv(name, value)
    assert not dist.is_initialized()
    trainer = Trainer(strategy="ddp", device="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(RuntimeError, match="user code failed"):
        trainer.fit(Broken(), DataLoader(make_data(8), batch_size=4))
    # The wrapper is dropped; the group stays usable (an agreed failure may be caught and the
    # run continued) and the exit handler releases it without waiting long for peers.
    assert dist.is_initialized() and trainer.strategy._ddp is None and trainer.strategy._failed
    trainer.strategy._destroy_group()
    assert not dist.is_initialized()
