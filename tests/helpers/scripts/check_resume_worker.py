"""The resume check under 2 processes (Gloo): a correct pipeline (the Trainer gives each rank a
DistributedSampler) and a broken one (a DistributedSampler inside a user's batch sampler that
counts its own epochs, use_distributed_sampler=False), both read in the main process (loader
workers are checked in one process, tests/checks/test_check_resume.py: here, forking them from
a process that holds a Gloo group left a worker stuck in fork about one run in five); then the
accumulation check of the padded-sequence model: each rank's 3 micro-batches, averaged by DDP,
against both ranks' batches joined into one.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 check_resume_worker.py OUT_DIR
Each rank writes OUT_DIR/rank{r}.json; tests/checks/test_check_resume_ddp.py reads them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from tests.helpers.items import make_item_model, make_token_data
from tests.helpers.pipelines import Net, loader
from trainer import check_accumulation, check_resume

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
OPTIONS = dict(device="cpu", accumulate_grad_batches=2, steps=6)

torch.manual_seed(5)
found = {}
correct = check_resume(Net, lambda: loader("correct", world=WORLD), **OPTIONS)
broken = check_resume(Net, lambda: loader("distributed_epoch", rank=RANK, world=WORLD),
                      use_distributed_sampler=False, **OPTIONS)
for name, report in (("correct", correct), ("broken", broken)):
    found[name] = {"exact": report.exact, "first_bad_batch": report.first_bad_batch, "rank": report.rank,
                   "causes": report.causes, "text": str(report)}
batch = make_token_data(12, seed=RANK)[:12]  # each rank's own batch, uneven token counts
torch.manual_seed(RANK)  # other initial weights on each rank: the check takes rank 0's, as DDP does
found["accumulation"] = {}
for mean in (True, False):
    report = check_accumulation(make_item_model(seed=RANK, mean_rule=mean), batch, 3)
    found["accumulation"][str(mean)] = {"ok": report.ok, "ranks": report.ranks, "ratio": report.ratio, "text": str(report)}
found["world"] = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
Path(sys.argv[1], f"rank{RANK}.json").write_text(json.dumps(found))
