"""pytorch/examples' distributed/FSDP2, ported to a `Module` built on the meta device and run by
torchrun with 2 Gloo processes on CPU under `strategy=FSDP(shard_modules=["TransformerBlock"])`
(tests/helpers/scripts/fsdp2_worker.py; the script and the port in tests/helpers/examples/fsdp2.py).

The Trainer makes the meta-device model real after sharding it, as the script does by hand
(`to_empty`, then `reset_parameters()`), and the port trains to the script's weights on both ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launch import run_torchrun

WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "fsdp2_worker.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fsdp2")
    done = run_torchrun(WORKER, str(out), cwd=out)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(out / f"fsdp2_rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("port", ["port", "empty_init", "resumed"])
def test_the_meta_device_port_trains_to_the_scripts_weights_on_both_ranks(ranks: list[dict[str, Any]],
                                                                          port: str) -> None:
    """`port`: built under `torch.device("meta")`; `empty_init`: under Lightning's
    `self.trainer.init_module(empty_init=True)`, which is the meta device under FSDP; `resumed`:
    the first, stopped after 2 steps and resumed from its checkpoint (the new model made real
    again, then the checkpoint's shards and generator loaded)."""
    for rank in ranks:
        assert rank[f"{port}_global_step"] == 4
        assert rank[port].keys() == rank["script"].keys() and len(rank[port]) > 10
        for key, value in rank["script"].items():
            assert torch.equal(rank[port][key], value), key
    first, second = ranks
    assert all(torch.equal(first[port][k], second[port][k]) for k in first[port])
    assert first["built_on_meta"] and second["built_on_meta"]
    assert first["stopped_global_step"] == 2 and not all(
        torch.equal(first["stopped"][k], first["port"][k]) for k in first["port"])
