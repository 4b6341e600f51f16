"""Checkpoint costs, measured in one process with interleaved repeats; prints medians and ratios.

1. Save and load of a ~100 MB model: `Trainer.save_checkpoint` (whole state, temporary
   file + fsync + os.replace + directory fsync) against a plain `torch.save` of the same
   tensors + fsync; `load_checkpoint` (CRC check + weights_only load) against a plain
   `torch.load(weights_only=True)`.
2. Mid-epoch resume cost against the position in the epoch: `fit(..., ckpt_path)` for
   one more step, with a map-style DataLoader (skips without loading) and with the same
   data behind an IterableDataset (must load and discard).
3. What it would cost to snapshot every RNG at each window start (the price of making an
   interrupt checkpoint exact), against one optimizer step of a tiny MLP.

Run: python benchmarks/checkpoint.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from trainer import Module, Trainer
from trainer.checkpoint import load_checkpoint

QUIET: dict[str, Any] = dict(logger=False, enable_progress_bar=False, device="cpu")


class Big(Module):
    """Six 2048x2048 linear layers: 25.2 M float32 parameters, about 100 MB."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-6, momentum=0.9)


def _plain_save(state: dict[str, Any], path: Path) -> None:
    with open(path, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_save_load(folder: Path, repeats: int) -> None:
    torch.manual_seed(0)
    model = Big()
    run = Trainer(max_steps=1, enable_checkpointing=False, root_dir=folder, **QUIET)
    run.fit(model, DataLoader(torch.utils.data.TensorDataset(torch.randn(2, 2048)), batch_size=2))
    same = {"module": model.state_dict(), "optimizer": run.optimizer.state_dict()}  # type: ignore[union-attr]
    ours, plain = folder / "ours.ckpt", folder / "plain.pt"
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    times: dict[str, list[float]] = {k: [] for k in ("ours save", "plain save", "ours load", "ours load (no CRC)", "plain load")}
    for i in range(repeats):
        pairs = [("ours save", lambda: run.save_checkpoint(ours)), ("plain save", lambda: _plain_save(same, plain))]
        for name, fn in pairs if i % 2 == 0 else pairs[::-1]:
            times[name].append(_time(fn))
        loads = [
            ("ours load", lambda: load_checkpoint(ours)),
            ("ours load (no CRC)", lambda: load_checkpoint(ours, verify=False)),
            ("plain load", lambda: torch.load(plain, weights_only=True)),
        ]
        for name, fn in loads if i % 2 == 0 else loads[::-1]:
            times[name].append(_time(fn))
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n1. save/load, model {size:.0f} MB of weights + {size:.0f} MB momentum, median of {repeats}")
    print(f"   {'':22}{'median ms':>10}{'ratio':>8}")
    for name, base in (("ours save", "plain save"), ("plain save", None), ("ours load", "plain load"),
                       ("ours load (no CRC)", "plain load"), ("plain load", None)):
        ratio = f"{median[name] / median[base]:.2f}x" if base else ""
        print(f"   {name:22}{median[name] * 1e3:10.1f}{ratio:>8}")


class Slow(Dataset):
    """A map-style dataset whose samples cost a little to make (like decoding a file)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.sin(torch.arange(256, dtype=torch.float32) + index).reshape(16, 16)
        x = (x @ x.T)[:, :6].mean(0)
        return x, x[:1]


class SlowStream(IterableDataset):
    """The same samples, but only by iteration: the consumed part must be loaded again."""

    def __init__(self, n: int) -> None:
        self.data = Slow(n)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        return (self.data[i] for i in range(len(self.data)))


class Tiny(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def bench_resume(folder: Path, repeats: int) -> None:
    n, batch = 16_000, 8  # 2,000 batches per epoch
    fractions = (0.0, 0.25, 0.5, 0.75, 0.99)
    loaders = {
        "map-style (skips indices)": lambda: DataLoader(Slow(n), batch_size=batch, shuffle=True),
        "iterable (loads, discards)": lambda: DataLoader(SlowStream(n), batch_size=batch),
    }
    checkpoints: dict[tuple[str, float], Path] = {}
    for kind, make in loaders.items():
        for fraction in fractions:
            steps = max(1, int(fraction * n / batch))
            run = Trainer(max_steps=steps, root_dir=folder / f"{kind[:3]}{fraction}", **QUIET)
            torch.manual_seed(0)
            run.fit(Tiny(), make())
            checkpoints[kind, fraction] = run.log_dir / "last.ckpt"
    times: dict[tuple[str, float], list[float]] = {key: [] for key in checkpoints}
    for _ in range(repeats):
        for (kind, fraction), path in checkpoints.items():
            steps = int(load_checkpoint(path)["loop"]["global_step"])
            run = Trainer(max_steps=steps + 1, enable_checkpointing=False, root_dir=folder / "resumed", **QUIET)
            loader = loaders[kind]()
            times[kind, fraction].append(_time(lambda: run.fit(Tiny(), loader, ckpt_path=path)))
    print(f"\n2. mid-epoch resume: fit(ckpt_path) for one more step, epoch of {n // batch} batches, median of {repeats} (ms)")
    print("   " + f"{'position in epoch':28}" + "".join(f"{f'{int(f * 100)}%':>8}" for f in fractions))
    for kind in loaders:
        row = "".join(f"{statistics.median(times[kind, f]) * 1e3:8.1f}" for f in fractions)
        print(f"   {kind:28}{row}")


def bench_rng_snapshot(repeats: int) -> None:
    torch.manual_seed(0)
    model = Tiny()
    opt = model.configure_optimizers()
    x, y = torch.randn(4, 6), torch.randn(4, 1)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model.net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def snapshot() -> None:
        torch.get_rng_state(), random.getstate(), np.random.get_state()

    def torch_only() -> None:
        torch.get_rng_state()

    count = 2000
    results: dict[str, list[float]] = {"tiny MLP step": [], "all RNG snapshot": [], "torch RNG snapshot": []}
    for _ in range(repeats):
        for name, fn in (("tiny MLP step", step), ("all RNG snapshot", snapshot), ("torch RNG snapshot", torch_only)):
            results[name].append(_time(lambda: [fn() for _ in range(count)]) / count)
    base = statistics.median(results["tiny MLP step"])
    print(f"\n3. per-step cost of an RNG snapshot at each window start, median of {repeats} (us)")
    for name, values in results.items():
        value = statistics.median(values)
        print(f"   {name:22}{value * 1e6:8.1f}{value / base * 100:8.1f}% of a step")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        bench_save_load(Path(tmp), args.repeats)
        bench_resume(Path(tmp), max(3, args.repeats // 2))
    bench_rng_snapshot(args.repeats)


if __name__ == "__main__":
    main()
