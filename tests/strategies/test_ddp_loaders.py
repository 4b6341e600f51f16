"""Several loaders per stage, and a Mixture, under DDP: processes launched by torchrun on CPU (Gloo).

Each rank reads its own share of every loader (a DistributedSampler each), a combined training
epoch is as long on both ranks (no hang), every rank ends with the same weights, and each
validation and test loader's epoch mean is reduced over the ranks: it equals the mean over that
loader's whole dataset, computed in one process with the final weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.launch import ROOT, run_torchrun

WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "loaders_worker.py"


def _torchrun(phase: str, out: Path, timeout: float = 240) -> list[dict[str, Any]]:
    done = run_torchrun(WORKER, phase, str(out), cwd=out, timeout=timeout)
    assert done.returncode == 0, f"torchrun {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    name = "loaders" if phase == "main" else phase
    return [torch.load(out / f"{name}_rank{rank}.pt", weights_only=False) for rank in range(2)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _torchrun("main", tmp_path_factory.mktemp("ddp_loaders"))


def test_every_rank_reads_its_share_of_each_loader_and_ends_with_the_same_weights(ranks: list[dict[str, Any]]) -> None:
    first, second = ranks
    assert first["weights"].keys() == second["weights"].keys()
    assert all(torch.equal(first["weights"][k], second["weights"][k]) for k in first["weights"])
    assert first["num_training_batches"] == second["num_training_batches"] == 4  # 32 / 2 ranks / 4: the longest
    for rank in ranks:
        assert len(rank["seen"]) == 8 and all(sorted(batch) == ["long", "short"] for batch in rank["seen"])
    for epoch in range(2):  # the ranks' shares of the long loader split its dataset
        shares = [sorted(i for batch in rank["seen"][epoch * 4:(epoch + 1) * 4] for i in batch["long"]) for rank in ranks]
        assert sorted(shares[0] + shares[1]) == list(range(32))
    assert first["num_val"] == second["num_val"] == [2, 2] and first["num_test"] == [2, 1]


def test_each_loaders_epoch_mean_is_reduced_over_the_ranks(ranks: list[dict[str, Any]]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("loaders_worker_data", ROOT / "tests" / "helpers" / "scripts" / "loaders_worker.py")
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    layer = torch.nn.Linear(3, 1)
    layer.load_state_dict({k.removeprefix("layer."): v for k, v in ranks[0]["weights"].items()})

    def mean_loss(n: int, seed: int) -> float:
        x, y, _ = worker.regression(n, seed).tensors
        with torch.no_grad():
            return float(F.mse_loss(layer(x), y, reduction="none").mean())

    expected_val = {"val_loss/dataloader_idx_0": mean_loss(16, 2), "val_loss/dataloader_idx_1": mean_loss(8, 3)}
    for rank in ranks:
        assert rank["val"].keys() == expected_val.keys()
        assert all(abs(rank["val"][k] - v) < 1e-5 for k, v in expected_val.items())
        assert [list(d) for d in rank["test"]] == [["test_loss/dataloader_idx_0"], ["test_loss/dataloader_idx_1"]]
        assert abs(rank["test"][0]["test_loss/dataloader_idx_0"] - mean_loss(20, 4)) < 1e-5
        assert abs(rank["test"][1]["test_loss/dataloader_idx_1"] - mean_loss(8, 5)) < 1e-5
    assert ranks[0]["test"] == ranks[1]["test"]


def test_a_mixture_resumed_on_two_processes_continues_each_ranks_sequence(tmp_path: Path) -> None:
    """A Mixture under DDP: the same source on both ranks at every step (one seeded draw), each rank
    its own share of that source; a checkpoint at step 4 (the books source, 2 batches per rank,
    started again by then) continued in a new 2-process run gives each rank the same sequence and
    the weights of the run that never stopped."""
    whole = _torchrun("mixture", tmp_path)
    resumed = _torchrun("mixture_resume", tmp_path)
    assert [name for name, _ in whole[0]["seen"]] == [name for name, _ in whole[1]["seen"]]
    assert [name for name, _ in whole[0]["seen"][:4]].count("books") > 2
    for rank in range(2):
        assert resumed[rank]["seen"] == whole[rank]["seen"][4:]
        assert all(torch.equal(resumed[rank]["weights"][k], whole[rank]["weights"][k]) for k in whole[rank]["weights"])


def test_loaders_of_different_lengths_on_each_rank_finish_with_every_ranks_batches(tmp_path: Path) -> None:
    """Three validation loaders whose lengths differ per rank (loader 1: 3 batches on rank 0, 1 on
    rank 1; loader 2: none on rank 1) finish in fit (with a sanity check) and in validate, each
    loader's mean over the batches every rank ran, the same on both ranks. A metric object logged
    for loader 2, which rank 1 never runs, would leave rank 0 waiting in its synchronisation: both
    ranks raise a clear error instead (and so with one loader that gives rank 1 no batch)."""
    pytest.importorskip("torchmetrics")
    ranks = _torchrun("uneven", tmp_path, timeout=90)  # a hang fails the test
    first, second = ranks
    assert all(torch.equal(first["weights"][k], second["weights"][k]) for k in first["weights"])
    assert first["validate"] == second["validate"]
    names = [[f"val_loss/dataloader_idx_{index}"] for index in range(3)]
    assert [list(d) for d in first["validate"]] == names  # rank 1 files loader 2's value under loader 2 too
    import importlib.util

    spec = importlib.util.spec_from_file_location("loaders_worker_uneven", WORKER)
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    layer = torch.nn.Linear(3, 1)
    layer.load_state_dict({k.removeprefix("layer."): v for k, v in first["weights"].items()})

    def mean_loss(n: int, seed: int) -> float:  # every sample once: the ranks' shares together
        x, y, _ = worker.regression(8, seed).tensors
        with torch.no_grad():
            return float(F.mse_loss(layer(x[:n]), y[:n], reduction="none").mean())

    expected = [mean_loss(8, 2), mean_loss(8, 3), mean_loss(4, 4)]
    for index, value in enumerate(expected):
        assert abs(first["validate"][index][f"val_loss/dataloader_idx_{index}"] - value) < 1e-5
        assert abs(first["fit"][f"val_loss/dataloader_idx_{index}"] - value) < 1e-5
        assert first["fit"] == second["fit"]
    for rank in ranks:
        assert "'test_mean/dataloader_idx_2'" in rank["error"] and "rank(s) [1]" in rank["error"]
        assert "'test_mean'" in rank["single"] and "rank(s) [1]" in rank["single"]  # one such loader alike
