"""DDP and FSDP on NCCL under torchrun (tests/gpu/test_distributed.py): one process on one GPU,
or one per GPU (`--nproc_per_node=2`, each rank saving OUT/PHASE_rank{r}.pt).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=1 _nccl_worker.py PHASE OUT
PHASE "ddp", "fsdp" or "fsdp_offload": fit with a mid-epoch save, resume from it in a new
Trainer, and record whether the weights are the uninterrupted run's, plus the group's backend
and devices. The process then exits normally (the group is released at exit).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch import distributed as dist  # noqa: E402

from tests.gpu._references import QUIET, SaveAt  # noqa: E402
from tests.helpers.reference import loader, make_data, make_model  # noqa: E402
from trainer import Trainer  # noqa: E402
from trainer.distributed import FSDP  # noqa: E402


def full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in model.state_dict().items():
        gather = getattr(value, "full_tensor", None)
        out[key] = (gather() if callable(gather) else value).detach().cpu().clone()
    return out


def strategy(phase: str) -> Any:
    return {"ddp": "ddp", "fsdp": FSDP(), "fsdp_offload": FSDP(cpu_offload=True)}[phase]


def run(phase: str, precision: str, out: Path) -> dict[str, Any]:
    data, path = make_data(), out / f"{phase}_{precision}.ckpt"
    options = dict(precision=precision, max_epochs=2, gradient_clip_val=1.0, **QUIET)
    whole = make_model()
    torch.manual_seed(1)
    first = Trainer(strategy=strategy(phase), callbacks=[SaveAt(4, path)], **options)
    first.fit(whole, loader(data))
    info = {"device": str(first.strategy.device), "current": torch.cuda.current_device(), "module_device": str(whole.device),
            "backend": str(dist.get_backend_config()), "global_step": first.global_step}
    expected = full(whole)
    resumed = make_model(seed=9)
    torch.manual_seed(123)
    second = Trainer(strategy=strategy(phase), **options)
    second.fit(resumed, loader(data), ckpt_path=path)
    got = full(resumed)
    info["equal"] = expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    info["resumed_step"] = second.global_step
    info["weights"], info["world_size"] = got, dist.get_world_size()
    return info


def main() -> None:
    phase, out = sys.argv[1], Path(sys.argv[2])
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    precisions = ("fp32", "amp") if phase == "ddp" else ("bf16", "amp")
    results = {precision: run(phase, precision, out) for precision in precisions}
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.save(results, out / (f"{phase}.pt" if world == 1 else f"{phase}_rank{rank}.pt"))


if __name__ == "__main__":
    main()
