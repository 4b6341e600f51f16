"""Resuming with ckpt_path="last" under 2 processes (Gloo): which ranks check the file's checksum.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 resume_read_worker.py OUT_DIR
A first fit writes the run's checkpoints; a second Trainer resumes it with ckpt_path="last", a
third from the file's path, while `_check_archive`'s full checks (verify=True) are counted; a
fourth is given a copy of the file with a tensor's bytes damaged. Each rank saves
OUT_DIR/reads_rank{r}.pt; tests/checkpoint/test_resume_reads.py checks them.
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
    last, verified_last, verified[:] = first.log_dir / "last.ckpt", list(verified), []
    from_path = make_model(seed=6)
    third = Trainer(max_epochs=2, **{**options, "run_name": "p"})
    third.fit(from_path, loader(make_data()), ckpt_path=last)
    checkpoint_format._check_archive = check  # type: ignore[assignment]
    damaged = out / "damaged.ckpt"
    if RANK == 0:
        data = bytearray(last.read_bytes())
        data[len(data) // 2] ^= 0xFF  # inside the tensors' bytes: only the checksum can tell
        damaged.write_bytes(bytes(data))
    torch.distributed.barrier()
    try:
        Trainer(max_epochs=2, **{**options, "run_name": "d"}).fit(make_model(), loader(make_data()), ckpt_path=damaged)
        refused = ""
    except Exception as error:  # noqa: BLE001 - recorded for the test
        refused = f"{type(error).__name__}: {error}"
    torch.save({"verified_last": verified_last, "verified_path": verified, "first_step": first.global_step,
                "second_step": second.global_step, "third_step": third.global_step, "weights": weights(resumed_model),
                "path_weights": weights(from_path), "local_rank": second.strategy.local_rank, "refused": refused},
               out / f"reads_rank{RANK}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
