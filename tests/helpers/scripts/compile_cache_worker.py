"""A compiled run in a process of its own (`python compile_cache_worker.py first ROOT OUT STEPS`), then
resumed in a fresh process: `python compile_cache_worker.py CKPT ROOT OUT`.

The test runs it with `TORCHINDUCTOR_CACHE_DIR` set to an empty folder, so every compiled graph
either comes from the run's compile_cache.bin (loaded by the Trainer on resume) or is built
again. It writes OUT/resumed.json (torch's own cache counters, the Trainer's log lines, the
time to the first step) and OUT/resumed.pt (the weights).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer


class Linear(Module):
    """A bias-free linear layer, the loss outside the compiled forward: Inductor makes no C++
    kernel of it (matrix products only), so compiling it is quick on a CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(6, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:  # the learning rate changes every step
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9 ** step)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def loader() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g)), batch_size=4)


def trainer(**kwargs: Any) -> Trainer:
    return Trainer(compile=True, device="cpu", logger=False, enable_progress_bar=False, num_sanity_val_steps=0,
                   **kwargs)


class FirstStep(Callback):
    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not hasattr(self, "seconds"):
            self.seconds = time.perf_counter() - self.start


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main() -> None:
    from torch._dynamo.utils import counters

    lines = Lines()
    logging.getLogger("trainer").addHandler(lines)
    logging.getLogger("trainer").setLevel(logging.INFO)
    if sys.argv[1] == "first":  # the first run, 3 steps, in a process of its own (as the resumed one)
        root, out, steps = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
        torch.manual_seed(0)
        module = Linear()
        trainer(max_steps=steps, root_dir=root, run_name="job").fit(module, loader())
        (out / f"first{steps}.json").write_text(json.dumps({"frames": counters["frames"]["ok"], "lines": lines.lines}))
        torch.save(module.state_dict(), out / f"first{steps}.pt")
        return
    checkpoint, root, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    torch.manual_seed(1)  # not the first run's weights: the checkpoint's must win
    module, first = Linear(), FirstStep()
    trainer(max_steps=6, root_dir=root, callbacks=[first]).fit(
        module, loader(), ckpt_path=checkpoint)
    result = {
        "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
        "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "first_step_s": first.seconds, "lines": lines.lines,
    }
    (out / "resumed.json").write_text(json.dumps(result))
    torch.save(module.state_dict(), out / "resumed.pt")


if __name__ == "__main__":
    main()
