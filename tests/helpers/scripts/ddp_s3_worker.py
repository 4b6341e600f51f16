"""DDP's single-file checkpoints in a bucket, under `torchrun --nproc_per_node=2` (Gloo, CPU).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 ddp_s3_worker.py ROOT_URL OUT_DIR
(the S3 server's endpoint and credentials in the environment). A run never interrupted, and the
same run (dropout: every rank's own random state matters) stopped by SIGTERM mid-epoch, its
checkpoints going to the bucket synchronously, then resumed with ckpt_path="last" from there.
Each rank writes OUT_DIR/rank{r}.pt for tests/checkpoint/test_s3_sharded.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import make_data
from tests.helpers.scripts.fsdp_worker import RANK, Terminate, full, resume_model, trainer
from trainer import Trainer
from trainer.checkpoint import load_checkpoint


def ddp_trainer(root: str | None, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = dict(enable_checkpointing=root is not None, root_dir=root or ".")
    return trainer("ddp", "fp32", 2, 0.5, max_epochs=3, seed=7, run_name="ddp", keep_last_checkpoints=2,
                   **options, **kwargs)


def main() -> None:
    root, out = sys.argv[1], Path(sys.argv[2])
    data = make_data(40)
    loader = lambda: DataLoader(data, batch_size=4, shuffle=True)  # noqa: E731
    results: dict[str, Any] = {}
    whole = resume_model()
    ddp_trainer(None).fit(whole, loader())
    results["whole"] = full(whole)
    cut = resume_model()
    t = ddp_trainer(root, callbacks=[Terminate(at=4)])
    t.fit(cut, loader())
    folder = t.checkpoint_dir
    results["stopped_at"] = t.global_step
    results["folder"] = str(folder)
    results["committed_step"] = load_checkpoint(f"{folder}/last.ckpt")["global_step"]
    if RANK == 0:
        results["at_stop"] = sorted(p.key[len(folder.key) + 1:] for p in folder.walk_files())  # type: ignore[union-attr]
    resumed = resume_model()
    t2 = ddp_trainer(root)
    t2.fit(resumed, loader(), ckpt_path="last")
    results["resumed"] = full(resumed)
    results["resumed_from"] = str(t2.ckpt_path)
    results["resumed_step"] = t2.global_step
    torch.save(results, out / f"rank{RANK}.pt")


if __name__ == "__main__":
    main()
