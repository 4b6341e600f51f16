"""FSDP with `async_checkpointing=True`: every rank's shards are written by
`torch.distributed.checkpoint.async_save` while training goes on (tests/helpers/scripts/fsdp_worker.py,
phase "background", two processes on Gloo).
"""

from __future__ import annotations

import pytest
import torch

from tests.strategies.test_fsdp import torchrun

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")]


def test_background_sharded_saves_change_nothing_and_resume_exactly(tmp_path):
    results = torchrun("background", tmp_path)
    for rank in range(2):
        r = results[rank]
        for key in r["sync"]:
            assert torch.equal(r["sync"][key], r["async"][key]), (rank, key)
            assert torch.equal(r["sync"][key], r["resumed"][key]), (rank, key)  # SIGTERM at step 4, resumed from 'last'
        assert r["resumed_step"] == 9
    assert results[0]["sync_kept"] == results[0]["async_kept"] == ["epoch=2-step=8.ckpt"]
    # every_n_train_steps=2 saves at steps 2, 4, 6, 8 and not at an epoch's end (Lightning's rule); top-k kept the newest
    assert results[0]["sync_run"] == results[0]["async_run"] == ["last-step=6.ckpt", "last.ckpt"]  # epochs end at steps 3, 6, 9
