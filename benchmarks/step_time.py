"""What `callbacks.StepTimeBreakdown` costs per optimizer step, against a hand-written loop.

Three runners on the same model and pre-built batches, interleaved over several rounds: the
raw loop, `Trainer.fit` without the callback, and `Trainer.fit` with it. The per-step cost is
the marginal one, (T(long run) - T(short run)) / (extra steps), so setup does not hide in it;
medians over rounds are reported, with each Trainer's ratio to the raw loop. The run with the
callback also flushes at logging steps (every 50 steps, as the default `log_every_n_steps`).

    python benchmarks/step_time.py            # tiny and large MLPs, fp32, CPU (a few minutes on 2 cores)
    python benchmarks/step_time.py --quick    # fewer rounds, the tiny model only

One process and a CPU: the marks are `time.perf_counter()` calls. Under DDP each parameter's
gradient also calls a small hook (to find this rank's last gradient); on a GPU each mark
records a CUDA event, read only at logging steps.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.overhead import MLP, SIZES, batches, raw_loop, timed  # noqa: E402
from callbacks import StepTimeBreakdown  # noqa: E402
from trainer import Trainer  # noqa: E402


def trainer_fit(model: MLP, data: list[Any], breakdown: bool, root: str) -> None:
    callbacks = [StepTimeBreakdown()] if breakdown else []
    trainer = Trainer(device="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      root_dir=root, callbacks=callbacks)
    with contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(model, data)


def measure(size: str, rounds: int, short: int, long: int) -> list[float]:
    spec = SIZES[size]
    data = {n: batches(size, n) for n in (short, long)}
    runners = {
        "raw": lambda model, d, root: raw_loop(model, d, "fp32", 1, None),
        "off": lambda model, d, root: trainer_fit(model, d, False, root),
        "on": lambda model, d, root: trainer_fit(model, d, True, root),
    }
    costs: dict[str, list[float]] = {name: [] for name in runners}
    with tempfile.TemporaryDirectory() as root:
        for r in range(rounds + 1):  # round 0 warms up
            for name in (list(runners) if r % 2 else list(runners)[::-1]):  # the order alternates: load moves all alike
                runner, seconds = runners[name], []
                for n in (short, long):
                    torch.manual_seed(r)
                    model = MLP(spec["width"], spec["depth"], spec["inputs"])
                    seconds.append(timed(lambda: runner(model, data[n], root)))
                if r:
                    costs[name].append((seconds[1] - seconds[0]) / (long - short) * 1e6)
    return [statistics.median(costs[name]) for name in runners]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    plan = {"tiny": (3, 50, 250)} if args.quick else {"tiny": (9, 100, 600), "large": (5, 20, 120)}
    print(f"{'model':<8}{'raw µs/step':>13}{'Trainer':>10}{'ratio':>7}{'+breakdown':>12}{'ratio':>7}{'cost µs':>9}")
    for size, (rounds, short, long) in plan.items():
        raw, off, on = measure(size, rounds, short, long)
        print(f"{size:<8}{raw:>13.1f}{off:>10.1f}{off / raw:>7.2f}{on:>12.1f}{on / raw:>7.2f}{on - off:>9.1f}")


if __name__ == "__main__":
    main()
