"""Async checkpoint writes: how long the training loop is blocked per save, sync vs async.

One process, the same job run alternately with `async_checkpointing=False` and `=True`: an
MLP of four 4096x4096 layers (268 MB of float32 weights; with SGD momentum a checkpoint is
537 MB) trains with `trainer.save_checkpoint(path)` called from `on_train_step_end` every
`--every` steps. The callback times each call: that is how long the training loop stands
still for the save (a synchronous save: collect, serialize, CRC, write, fsync, rename; an
async one: collect and copy the tensors into the staging buffers, plus any wait for the
previous write). Also printed: the wall time of the whole fit (the background thread shares
the CPU with training), and a check that both runs wrote the same checkpoint (every tensor
`torch.equal`, after both fits returned).

Run: python benchmarks/checkpoint_async.py [--repeats 2] [--saves 4] [--every 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer
from trainer.checkpoint import load_checkpoint


class Wide(Module):
    """Four 4096x4096 linear layers: 67.1 M float32 parameters, 268 MB."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-6, momentum=0.9)


class TimedSaves(Callback):
    """Every `every` optimizer steps: trainer.save_checkpoint(path), timed."""

    def __init__(self, path: Path, every: int) -> None:
        self.path, self.every, self.blocked = path, every, []

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step % self.every == 0:
            start = time.perf_counter()
            trainer.save_checkpoint(self.path)
            self.blocked.append(time.perf_counter() - start)


def run(folder: Path, asynchronous: bool, saves: int, every: int) -> tuple[list[float], float, Path]:
    torch.manual_seed(1)
    data = TensorDataset(torch.randn(8 * saves * every, 4096))
    path = folder / ("async.ckpt" if asynchronous else "sync.ckpt")
    timer = TimedSaves(path, every)
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False, device="cpu",
                      root_dir=folder, callbacks=[timer], async_checkpointing=asynchronous, num_sanity_val_steps=0)
    start = time.perf_counter()
    trainer.fit(Wide(), DataLoader(data, batch_size=8))
    return timer.blocked, time.perf_counter() - start, path


def same_tensors(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_tensors(x, y) for x, y in zip(a, b))
    return True  # plain data: the config differs (async_checkpointing), by design


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--saves", type=int, default=4)
    parser.add_argument("--every", type=int, default=8)
    options = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    blocked: dict[bool, list[float]] = {False: [], True: []}
    first_async: list[float] = []
    walls: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        paths: dict[bool, Path] = {}
        for _ in range(options.repeats):
            for asynchronous in (False, True):  # interleaved: drift hits both
                times, wall, paths[asynchronous] = run(folder, asynchronous, options.saves, options.every)
                if asynchronous:
                    first_async.append(times[0])
                    times = times[1:]  # the first save also allocates the staging buffers
                blocked[asynchronous].extend(times)
                walls[asynchronous].append(wall)
        size = paths[False].stat().st_size / 2**20
        equal = same_tensors(load_checkpoint(paths[False]), load_checkpoint(paths[True]))
    sync_ms, async_ms = (statistics.median(blocked[mode]) * 1000 for mode in (False, True))
    print(f"checkpoint: {size:.0f} MiB (268 MB of weights + SGD momentum), {torch.get_num_threads()} threads")
    print(f"blocked per save, median of {len(blocked[False])} / {len(blocked[True])}: sync {sync_ms:.0f} ms, "
          f"async {async_ms:.0f} ms (first async save, allocating its buffers: {statistics.median(first_async) * 1000:.0f} ms); "
          f"sync/async = {sync_ms / async_ms:.1f}x")
    print(f"whole fit ({options.saves * options.every} steps, {options.saves} saves), median: sync "
          f"{statistics.median(walls[False]):.2f} s, async {statistics.median(walls[True]):.2f} s")
    print(f"files written by the two runs hold equal tensors: {equal}")


if __name__ == "__main__":
    main()
