"""pytorch/examples' distributed examples, ported to a `Module` and run by torchrun with 2 Gloo
processes on CPU, next to each script's own loop (tests/helpers/scripts/distributed_examples_worker.py,
one launch for all; the scripts and the ports in tests/helpers/examples/).

- ddp-tutorial-series (multigpu_torchrun.py, multinode.py on one node): the port trains to the
  weights of the script's hand-written DDP Trainer on both ranks; stopped after 2 of 4 epochs
  and started again, it continues from its checkpoint to the weights of the run that never
  stopped. The script's snapshot records the epoch it has just finished as the one to start
  from, so its resumed run trains that epoch a second time.
- distributed/ddp/example.py: one DDP step on each rank's own random batch.
- distributed/minGPT-ddp: its Trainer class with its snapshots.
- distributed/FSDP2: a model built on the meta device, which the Trainer makes real after
  sharding it, as the script does by hand (`to_empty`, then `reset_parameters()`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launch import run_torchrun

WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "distributed_examples_worker.py"
LOSSES = ["cross_entropy", "mse"]

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("distributed_examples")
    done = run_torchrun(WORKER, str(out), cwd=out)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(out / f"distributed_examples_rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("loss", LOSSES)
def test_the_port_trains_to_the_scripts_weights_on_both_ranks(ranks: list[dict[str, Any]], loss: str) -> None:
    for rank in ranks:
        run = rank[loss]
        assert same(run["port_whole"]["weights"], run["script_whole"])
        assert run["port_whole"]["epochs"] == [0, 1, 2, 3] and run["port_whole"]["global_step"] == 4 * 8
    assert same(ranks[0][loss]["port_whole"]["weights"], ranks[1][loss]["port_whole"]["weights"])


def test_the_scripts_loss_leaves_the_weights_where_they_started(ranks: list[dict[str, Any]]) -> None:
    """cross_entropy over one class: zero gradients. The MSE runs move, so they compare something."""
    for rank in ranks:
        assert same(rank["cross_entropy"]["script_whole"], rank["cross_entropy"]["initial"])
        assert not same(rank["mse"]["script_whole"], rank["mse"]["initial"])


@pytest.mark.parametrize("loss", LOSSES)
def test_the_port_resumes_from_its_checkpoint_to_the_uninterrupted_weights(ranks: list[dict[str, Any]],
                                                                         loss: str) -> None:
    for rank in ranks:
        run = rank[loss]
        assert run["port_stopped"]["epochs"] == [0, 1] and run["port_resumed"]["epochs"] == [2, 3]
        assert run["port_resumed"]["global_step"] == 4 * 8
        assert same(run["port_resumed"]["weights"], run["port_whole"]["weights"])


def test_the_scripts_snapshot_trains_its_last_epoch_again(ranks: list[dict[str, Any]]) -> None:
    """EPOCHS_RUN is the epoch just finished (1 after epochs 0 and 1), and the restarted script
    runs range(EPOCHS_RUN, total): epochs 0, 1, 1, 2, 3, which is not the uninterrupted run."""
    for rank in ranks:
        run = rank["mse"]
        assert run["snapshot_epochs_run"] == 1
        assert same(run["script_resumed"], run["script_epoch_again"])
        assert not same(run["script_resumed"], run["script_whole"])


def test_ddp_example_each_ranks_own_batch_from_rank_zeros_weights(ranks: list[dict[str, Any]]) -> None:
    """distributed/ddp/example.py (the same worker): the ranks start from different weights and
    draw different batches; both runs take rank 0's weights and average the two gradients."""
    first, second = (rank["ddp_example"] for rank in ranks)
    assert not same(first["initial"], second["initial"])
    for run in (first, second):
        assert same(run["port"], run["script"]) and not same(run["port"], first["initial"])
    assert same(first["port"], second["port"])


def test_mingpt_ddp_on_two_processes_with_its_snapshot(ranks: list[dict[str, Any]]) -> None:
    """distributed/minGPT-ddp's Trainer class (tests/helpers/examples/mingpt_ddp.py), in the same
    worker: the port ends at the script's weights with the same losses on each rank, and resumed
    from its checkpoint after 2 of 3 epochs it ends there too (the script's snapshot holds no
    random state, so its resumed run's dropout differs: it ends elsewhere)."""
    for rank in ranks:
        run = rank["mingpt"]
        assert same(run["port_whole"]["weights"], run["script_whole"]["weights"])
        assert run["port_whole"]["train_losses"] == run["script_whole"]["train_losses"]
        assert run["port_whole"]["eval_losses"] == run["script_whole"]["eval_losses"]
        assert len(run["port_whole"]["train_losses"]) == 3 * 6 and len(run["port_whole"]["eval_losses"]) == 3 * 2
        assert same(run["port_resumed"]["weights"], run["port_whole"]["weights"])
        assert run["port_resumed"]["train_losses"] == run["port_whole"]["train_losses"][2 * 6:]
        assert run["script_resumed"]["train_losses"] != run["script_whole"]["train_losses"][2 * 6:]
        assert not same(run["script_resumed"]["weights"], run["script_whole"]["weights"])
    assert same(ranks[0]["mingpt"]["port_whole"]["weights"], ranks[1]["mingpt"]["port_whole"]["weights"])


@pytest.mark.parametrize("port", ["port", "empty_init", "resumed"])
def test_fsdp2_the_meta_device_port_trains_to_the_scripts_weights_on_both_ranks(ranks: list[dict[str, Any]],
                                                                                port: str) -> None:
    """`port`: built under `torch.device("meta")`; `empty_init`: under Lightning's
    `self.trainer.init_module(empty_init=True)`, which is the meta device under FSDP; `resumed`:
    the first, stopped after 2 steps and resumed from its checkpoint (the new model made real
    again, then the checkpoint's shards and generator loaded)."""
    runs = [rank["fsdp2"] for rank in ranks]
    for rank in runs:
        assert rank[f"{port}_global_step"] == 4
        assert rank[port].keys() == rank["script"].keys() and len(rank[port]) > 10
        for key, value in rank["script"].items():
            assert torch.equal(rank[port][key], value), key
    first, second = runs
    assert all(torch.equal(first[port][k], second[port][k]) for k in first[port])
    assert first["built_on_meta"] and second["built_on_meta"]
    assert first["stopped_global_step"] == 2 and not all(
        torch.equal(first["stopped"][k], first["port"][k]) for k in first["port"])
