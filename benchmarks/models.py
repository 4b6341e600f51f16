"""Realistic models, raw loop vs Trainer: steps/s, peak memory and the ratios (issue 13).

A ResNet-50-shaped convnet and a GPT-2-small-shaped transformer, built from code on random
data (nothing is downloaded), trained by a hand-written loop and by the Trainer in fp32,
amp and bf16, eager and compiled, interleaved in one process:

    python benchmarks/models.py                 # on a GPU: full sizes, a few minutes
    python benchmarks/models.py --tiny          # tiny sizes: runs on a CPU in seconds (tested)
    python benchmarks/models.py --tiny --no-compile

Prints one Markdown table: steps/s of each, Trainer/raw, amp/fp32, bf16/fp32 and
compiled/eager ratios, and the peak memory (CUDA only). Both are timed from the start of the
second step to the end of the last, so neither compilation nor the Trainer's construction and
setup count; on a GPU `torch.compile`'s "reduce-overhead" mode (CUDA graphs) gets rows too.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer import Callback, Module, Trainer  # noqa: E402

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}


class Bottleneck(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )
        self.skip = nn.Identity() if stride == 1 and inputs == out else nn.Sequential(
            nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def resnet(widths: tuple[int, ...], blocks: tuple[int, ...], classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    inputs = widths[0]
    for stage, (width, count) in enumerate(zip(widths, blocks)):
        for i in range(count):
            layers.append(Bottleneck(inputs, width, 2 if i == 0 and stage > 0 else 1))
            inputs = width * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, classes))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(context, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), -math.inf), 1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.blocks(self.embed(tokens) + self.position(positions), mask=self.mask[: tokens.shape[1], : tokens.shape[1]])
        return self.head(hidden)


SIZES = {
    "full": {
        "resnet": dict(widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), classes=1000, batch=64, image=224),
        "gpt": dict(vocab=50257, width=768, layers=12, heads=12, context=1024, batch=8),
    },
    "tiny": {
        "resnet": dict(widths=(8, 8), blocks=(1, 1), classes=10, batch=4, image=32),
        "gpt": dict(vocab=100, width=32, layers=2, heads=2, context=16, batch=4),
    },
}


class Task(Module):
    def __init__(self, kind: str, spec: dict[str, Any]) -> None:
        super().__init__()
        self.kind = kind
        if kind == "resnet":
            self.net = resnet(spec["widths"], spec["blocks"], spec["classes"])
        else:
            self.net = GPT(spec["vocab"], spec["width"], spec["layers"], spec["heads"], spec["context"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        out = self(x)
        return F.cross_entropy(out.float().flatten(0, -2) if self.kind == "gpt" else out.float(), y.flatten() if self.kind == "gpt" else y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=self.device.type == "cuda" or None)


def batches(kind: str, spec: dict[str, Any], n: int, device: torch.device) -> list[Any]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        if kind == "resnet":
            x = torch.randn(spec["batch"], 3, spec["image"], spec["image"], generator=g)
            y = torch.randint(0, spec["classes"], (spec["batch"],), generator=g)
        else:
            x = torch.randint(0, spec["vocab"], (spec["batch"], spec["context"]), generator=g)
            y = torch.randint(0, spec["vocab"], (spec["batch"], spec["context"]), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


class Clock:
    """The time from the start of the second step to the end of the last: what neither the
    first step (compilation, allocation) nor the Trainer's construction and fit setup touch.
    On CUDA it synchronises once at each end."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = self.seconds = math.nan

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def before_step(self, index: int) -> None:
        if index == 1:
            self.start = self._now()

    def after_last_step(self) -> None:
        self.seconds = self._now() - self.start


class Timing(Callback):
    def __init__(self, clock: Clock, steps: int) -> None:
        self.clock, self.steps = clock, steps

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.clock.before_step(batch_idx)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.steps - 1:
            self.clock.after_last_step()


def raw(model: Task, data: list[Any], precision: str, device: torch.device, clock: Clock) -> None:
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp")
    dtype = DTYPES[precision]
    model.train()
    for index, batch in enumerate(data):
        clock.before_step(index)
        with torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext():
            loss = model.loss(batch)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    clock.after_last_step()


def ours(model: Task, data: list[Any], precision: str, device: torch.device, clock: Clock) -> None:
    Trainer(precision=precision, device=str(device), logger=False, enable_progress_bar=False, enable_checkpointing=False,
            num_sanity_val_steps=0, nonfinite_loss="skip" if device.type == "cuda" else "error",
            callbacks=[Timing(clock, len(data))]).fit(model, data)


def timed(kind: str, spec: dict[str, Any], runner: Any, precision: str, compiled: str | None, device: torch.device,
          steps: int) -> tuple[float, float]:
    """Steps per second from the second step on, and the peak memory. `compiled`: the mode of
    `torch.compile` ("default", "reduce-overhead": CUDA graphs), None: eager."""
    torch.manual_seed(0)
    model = Task(kind, spec).to(device)
    if compiled is not None:
        model.compile(mode=compiled)
    warm, data = batches(kind, spec, 2, device), batches(kind, spec, steps, device)
    runner(model, warm, precision, device, Clock(device))  # compile, allocate, autotune
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    clock = Clock(device)
    runner(model, data, precision, device, clock)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
    return (steps - 1) / clock.seconds, peak


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (CPU, seconds)")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sizes = SIZES["tiny" if args.tiny or device.type == "cpu" else "full"]
    steps = max(args.steps or (3 if args.tiny else 20), 2)  # timed from the second step on
    precisions = ["fp32", "bf16"] + (["amp"] if device.type == "cuda" or args.tiny else [])
    rows: list[dict[str, Any]] = []
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}; torch {torch.__version__}")
    print("| model | precision | compiled | raw steps/s | trainer steps/s | trainer/raw time | peak MiB (trainer) |")
    print("|---|---|---|---|---|---|---|")
    for kind, spec in sizes.items():
        modes: list[str | None] = [None] if args.no_compile else [None, "default"]
        if not args.no_compile and device.type == "cuda":
            modes.append("reduce-overhead")  # CUDA graphs (on a CPU it compiles as "default")
        for compiled in modes:
            for precision in precisions:
                raw_rates, our_rates, peak = [], [], float("nan")
                for _ in range(args.rounds):
                    raw_rates.append(timed(kind, spec, raw, precision, compiled, device, steps)[0])
                    rate, peak = timed(kind, spec, ours, precision, compiled, device, steps)
                    our_rates.append(rate)
                row = {"model": kind, "precision": precision, "compiled": compiled or False,
                       "raw": statistics.median(raw_rates), "trainer": statistics.median(our_rates), "peak": peak}
                rows.append(row)
                print(f"| {kind} | {precision} | {compiled or False} | {row['raw']:.2f} | {row['trainer']:.2f} | "
                      f"{row['raw'] / row['trainer']:.3f} | {peak:.0f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
