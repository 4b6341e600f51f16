"""Memory saved by `Trainer(activation_checkpointing=...)` on a transformer-shaped model.

The GPT of benchmarks/models.py (pre-norm encoder layers, causal mask, random tokens),
trained by the Trainer for a few steps with and without checkpointing its
`TransformerEncoderLayer`s, each setting in a fresh process so peaks do not mix:

    python benchmarks/activation_checkpointing.py                       # width 512, 8 layers, context 512
    python benchmarks/activation_checkpointing.py --width 256 --layers 4 --context 256 --batch 4

Reported per setting:
- `saved MiB`: the bytes autograd keeps for the backward pass outside checkpointed regions,
  measured with `torch.autograd.graph.saved_tensors_hooks` during one training forward
  (distinct storages, parameters excluded): the activation memory itself, exact and the
  same on every machine;
- `peak`: the process's peak resident memory (CPU, `ru_maxrss`) or the CUDA allocator's peak;
- `s/step`: the time per optimizer step after the first (the recomputation's price).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.models import Task, batches  # noqa: E402
from trainer import Callback, Trainer  # noqa: E402

SETTINGS = {"off": False, "blocks": ["TransformerEncoderLayer"], "size rule": True}


class SavedBytes(Callback):
    """Counts what autograd saves for backward during the first training forward."""

    def __init__(self) -> None:
        self.saved = 0
        self.times: list[float] = []
        self._hooks: Any = None
        self._seen: set[int] = set()
        self._params: set[int] = set()

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.times.append(time.perf_counter())
        if batch_idx == 0:
            self._params = {p.untyped_storage().data_ptr() for p in module.parameters()}

            def pack(tensor: torch.Tensor) -> torch.Tensor:
                storage = tensor.untyped_storage()
                key = storage.data_ptr()
                if key not in self._seen and key not in self._params:
                    self._seen.add(key)
                    self.saved += storage.nbytes()
                return tensor

            self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
            self._hooks.__enter__()

    def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None


def child(setting: str, spec: dict[str, Any], steps: int, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Task("gpt", spec)
    data = batches("gpt", spec, steps, device)
    counter = SavedBytes()
    trainer = Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, device=str(device), callbacks=[counter],
                      activation_checkpointing=SETTINGS[setting], num_sanity_val_steps=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer.fit(model, data)
    end = time.perf_counter()
    times = counter.times + [end]
    step = (times[-1] - times[1]) / max(len(times) - 2, 1)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    return {"setting": setting, "saved_mib": counter.saved / 2**20, "peak_mib": peak, "s_per_step": step,
            "params": sum(p.numel() for p in model.parameters())}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--child", choices=list(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    spec = {"vocab": args.vocab, "width": args.width, "layers": args.layers, "heads": args.heads,
            "context": args.context, "batch": args.batch}
    if args.child:
        print(json.dumps(child(args.child, spec, args.steps, torch.device(args.device))))
        return []
    rows = []
    for setting in SETTINGS:
        command = [sys.executable, os.path.abspath(__file__), "--child", setting, *(argv if argv is not None else sys.argv[1:])]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    peak_name = "CUDA peak MiB" if args.device.startswith("cuda") else "peak RSS MiB"
    print(f"GPT {args.layers} x {args.width}, {args.heads} heads, context {args.context}, batch {args.batch}, "
          f"{rows[0]['params']:,} parameters, {args.device}")
    print(f"| activation_checkpointing | saved for backward MiB | {peak_name} | s/step |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['setting']} | {row['saved_mib']:.1f} | {row['peak_mib']:.0f} | {row['s_per_step']:.3f} |")
    return rows


if __name__ == "__main__":
    main()
