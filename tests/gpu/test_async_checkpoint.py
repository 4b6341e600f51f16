"""Async checkpoints on a GPU: the staged copy is page-locked at exactly the checkpoint's size
and unlocked when the pool is cleared (fit's end), and an async fit's last.ckpt equals a
synchronous one's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.helpers.checkpoints import shuffled
from tests.helpers.reference import make_data, make_model
from tests.gpu._references import GPU
from trainer import Trainer
from trainer.checkpoint import load_checkpoint
from trainer.checkpoint.background import StagingPool, stage

pytestmark = GPU


def test_gpu_tensors_are_staged_page_locked_at_their_exact_size_and_unlocked_by_clear():
    weight = torch.randn(1000, 3, device="cuda")  # 12,000 bytes: the pinned cache would take 16 KiB
    state = {"w": weight, "tied": weight, "view": weight[5:9], "step": torch.tensor(7, device="cuda")}
    pool = StagingPool()
    copy = stage(state, pool)
    assert all(t.device.type == "cpu" and t.is_pinned() for t in copy.values())
    assert copy["w"].untyped_storage().data_ptr() == copy["view"].untyped_storage().data_ptr() and copy["tied"] is copy["w"]
    assert torch.equal(copy["w"], weight.cpu()) and torch.equal(copy["view"], weight[5:9].cpu()) and int(copy["step"]) == 7
    assert pool.page_locked_bytes == weight.untyped_storage().nbytes() + state["step"].untyped_storage().nbytes()
    pool.give_back()
    again = stage(state, pool)  # reused: nothing new locked
    assert again["w"].untyped_storage().data_ptr() == copy["w"].untyped_storage().data_ptr()
    assert pool.page_locked_bytes == weight.untyped_storage().nbytes() + state["step"].untyped_storage().nbytes()
    pool.clear()
    assert pool.page_locked_bytes == 0 and not copy["w"].is_pinned() and torch.equal(copy["w"], weight.cpu())


def test_an_async_fit_on_cuda_writes_the_last_checkpoint_a_sync_fit_writes(tmp_path: Path):
    states: list[dict[str, Any]] = []
    for asynchronous in (False, True):
        model = make_model(lr=0.01)
        torch.manual_seed(1)
        run = Trainer(device="cuda", max_epochs=2, logger=False, enable_progress_bar=False, root_dir=tmp_path / str(asynchronous),
                      run_name="r", async_checkpointing=asynchronous)
        run.fit(model, shuffled(make_data()))
        states.append(load_checkpoint(run.log_dir / "last.ckpt"))
        pool = run._run.checkpoints._files.background.pool
        assert pool.page_locked_bytes == 0 and not pool._free  # released when fit ended
    a, b = states
    assert a["module"].keys() == b["module"].keys()
    assert all(torch.equal(a["module"][k], b["module"][k]) for k in a["module"])
    sa, sb = a["optimizers"][0]["state"]["state"], b["optimizers"][0]["state"]["state"]
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i] if torch.is_tensor(sa[i][k]))
