"""Resuming with ckpt_path="last" under 2 processes (Gloo): which ranks check the file's checksum.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 resume_read_worker.py OUT_DIR
A first fit writes the run's checkpoints; a second Trainer resumes it with ckpt_path="last" while
`_check_archive`'s full checks (verify=True) are counted. Each rank saves OUT_DIR/reads_rank{r}.pt;
tests/checkpoint/test_resume_reads.py checks them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from tests.helpers.reference import loader, make_data, make_model, weights
from trainer import Trainer
from trainer.checkpoint import format as checkpoint_format

RANK = int(os.environ["RANK"])


def main(out: Path) -> None:
    options: dict[str, Any] = dict(strategy="ddp", device="cpu", logger=False, enable_progress_bar=False,
                                   enable_model_summary=False, root_dir=out / "runs", run_name="r")
    first = Trainer(max_epochs=1, **options)
    first.fit(make_model(), loader(make_data()))
    verified: list[str] = []
    check = checkpoint_format._check_archive

    def counting(source: Path, name: str, verify: bool) -> None:
        if verify:
            verified.append(Path(source).name)
        check(source, name, verify)

    checkpoint_format._check_archive = counting  # type: ignore[assignment]
    resumed_model = make_model(seed=5)
    second = Trainer(max_epochs=2, **options)
    second.fit(resumed_model, loader(make_data()), ckpt_path="last")
    checkpoint_format._check_archive = check  # type: ignore[assignment]
    torch.save({"verified": verified, "first_step": first.global_step, "second_step": second.global_step,
                "weights": weights(resumed_model)}, out / f"reads_rank{RANK}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
