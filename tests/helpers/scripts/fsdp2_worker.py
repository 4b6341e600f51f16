"""pytorch/examples' distributed/FSDP2 under torchrun (2 processes, Gloo): the port through
`Trainer(strategy=FSDP(...))` (built under `torch.device("meta")`, then under Lightning's
`trainer.init_module(empty_init=True)`; stopped after 2 of the 4 steps with a checkpoint and
resumed from it), then the script's own loop (tests/helpers/examples/fsdp2.py).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 fsdp2_worker.py OUT_DIR
Each rank saves OUT_DIR/fsdp2_rank{r}.pt; tests/examples/test_fsdp2.py reads them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from tests.helpers.examples.fsdp2 import STEPS, FSDP2Example, FSDP2ExampleEmptyInit, original, steps_loader
from callbacks import ModelCheckpoint
from trainer import Trainer
from trainer.distributed import FSDP


def main() -> None:
    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    found: dict[str, Any] = {}
    runs = (("port", FSDP2Example, STEPS), ("empty_init", FSDP2ExampleEmptyInit, STEPS),
            ("stopped", FSDP2Example, STEPS // 2), ("resumed", FSDP2Example, STEPS))
    for name, cls, steps in runs:
        torch.manual_seed(0)
        model = cls()
        saves = dict(callbacks=[ModelCheckpoint(every_n_train_steps=STEPS // 2)], root_dir=out / "runs",
                     enable_checkpointing=True) if name in ("stopped", "resumed") else dict(enable_checkpointing=False)
        trainer = Trainer(strategy=FSDP(shard_modules=["TransformerBlock"]), device="cpu", max_steps=steps,
                          gradient_clip_val=1.0, use_distributed_sampler=False, logger=False,
                          enable_progress_bar=False, enable_model_summary=False, **saves)
        trainer.fit(model, steps_loader(), ckpt_path="last" if name == "resumed" else None)
        found[name] = {k.removeprefix("model."): v.full_tensor() for k, v in model.state_dict().items()}
        found[f"{name}_global_step"] = trainer.global_step
        if name == "empty_init":
            found["built_on_meta"] = model.built_on_meta
    found["script"] = original()
    torch.save(found, out / f"fsdp2_rank{os.environ['RANK']}.pt")


if __name__ == "__main__":
    main()
