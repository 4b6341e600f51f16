"""Several nodes, on loopback: two processes on two "nodes" train to the weights of two
processes on one node.

- torchrun: two launchers (`--nnodes=2 --nproc_per_node=1`, node ranks 0 and 1) meeting at
  a c10d rendezvous on 127.0.0.1, against one launcher with `--nnodes=1 --nproc_per_node=2`;
- SLURM: two tasks whose node list names two hosts that both resolve to this machine
  (`localhost,127.0.0.1`), each the only task of its node (`SLURM_LOCALID=0` on both);
- the same job with `async_checkpointing=True` and `keep_last_checkpoints=2`.

The worker is tests/helpers/scripts/slurm_worker.py ("train": 2 epochs of 5 steps, checkpoints
under ROOT, which both "nodes" share as a cluster's filesystem is shared).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.strategies.test_slurm import BOUND_S, WORKER, _assert_equal, _base_env, _finish, _job_id
from trainer.checkpoint import load_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="Gloo on loopback, POSIX")]


def _results(out: Path) -> list[dict[str, Any]]:
    return [torch.load(out / f"train_rank{rank}.pt", weights_only=False) for rank in range(2)]


def _torchrun(out: Path, *launcher: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launcher, str(WORKER), "train", str(out), str(out / "runs")]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("one_node")
    started = time.monotonic()
    done = subprocess.run(_torchrun(out, "--standalone", "--nnodes=1", "--nproc_per_node=2"), cwd=out, env=_base_env(out),
                          capture_output=True, text=True, timeout=BOUND_S)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"\ntorchrun, one node x 2 processes: {time.monotonic() - started:.1f} s")
    return _results(out)


def test_two_torchrun_nodes_train_to_the_weights_of_one_node(one_node, tmp_path):
    port = _job_id() - 3_000_000 + 10000  # a free port
    launchers = []
    started = time.monotonic()
    for node in range(2):
        rendezvous = ["--nnodes=2", "--nproc_per_node=1", f"--node_rank={node}", "--rdzv_backend=c10d",
                      f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=two-nodes", "--local_addr=127.0.0.1",
                      f"--rdzv_conf=is_host={'true' if node == 0 else 'false'}", "--max_restarts=0"]
        launchers.append(subprocess.Popen(_torchrun(tmp_path, *rendezvous), cwd=tmp_path, env=_base_env(tmp_path),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for code, _, err in _finish(launchers):
        assert code == 0, err[-4000:]
    print(f"\ntorchrun, two nodes x 1 process: {time.monotonic() - started:.1f} s")
    two_nodes = _results(tmp_path)
    for rank in range(2):
        assert two_nodes[rank]["world_size"] == 2 and two_nodes[rank]["global_step"] == one_node[rank]["global_step"] == 10
        _assert_equal(two_nodes[rank]["weights"], one_node[rank]["weights"])
    [last] = (tmp_path / "runs").glob("**/last.ckpt")  # written once, by rank 0
    assert load_checkpoint(last)["loop"]["global_step"] == 10 and len(load_checkpoint(last)["rng"]) == 2


def _two_slurm_nodes(out: Path, *options: str) -> tuple[int, list[tuple[int, str, str]]]:
    job, processes = _job_id(), []
    for rank in range(2):
        env = _base_env(out)
        env.update(SLURM_JOB_ID=str(job), SLURM_NTASKS="2", SLURM_PROCID=str(rank), SLURM_LOCALID="0", SLURM_NODEID=str(rank),
                   SLURM_NNODES="2", SLURM_JOB_NUM_NODES="2", SLURM_NODELIST="localhost,127.0.0.1",
                   SLURM_TASKS_PER_NODE="1(x2)", SLURM_NTASKS_PER_NODE="1")
        processes.append(subprocess.Popen([sys.executable, str(WORKER), "train", str(out), str(out / "runs"), *options],
                                          cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return job, _finish(processes)


def test_two_slurm_tasks_on_two_nodes_train_to_the_weights_of_one_node(one_node, tmp_path):
    started = time.monotonic()
    job, results = _two_slurm_nodes(tmp_path)
    for code, out, err in results:
        assert code == 0, err[-4000:]
    print(f"\nsrun, two nodes x 1 task: {time.monotonic() - started:.1f} s")
    two_nodes = _results(tmp_path)
    for rank in range(2):
        assert (two_nodes[rank]["rank"], two_nodes[rank]["world_size"], two_nodes[rank]["strategy"]) == (rank, 2, "DDP")
        _assert_equal(two_nodes[rank]["weights"], one_node[rank]["weights"])
    assert [p.name for p in (tmp_path / "runs" / "default").iterdir()] == [f"slurm-{job}"]  # the job's run folder


def test_background_checkpoint_writes_on_two_nodes_change_nothing_but_when_files_are_written(one_node, tmp_path):
    _, results = _two_slurm_nodes(tmp_path, "async=on", "keep=2")
    for code, out, err in results:
        assert code == 0, err[-4000:]
    two_nodes = _results(tmp_path)
    for rank in range(2):
        _assert_equal(two_nodes[rank]["weights"], one_node[rank]["weights"])
    [folder] = (tmp_path / "runs" / "default").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["last-step=5.ckpt", "last.ckpt"]
    assert load_checkpoint(folder / "last.ckpt")["loop"]["global_step"] == 10
    assert load_checkpoint(folder / "last-step=5.ckpt")["loop"]["global_step"] == 5
