"""A mid-epoch resume under DDP whose epoch-start hooks reset state the checkpoint holds: the
module's recurrent state in persistent buffers, Adam's moments, the learning rate and a step
scheduler (tests/loops/test_resume_epoch_start_state.py's model and callback).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 epoch_start_worker.py PHASE OUT_DIR
PHASE "main" trains the whole run and the run cut inside its second epoch; "resume" continues
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

RANK = int(os.environ["RANK"])


def fit(root: Path, ckpt_path: Any = None, **options: Any) -> Trainer:
    model = new_model()
    torch.manual_seed(1 if ckpt_path is None else 99)
    trainer = Trainer(strategy="ddp", device="cpu", logger=False, enable_progress_bar=False, root_dir=root,
                      callbacks=[RestartOptimizer()], **options)
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    return trainer


def main() -> None:
    phase, out = sys.argv[1], Path(sys.argv[2])
    results: dict[str, Any] = {}
    if phase == "main":
        whole = fit(out / "whole", max_epochs=2, enable_checkpointing=False)
        results["whole"] = {k: v.clone() for k, v in whole.lightning_module.state_dict().items()}
        cut = fit(out / "cut", max_steps=7)
        results["cut"] = cut.state.state_dict()
        results["ckpt"] = str(cut.log_dir / "last.ckpt")
    else:
        ckpt = torch.load(out / "main_rank0.pt", weights_only=False)["ckpt"]
        resumed = fit(out / "resumed", ckpt_path=ckpt, max_epochs=2, enable_checkpointing=False)
        results["resumed"] = {k: v.clone() for k, v in resumed.lightning_module.state_dict().items()}
    torch.save(results, out / f"{phase}_rank{RANK}.pt")


if __name__ == "__main__":
    main()
