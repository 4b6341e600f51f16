"""`Trainer(devices=N)` from a plain `python script.py` (tests/helpers/scripts/devices_worker.py):
this process becomes rank 0 and starts the others through torch's elastic multiprocessing;
under torchrun nothing changes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "devices_worker.py"
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID")


def _env(threads: str | None = "1") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV and k != "OMP_NUM_THREADS"}
    env.update(PYTHONPATH=str(ROOT), **({"OMP_NUM_THREADS": threads} if threads else {}))
    return env


def _run(command: list[str], cwd: Path, threads: str | None = "1") -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=_env(threads), capture_output=True, text=True, timeout=180)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_devices_2_from_a_plain_script_equals_torchrun(tmp_path):
    """Run as a user runs them, without OMP_NUM_THREADS: each process gets torchrun's one CPU
    thread (not every core's: N processes would share the cores N times over), so the weights
    are torchrun's. The worker also builds a DistributedSampler(dataset) before fit: the
    Trainer made the process group when it was built."""
    plain = _run([sys.executable, str(WORKER), str(tmp_path), "plain"], tmp_path, threads=None)
    assert plain.returncode == 0, plain.stderr[-4000:]
    launched = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
                     str(tmp_path), "torchrun"], tmp_path, threads=None)
    assert launched.returncode == 0, launched.stderr[-4000:]
    load = lambda name: torch.load(tmp_path / name, weights_only=True)  # noqa: E731
    ranks = [load("plain_rank0.pt"), load("plain_rank1.pt")]
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]  # both ranks ran, in one group
    torchrun = [load("torchrun_rank0.pt"), load("torchrun_rank1.pt")]
    assert [(r["threads"], r["omp"]) for r in ranks] == [(r["threads"], r["omp"]) for r in torchrun] == [(1, "1")] * 2
    reference = torchrun[0]["weights"]
    for rank in ranks:
        for key, value in reference.items():
            assert torch.equal(rank["weights"][key], value), key
    assert not _alive(ranks[1]["pid"])  # rank 1 ended with the job: nothing left behind


@pytest.mark.slow
def test_devices_2_keeps_the_user_s_omp_num_threads(tmp_path):
    done = _run([sys.executable, str(WORKER), str(tmp_path), "plain"], tmp_path, threads="2")
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [torch.load(tmp_path / f"plain_rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [(r["threads"], r["omp"]) for r in ranks] == [(2, "2")] * 2


@pytest.mark.slow
def test_a_failing_rank_ends_the_job_with_an_error(tmp_path):
    done = _run([sys.executable, str(WORKER), str(tmp_path), "fail", "1"], tmp_path)  # bounded by the timeout
    assert done.returncode != 0
    assert "rank 1 fails on purpose" in done.stderr
    # its exit code is 1, or -6 when Gloo aborts it as rank 0 tears down the group first
    assert re.search(r"devices=N: rank 1 \(exit code (1|-6)\) failed", done.stderr), done.stderr[-2000:]


def test_devices_without_a_script_says_what_to_do(tmp_path):
    code = "from trainer import Trainer; Trainer(devices=2, device='cpu')"
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode != 0
    assert "it was not started from a script" in done.stderr and "torchrun --nproc_per_node=2" in done.stderr


def test_devices_must_match_torchrun_and_be_a_count(monkeypatch):
    with pytest.raises(ValueError, match="devices"):
        Trainer(devices=0)
    with pytest.raises(ValueError, match="expected a number of processes"):
        Trainer(devices="two")
    with pytest.raises(ValueError, match="a list picks one GPU here"):
        Trainer(devices=[0, 1])
    with pytest.raises(ValueError, match="'single' trains in one process"):
        Trainer(devices=2, strategy="single")
    assert Trainer(devices="auto", logger=False).args.devices == 1
    for name, value in dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"devices=3\) under torchrun with 2 process\(es\).*--nproc_per_node=3"):
        Trainer(devices=3, device="cpu")


def test_devices_under_pytest_never_starts_pytest_again():
    with pytest.raises(ValueError, match="would start 1 more copies of pytest"):
        Trainer(devices=2, device="cpu")
