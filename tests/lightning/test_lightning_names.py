"""Lightning's names that projects import, answering as Lightning's do: the rank-zero
helpers (`rank_zero_only.rank` fixed at import, set to the global rank by a multi-process
strategy, `rank_prefixed_message`) and the strategy classes for `isinstance` checks. Each
check runs Lightning's own object beside ours."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                   "SLURM_NTASKS", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT")

RANK_AT_IMPORT = """
import json, os, sys
from {package} import rank_zero_only
seen = [rank_zero_only.rank]
os.environ["RANK"] = "0"  # too late: the rank was fixed at import, as Lightning's
calls = []
rank_zero_only(calls.append)(1)
print(json.dumps({{"rank": seen[0], "after": rank_zero_only.rank, "calls": calls}}))
"""


def _python(code: str, **env: str) -> Any:
    clean = {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}
    clean.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"LOCAL_RANK": "3", "SLURM_PROCID": "0"}])
def test_rank_zero_only_rank_is_set_on_import_as_lightning(env: dict[str, str]) -> None:
    """Lightning: fabric/utilities/rank_zero.py sets `rank_zero_only.rank` when imported
    (RANK, LOCAL_RANK, SLURM_PROCID, JSM_NAMESPACE_RANK; else 0); later changes to the
    environment don't move it."""
    ours = _python(RANK_AT_IMPORT.format(package="trainer.utilities.rank_zero"), **env)
    theirs = _python(RANK_AT_IMPORT.format(package="lightning.pytorch.utilities.rank_zero"), **env)
    assert ours == theirs
    assert ours["rank"] == int(next(iter(env.values()), "0"))


def test_rank_prefixed_message_and_the_other_rank_zero_names() -> None:
    from lightning.pytorch.utilities import rank_zero as theirs

    from trainer.utilities import rank_zero as ours

    for rank in (None, 0, 3):
        assert ours.rank_prefixed_message("saving", rank) == theirs.rank_prefixed_message("saving", rank)
    cache = ours.WarningCache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.warn("once")
        cache.warn("once")
        ours.rank_zero_deprecation("old")
    assert [str(w.message) for w in caught] == ["once", "old"]
    assert issubclass(caught[1].category, DeprecationWarning)
    assert caught[1].category.__name__ == theirs.LightningDeprecationWarning.__name__


GLOBAL_RANK = """
import json, os
import torch.distributed as dist
from trainer.utilities.rank_zero import rank_zero_only
imported = rank_zero_only.rank
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group(backend="gloo", rank=0, world_size=1)
import trainer
t = trainer.Trainer(strategy="ddp", accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
print(json.dumps({"imported": imported, "global": t.global_rank, "now": rank_zero_only.rank}))
dist.destroy_process_group()
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_a_multi_process_strategy_sets_rank_zero_only_to_the_global_rank() -> None:
    """Lightning's DDP/FSDP strategies set `rank_zero_only.rank = self.global_rank` once the
    ranks are known. Here the environment says rank 5 (a stray SLURM_PROCID), the process group
    says rank 0: the group wins once the Trainer is built."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = _python(GLOBAL_RANK, SLURM_PROCID="5", PORT=str(port))
    assert seen == {"imported": 5, "global": 0, "now": 0}


def _strategy_answers(strategy: Any, names: Any) -> dict[str, Any]:
    """What a project asks of `trainer.strategy`: isinstance against every public base name, and
    the attributes Lightning code reads."""
    import lightning.pytorch.strategies as lightning_names

    kinds = {name: isinstance(strategy, getattr(names, name)) for name in lightning_names.__all__}
    attributes = {name: str(getattr(strategy, name)) for name in ("root_device", "is_global_zero")}
    if kinds["ParallelStrategy"]:
        attributes.update({name: getattr(strategy, name) for name in ("world_size", "global_rank", "local_rank", "node_rank")})
    return {"kinds": kinds, "attributes": attributes}


def test_every_public_strategy_name_of_lightning_is_importable() -> None:
    import lightning.pytorch.strategies as theirs

    import trainer.strategies as ours

    missing = [name for name in theirs.__all__ if not isinstance(getattr(ours, name, None), type)]
    assert not missing, f"not importable from trainer.strategies as classes: {missing}"


def test_a_one_device_trainer_strategy_answers_as_lightnings() -> None:
    import lightning.pytorch as pl
    import lightning.pytorch.strategies as theirs

    import trainer
    import trainer.strategies as ours

    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
    mine = trainer.Trainer(accelerator="cpu", devices=1, **quiet).strategy
    other = pl.Trainer(accelerator="cpu", devices=1, **quiet).strategy
    assert _strategy_answers(mine, ours) == _strategy_answers(other, theirs)
    assert isinstance(ours.SingleDeviceStrategy("cpu"), ours.SingleDeviceStrategy)
    assert mine.reduce(torch.tensor(3.0)) == other.reduce(torch.tensor(3.0))
    assert mine.broadcast({"a": 1}) == other.broadcast({"a": 1})
    assert torch.equal(mine.all_gather(torch.ones(2)), other.all_gather(torch.ones(2)))
    assert mine.reduce_boolean_decision(False) == other.reduce_boolean_decision(False)
    mine.barrier("named")


def test_multi_process_strategy_classes_answer_isinstance_as_lightnings() -> None:
    """Built but not yet bound to a process group (Lightning's are bound in fit): the class
    hierarchy is Lightning's, and the not-offered ones refuse with what to use."""
    import lightning.pytorch.strategies as theirs

    import trainer.strategies as ours

    pairs = [(ours.DDPStrategy(), theirs.DDPStrategy()), (ours.FSDPStrategy(), theirs.FSDPStrategy()),
             (ours.DDP(), theirs.DDPStrategy()), (ours.FSDP(), theirs.FSDPStrategy())]  # strategy="ddp" / "fsdp"
    for mine, other in pairs:
        assert {n: isinstance(mine, getattr(ours, n)) for n in theirs.__all__} == \
               {n: isinstance(other, getattr(theirs, n)) for n in theirs.__all__}, mine
    assert issubclass(ours.DeepSpeedStrategy, ours.DDPStrategy) and issubclass(ours.ModelParallelStrategy, ours.ParallelStrategy)
    for name, hint in (("DeepSpeedStrategy", "strategy='fsdp'"), ("ModelParallelStrategy", "strategy='fsdp'")):
        with pytest.raises(ValueError, match=hint):
            getattr(ours, name)()


DDP_ANSWERS = """
import json, os
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group(backend="gloo", rank=0, world_size=1)
import lightning.pytorch as pl, lightning.pytorch.strategies as theirs
import trainer, trainer.strategies as ours
from tests.lightning.test_lightning_names import _strategy_answers
quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
mine = trainer.Trainer(strategy="ddp", accelerator="cpu", **quiet).strategy
other = pl.Trainer(strategy="ddp", accelerator="cpu", devices=1, **quiet).strategy
print(json.dumps({"ours": _strategy_answers(mine, ours), "theirs": _strategy_answers(other, theirs)}))
dist.destroy_process_group()
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_a_ddp_trainer_strategy_answers_as_lightnings() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = _python(DDP_ANSWERS, PORT=str(port))
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"]["kinds"]["ParallelStrategy"] and seen["ours"]["attributes"]["world_size"] == 1
