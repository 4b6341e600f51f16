"""`Trainer(compile=True, strategy="ddp")` against a hand-written `torch.compile(DDP(model))`
loop, in one 2-process torchrun job (tests/loops/test_compile.py reads OUT_DIR/compile_rank{r}.pt).

The Trainer compiles the module in place and runs its step inside DDP's forward, where
dynamo's DDPOptimizer splits the graph at DDP's bucket boundaries, as it does for a
compiled DDP module.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Trainer


class Net(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y)


def fsdp(out: Path) -> None:
    """compile=True under FSDP against the same FSDP run eager."""
    from trainer.distributed import FSDP

    results: dict[str, Any] = {}
    for compile in (False, True):
        torch.manual_seed(0)
        net = Net(dropout=0.0)
        trainer = Trainer(strategy=FSDP(shard_modules=["Linear"]), device="cpu", compile=compile, max_epochs=2,
                          logger=False, enable_progress_bar=False, enable_checkpointing=False)
        trainer.fit(net, DataLoader(make_data(32), batch_size=4, shuffle=False))
        results["compiled" if compile else "eager"] = {k: v.full_tensor() for k, v in net.state_dict().items()}
    torch.save(results, out / f"fsdp_rank{os.environ['RANK']}.pt")


def main() -> None:
    out = Path(sys.argv[1])
    if sys.argv[2:] == ["fsdp"]:
        fsdp(out)
        return
    data = make_data(32)
    torch.manual_seed(0)
    model = Net(dropout=0.0)
    reference = copy.deepcopy(model)
    trainer = Trainer(strategy="ddp", device="cpu", compile=True, max_epochs=2, logger=False,
                      enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=False))
    compiled = torch.compile(DistributedDataParallel(reference))
    optimizer = reference.configure_optimizers()
    sampler = DistributedSampler(data, shuffle=False)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=4, sampler=sampler):
            torch.nn.functional.mse_loss(compiled(x).float(), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    results = {"trainer": weights(model), "reference": weights(reference), "steps": trainer.global_step}
    torch.save(results, out / f"compile_rank{os.environ['RANK']}.pt")


if __name__ == "__main__":
    main()
