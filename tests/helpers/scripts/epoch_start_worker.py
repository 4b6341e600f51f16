"""A mid-epoch resume under DDP whose epoch-start hooks reset state the checkpoint holds: the
module's recurrent state in persistent buffers, Adam's moments, the learning rate and a step
scheduler (tests/loops/test_resume_epoch_start_state.py's model and callback).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 epoch_start_worker.py PHASE OUT_DIR [STRATEGY]
STRATEGY is "ddp" (the default) or "fsdp" (sharded checkpoint folders). PHASE "main" trains the whole run and the run cut inside its second epoch; "resume" continues
the cut in new processes. Each rank saves OUT_DIR/PHASE_rank{r}.pt for
tests/strategies/test_ddp_epoch_start_state.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from tests.loops.test_resume_epoch_start_state import RestartOptimizer, loader, new_model
from trainer import Trainer
from trainer.distributed import FSDP
from trainer.distributed import FSDP

RANK = int(os.environ["RANK"])
STRATEGY = sys.argv[3] if len(sys.argv) > 3 else "ddp"
STRATEGY = sys.argv[3] if len(sys.argv) > 3 else "ddp"


def fit(root: Path, ckpt_path: Any = None, **options: Any) -> Trainer:
    model = new_model(carry=STRATEGY != "fsdp")
    torch.manual_seed(1 if ckpt_path is None else 99)
    strategy: Any = FSDP(shard_modules=["Linear", "LSTM"]) if STRATEGY == "fsdp" else "ddp"
    trainer = Trainer(strategy=strategy, device="cpu", logger=False, enable_progress_bar=False, root_dir=root,
                      callbacks=[RestartOptimizer()], **options)
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    return trainer


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The module's whole state on every rank (FSDP's shards gathered)."""
    state = trainer.lightning_module.state_dict()
    return {k: (v.full_tensor() if callable(getattr(v, "full_tensor", None)) else v).detach().clone() for k, v in state.items()}


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The module's whole state on every rank (FSDP's shards gathered)."""
    state = trainer.lightning_module.state_dict()
    return {k: (v.full_tensor() if callable(getattr(v, "full_tensor", None)) else v).detach().clone() for k, v in state.items()}


def main() -> None:
    phase, out = sys.argv[1], Path(sys.argv[2])
    results: dict[str, Any] = {}
    if phase == "main":
        whole = fit(out / "whole", max_epochs=2, enable_checkpointing=False)
        results["whole"] = weights(whole)
        cut = fit(out / "cut", max_steps=7)
        results["cut"] = cut.state.state_dict()
        results["ckpt"] = str(cut.log_dir / "last.ckpt")  # a folder under FSDP  # a folder under FSDP
    else:
        ckpt = torch.load(out / "main_rank0.pt", weights_only=False)["ckpt"]
        resumed = fit(out / "resumed", ckpt_path=ckpt, max_epochs=2, enable_checkpointing=False)
        results["resumed"] = weights(resumed)
    torch.save(results, out / f"{phase}_rank{RANK}.pt")


if __name__ == "__main__":
    main()
