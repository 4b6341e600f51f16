"""Memory per rank and step time, DDP against FSDP, in one 2-process run (issue 12).

Both strategies train the same stack of `Block`s (Linear + GELU, `--width` wide, `--layers`
deep: 16 x 2048 is about 268 MB of fp32 parameters) with Adam on the same random data.
Just before each optimizer step a callback counts the bytes this rank holds in parameters,
gradients and optimizer state (a sharded tensor counts its local shard only), and times the
steps after the first. Rank 0 prints one JSON line per strategy and the ratios FSDP/DDP.
On a CUDA machine it also reports each device's peak allocated memory.

Run: python benchmarks/fsdp_memory.py [--layers 16 --width 2048 --steps 6]
(re-launches itself under torchrun --standalone with `--nproc` processes: 2, or on a machine with
one GPU, one), or directly under torchrun.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer
from trainer.distributed import FSDP


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.linear(x))


class Stack(Module):
    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*(Block(width) for _ in range(layers)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        return self.blocks(x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-4)


def _local_bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


class Measure(Callback):
    """Bytes held just before each optimizer step; wall time of the steps after the first."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.times: list[float] = []
        self._last: float | None = None

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        params = list(module.parameters())
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        self.held = {
            "parameters": sum(_local_bytes(p) for p in params),
            "gradients": sum(_local_bytes(p.grad) for p in params),
            "optimizer_state": sum(_local_bytes(v) for v in state),
        }

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


def run(strategy: Any, args: argparse.Namespace, device: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Stack(args.layers, args.width)
    data = TensorDataset(torch.randn(args.batch * 2 * (args.steps + 1), args.width))
    measure = Measure()
    trainer = Trainer(strategy=strategy, device=device, max_steps=args.steps + 1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, callbacks=[measure])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model, DataLoader(data, batch_size=args.batch))
    row: dict[str, Any] = {"bytes": measure.held, "total_mb": sum(measure.held.values()) / 2**20,
                           "step_s": sorted(measure.times)[len(measure.times) // 2]}
    if device.startswith("cuda"):
        row["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    parser.add_argument("--nproc", type=int, default=min(gpus, 2) if gpus else 2,
                        help="processes (one per GPU on CUDA; default: 2, or the GPUs there are when fewer)")
    args = parser.parse_args()
    if "RANK" not in os.environ:  # start the job
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
                   __file__, *sys.argv[1:]]
        sys.exit(subprocess.call(command, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = {"ddp": run("ddp", args, device), "fsdp": run(FSDP(shard_modules=["Block"]), args, device)}
    if int(os.environ["RANK"]) == 0:
        params = args.layers * (args.width * args.width + args.width)
        print(json.dumps({"model_mb": params * 4 / 2**20, "device": device, "world_size": int(os.environ["WORLD_SIZE"]), **rows}))
        print(json.dumps({"fsdp_over_ddp_memory": rows["fsdp"]["total_mb"] / rows["ddp"]["total_mb"],
                          "fsdp_over_ddp_step_time": rows["fsdp"]["step_s"] / rows["ddp"]["step_s"]}))


if __name__ == "__main__":
    main()
