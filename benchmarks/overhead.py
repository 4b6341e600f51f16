"""Per-step overhead of the Trainer against a hand-written loop, measured in one process.

Each case times the raw loop and `Trainer.fit` on the same model and pre-built batches,
interleaved over several rounds. The per-step cost is the *marginal* one,
(T(long run) - T(short run)) / (extra steps), so one-off setup (optimizer creation,
folders, hparams) does not hide in the per-step figure; the medians over rounds are
reported with their ratio.

    python benchmarks/overhead.py            # full table (a few minutes on 2 cores)
    python benchmarks/overhead.py --quick    # fewer rounds and cases
    python benchmarks/overhead.py --against ../other-checkout   # two versions side by side

`--against DIR` compares this checkout's Trainer with the one in DIR (another git worktree,
e.g. `git worktree add ../before <commit>`) on the tiny model with the logger and the bar off:
the two run in alternating subprocesses, round after round, each timing its Trainer against
the same raw loop, so machine load moves both alike. An A/A control (the raw loop timed
against itself) shows how large a difference the noise alone makes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

if "--worker" in sys.argv:  # --against's subprocess: the Trainer of the checkout it names
    sys.path.insert(0, sys.argv[sys.argv.index("--worker") + 1])
else:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer import Module, Trainer  # noqa: E402

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}


class MLP(Module):
    def __init__(self, width: int, depth: int, inputs: int) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        size = inputs
        for _ in range(depth):
            layers += [torch.nn.Linear(size, width), torch.nn.ReLU()]
            size = width
        layers.append(torch.nn.Linear(size, 10))
        self.net = torch.nn.Sequential(*layers)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


SIZES = {"tiny": dict(width=32, depth=1, inputs=32, batch=32), "large": dict(width=1024, depth=3, inputs=512, batch=64)}


def batches(size: str, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    spec = SIZES[size]
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(spec["batch"], spec["inputs"], generator=g), torch.randint(0, 10, (spec["batch"],), generator=g)) for _ in range(n)]


def raw_loop(model: MLP, data: list[Any], precision: str, accumulate: int, clip: float | None) -> None:
    """The hand-written loop, as tight as we would write it."""
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu") if precision == "amp" else None
    dtype = DTYPES[precision]
    n = len(data)
    for i, batch in enumerate(data):
        start = (i // accumulate) * accumulate
        window = min(accumulate, n - start)
        with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
            loss = model.training_step(batch, i)
        loss = loss / window if window > 1 else loss
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if i - start + 1 < window:
            continue
        if clip is not None:
            if scaler is not None:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)


def trainer_fit(model: MLP, data: list[Any], precision: str, accumulate: int, clip: float | None, defaults: bool, root: str) -> None:
    extra = dict(root_dir=root, enable_checkpointing=False) if defaults else dict(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    trainer = Trainer(precision=precision, accumulate_grad_batches=accumulate, gradient_clip_val=clip, device="cpu", **extra)
    with contextlib.redirect_stderr(io.StringIO()):  # the bar is drawn, just not shown
        trainer.fit(model, data)


class GAN(Module):
    """Manual optimization: a discriminator and a generator step per batch (tiny MLPs)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.g = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
        self.d = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def losses(self, real: torch.Tensor) -> Any:
        fake = self.g(torch.randn(real.shape[0], 8))
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        d_loss = lambda: bce(self.d(real).float(), torch.ones(real.shape[0], 1)) + bce(self.d(fake.detach()).float(), torch.zeros(real.shape[0], 1))  # noqa: E731
        g_loss = lambda: bce(self.d(fake).float(), torch.ones(real.shape[0], 1))  # noqa: E731
        return d_loss, g_loss

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_g, opt_d = self.optimizers()
        d_loss, g_loss = self.losses(batch[0])
        self.manual_backward(d_loss())
        opt_d.step()
        opt_d.zero_grad()
        self.manual_backward(g_loss())
        opt_g.step()
        opt_g.zero_grad()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.g.parameters(), lr=1e-3), torch.optim.Adam(self.d.parameters(), lr=1e-3)


def raw_gan(model: GAN, data: list[Any], precision: str, *_: Any) -> None:
    """PyTorch's recipe for several optimizers: one GradScaler, one update per iteration."""
    opt_g, opt_d = model.configure_optimizers()
    dtype = DTYPES[precision]
    if precision != "amp":  # as tight as a hand-written fp32/bf16 loop gets
        for batch in data:
            with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
                d_loss, g_loss = model.losses(batch[0])
                d_loss().backward()
                opt_d.step()
                opt_d.zero_grad(set_to_none=True)
                g_loss().backward()
                opt_g.step()
                opt_g.zero_grad(set_to_none=True)
        return
    scaler = torch.amp.GradScaler("cpu")
    for batch in data:
        with torch.autocast("cpu", dtype=dtype):
            d_loss, g_loss = model.losses(batch[0])
            scaler.scale(d_loss()).backward()
            scaler.step(opt_d)
            opt_d.zero_grad(set_to_none=True)
            scaler.scale(g_loss()).backward()
            scaler.step(opt_g)
            opt_g.zero_grad(set_to_none=True)
        scaler.update()


def trainer_gan(model: GAN, data: list[Any], precision: str, *_: Any) -> None:
    trainer = Trainer(precision=precision, device="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(model, data)


def measure_gan(precision: str, rounds: int, short: int, long: int) -> tuple[float, float]:
    data_short, data_long = batches("tiny", short), batches("tiny", long)
    raw, ours = [], []
    for r in range(rounds + 1):
        pair = []
        for runner in (raw_gan, trainer_gan):
            costs = []
            for data in (data_short, data_long):
                torch.manual_seed(r)
                model = GAN()
                costs.append(timed(lambda: runner(model, data, precision)))
            pair.append((costs[1] - costs[0]) / (long - short) * 1e6)  # per batch (two optimizer steps)
        if r:
            raw.append(pair[0])
            ours.append(pair[1])
    return statistics.median(raw), statistics.median(ours)


def timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(size: str, precision: str, accumulate: int, clip: float | None, defaults: bool, rounds: int, short: int, long: int) -> tuple[float, float]:
    spec = SIZES[size]
    data_short, data_long = batches(size, short), batches(size, long)
    raw, ours = [], []
    with tempfile.TemporaryDirectory() as root:
        for r in range(rounds + 1):  # round 0 warms up
            pair = []
            for runner in (raw_loop, trainer_fit):
                costs = []
                for data in (data_short, data_long):
                    torch.manual_seed(r)
                    model = MLP(spec["width"], spec["depth"], spec["inputs"])
                    args = (model, data, precision, accumulate, clip) + ((defaults, root) if runner is trainer_fit else ())
                    costs.append(timed(lambda: runner(*args)))
                steps = (long - short) / accumulate
                pair.append((costs[1] - costs[0]) / steps * 1e6)
            if r:
                raw.append(pair[0])
                ours.append(pair[1])
    return statistics.median(raw), statistics.median(ours)


def import_time(rounds: int) -> tuple[float, float]:
    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    torch_only, with_trainer = [], []
    for _ in range(rounds):
        torch_only.append(run("import torch"))
        with_trainer.append(run("import torch; import trainer"))
    return statistics.median(torch_only) * 1e3, statistics.median(with_trainer) * 1e3


def one_round(precision: str, control: bool) -> tuple[float, float]:
    """µs per step of the raw loop and of the Trainer (or, for the A/A control, of the raw loop
    again), tiny model, logger and bar off: one interleaved round after a warm-up round."""
    raw, ours = measure("tiny", precision, 1, None, False, 1, 40, 1040) if not control else _aa(precision)
    return raw, ours


def _aa(precision: str) -> tuple[float, float]:
    data_short, data_long = batches("tiny", 40), batches("tiny", 1040)
    costs: list[float] = []
    for r in range(2):
        pair = []
        for _ in range(2):
            spent = []
            for data in (data_short, data_long):
                torch.manual_seed(r)
                model = MLP(32, 1, 32)
                spent.append(timed(lambda: raw_loop(model, data, precision, 1, None)))
            pair.append((spent[1] - spent[0]) / 1000 * 1e6)
        costs = pair
    return costs[0], costs[1]


def compare(other: str, rounds: int) -> None:
    """This checkout against `other`, in alternating subprocesses (see the module docstring)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.abspath(__file__)
    trees = {"this checkout": here, f"{other}": os.path.abspath(other), "A/A control (raw vs raw)": here}
    ratios: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            control = name.startswith("A/A")
            command = [sys.executable, script, "--worker", tree] + (["--control"] if control else [])
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()
            ratios[name].append(float(out[1]) / float(out[0]))
    print("| Trainer from | median ratio to the raw loop | rounds (ratios) |")
    print("|---|---|---|")
    for name, values in ratios.items():
        print(f"| {name} | {statistics.median(values):.3f} | {', '.join(f'{v:.3f}' for v in values)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny-only", action="store_true", help="only the tiny-model and GAN rows")
    parser.add_argument("--against", metavar="DIR", help="compare with the Trainer of another checkout")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of --against")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--control", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        print(*one_round("fp32", args.control))
        return
    if args.against:
        compare(args.against, args.rounds)
        return
    rounds = 5 if args.quick else 9
    cases = []
    for size in ("tiny", "large"):
        for precision in ("fp32", "amp", "bf16"):
            for accumulate, clip in ((1, None), (2, 1.0)):
                if (args.quick and (size == "large" and accumulate == 2)) or (args.tiny_only and size == "large"):
                    continue
                cases.append((size, precision, accumulate, clip, False))
    for precision in ("fp32", "amp", "bf16"):
        cases.append(("tiny", precision, 1, None, True))
    print("| model | precision | accumulate | clip | logger+bar | raw µs/step | trainer µs/step | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for size, precision, accumulate, clip, defaults in cases:
        short, long = (40, 240) if size == "tiny" else (8, 48)
        if size == "large" and precision == "amp":  # float16 matmuls are slow on CPUs: ~0.3 s a step
            short, long = (2, 10)
        raw, ours = measure(size, precision, accumulate, clip, defaults, rounds, short, long)
        print(f"| {size} | {precision} | {accumulate} | {clip or '-'} | {'on' if defaults else 'off'} | {raw:.0f} | {ours:.0f} | {ours / raw:.3f} |", flush=True)
    for precision in ("fp32", "amp"):  # manual optimization: µs per batch of two optimizer steps
        raw, ours = measure_gan(precision, rounds, 40, 240)
        print(f"| gan (manual, per batch) | {precision} | 1 | - | off | {raw:.0f} | {ours:.0f} | {ours / raw:.3f} |", flush=True)
    base, ours_import = import_time(7 if not args.quick else 3)
    print(f"\nimport torch: {base:.0f} ms; import torch + trainer: {ours_import:.0f} ms; difference {ours_import - base:+.0f} ms")


if __name__ == "__main__":
    main()
