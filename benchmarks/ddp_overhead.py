"""Per-step cost of the Trainer under DDP against a hand-written DDP loop, in one 2-process run.

Scaling on a 2-core machine says nothing, so this measures overhead: both loops train the
same MLP on the same data for the same number of steps, inside the same torchrun job, in
interleaved rounds (trainer, hand, trainer, hand, ...). Each timed round includes what both
must do to start (wrap in DistributedDataParallel, build the DistributedSampler loader) and
reads the loss to the host every 50 steps, as the Trainer's logging does. Rank 0 prints the
median seconds per step and the ratio, for fp32 (where the Trainer agrees on a finite loss
across ranks every step) and amp (where the GradScaler's skip needs no extra agreement).

Run: python benchmarks/ddp_overhead.py [--steps 200 --rounds 5]   (re-launches itself under
torchrun --standalone --nproc_per_node=2), or directly under torchrun. With a GPU per process
both loops run on CUDA over NCCL; otherwise on the CPU over Gloo.

`--launchers` instead compares the two ways of starting the same 2-process job, as a user
runs them (the environment as it is, without OMP_NUM_THREADS): `Trainer(devices=2)` in a
plain `python` process and `torchrun --nproc_per_node=2`, in interleaved rounds, each timing
`fit` on rank 0 (process start excluded); it prints the median samples/s of each and the ratio.

    python benchmarks/ddp_overhead.py --launchers [--steps 300 --rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from trainer import Module, Trainer
from trainer.precision import AMP

BATCH, LOG_EVERY = 32, 50


def device() -> torch.device:
    """This rank's GPU (NCCL) when there are enough for one per process, else the CPU (Gloo)."""
    local, world = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        return torch.device("cuda", local)
    return torch.device("cpu")


class MLP(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x).float(), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def data(steps: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    n = steps * BATCH * dist.get_world_size()
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g))


def run_trainer(dataset: TensorDataset, precision: str) -> float:
    torch.manual_seed(0)
    model = MLP()
    trainer = Trainer(
        precision=AMP() if precision == "amp" else "fp32", max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, log_every_n_steps=LOG_EVERY, strategy="ddp", device=device().type,
    )
    dist.barrier()
    start = time.perf_counter()
    trainer.fit(model, DataLoader(dataset, batch_size=BATCH, shuffle=True))
    if device().type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run_hand(dataset: TensorDataset, precision: str) -> float:
    torch.manual_seed(0)
    here = device()
    model = MLP().to(here)
    dist.barrier()
    start = time.perf_counter()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[here.index] if here.type == "cuda" else None)
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler(here.type, enabled=precision == "amp")
    sampler = DistributedSampler(dataset, shuffle=True)
    sampler.set_epoch(0)
    for step, (x, y) in enumerate(DataLoader(dataset, batch_size=BATCH, sampler=sampler)):
        x, y = x.to(here, non_blocking=True), y.to(here, non_blocking=True)
        with torch.autocast(here.type, dtype=torch.float16, enabled=precision == "amp"):
            loss = torch.nn.functional.cross_entropy(ddp(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % LOG_EVERY == 0:
            loss.item()
    if here.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def launcher_worker(launcher: str, steps: int) -> None:
    """One 2-process fit of `steps` steps started by `launcher`; rank 0 prints its samples/s."""
    trainer = Trainer(
        devices=2, strategy="ddp", device="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=LOG_EVERY,
    )  # under torchrun devices=2 changes nothing; plainly, this process is rank 0 and starts rank 1
    dataset = data(steps)  # the Trainer made the process group
    torch.manual_seed(0)
    model = MLP()
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    dist.barrier()
    start = time.perf_counter()
    trainer.fit(model, loader)
    elapsed = time.perf_counter() - start
    if trainer.is_global_zero:
        print(f"{launcher} threads={torch.get_num_threads()} samples/s={len(dataset) / elapsed:.1f}", flush=True)


def compare_launchers(steps: int, rounds: int) -> None:
    """`Trainer(devices=2)` from `python` against torchrun, interleaved; the medians and their ratio."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    commands = {
        "devices=2": [sys.executable, __file__, "--worker", "devices=2", "--steps", str(steps)],
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
                     "--worker", "torchrun", "--steps", str(steps)],
    }
    rates: dict[str, list[float]] = {name: [] for name in commands}
    threads: dict[str, str] = {}
    for _ in range(rounds):
        for name, command in commands.items():
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            line = next(line for line in done.stdout.splitlines() if "samples/s=" in line)
            fields = dict(part.split("=", 1) for part in line.split()[1:])
            rates[name].append(float(fields["samples/s"]))
            threads[name] = fields["threads"]
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in median.items():
        print(f"{name}: {value:.0f} samples/s (median of {rounds}; {threads[name]} torch thread(s) per process; "
              f"rounds {', '.join(f'{v:.0f}' for v in rates[name])})")
    print(f"torchrun / devices=2 throughput: {median['torchrun'] / median['devices=2']:.2f} "
          f"({steps} steps of batch {BATCH} per process, os.cpu_count()={os.cpu_count()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launchers", action="store_true", help="compare Trainer(devices=2) with torchrun")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one run of --launchers
    args = parser.parse_args()
    if args.worker:
        launcher_worker(args.worker, args.steps)
        return
    if args.launchers:
        compare_launchers(args.steps, args.rounds)
        return
    if "RANK" not in os.environ:  # re-launch under torchrun
        env = dict(os.environ, OMP_NUM_THREADS="1")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, *sys.argv[1:]]
        raise SystemExit(subprocess.call(command, env=env))
    torch.set_num_threads(1)
    here = device()
    if here.type == "cuda":  # NCCL on GPUs, as the Trainer would choose
        torch.cuda.set_device(here)
        dist.init_process_group("nccl", device_id=here)
    else:
        dist.init_process_group("gloo")  # ours: the Trainer uses it and leaves it alone
    dataset = data(args.steps)
    rank0 = dist.get_rank() == 0
    for precision in ("fp32", "amp"):
        times: dict[str, list[float]] = {"trainer": [], "hand": []}
        run_hand(dataset, precision)  # warm-up
        run_trainer(dataset, precision)
        for _ in range(args.rounds):
            times["trainer"].append(run_trainer(dataset, precision) / args.steps)
            times["hand"].append(run_hand(dataset, precision) / args.steps)
        if rank0:
            trainer_s, hand_s = statistics.median(times["trainer"]), statistics.median(times["hand"])
            print(
                f"{precision}: {args.steps} steps x {args.rounds} rounds, world_size {dist.get_world_size()}: "
                f"hand-written DDP {hand_s * 1e3:.3f} ms/step, Trainer {trainer_s * 1e3:.3f} ms/step, "
                f"ratio {trainer_s / hand_s:.3f} (overhead {(trainer_s - hand_s) * 1e6:+.0f} us/step)",
                flush=True,
            )
    flag = torch.ones(1, dtype=torch.int32, device=here)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        bool(flag.item())
    if rank0:
        agree_us = (time.perf_counter() - start) / args.steps * 1e6
        print(f"one agreement all-reduce (what fp32/bf16 add per step under DDP): {agree_us:.0f} us", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
