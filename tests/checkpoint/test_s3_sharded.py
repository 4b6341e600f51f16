"""FSDP's sharded checkpoints in a bucket (two Gloo processes, a real S3 server: moto's server mode;
skipped with the reason where s3fs or moto is missing): every rank writes its shards through DCP's
fsspec writer into a fresh version folder, rank 0 commits it last; a run stopped mid-epoch resumes
with ckpt_path="last" bit-identically, with synchronous and background saves (those commit on the
writer's thread, after both ranks' shards are in), past a newer save cut short before its commit
and a newer committed checkpoint that lost a shard file; export_weights turns the bucket's
checkpoint into one plain file of the whole weights. Under DDP the bucket holds single-file
checkpoints, written by rank 0, that resume exactly too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launch import run_torchrun
from tests.helpers.s3 import S3Server, running_server

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")]

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "scripts" / "fsdp_s3_worker.py"
DDP_WORKER = WORKER.with_name("ddp_s3_worker.py")


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with running_server() as running:
        yield running


def _ranks_of(worker: Path, server: S3Server, tmp_path: Path) -> list[dict[str, Any]]:
    """Runs `worker` on 2 processes against the bucket's `run` prefix; each rank's results."""
    done = run_torchrun(worker, f"s3://{server.bucket()}/run", str(tmp_path), cwd=tmp_path, timeout=150)
    assert done.returncode == 0, f"{worker.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_fsdp_saves_to_a_bucket_and_resumes_the_newest_committed_version_exactly(server: S3Server, tmp_path: Path) -> None:
    results = _ranks_of(WORKER, server, tmp_path)
    zero = results[0]
    for mode in ("sync", "async"):
        assert zero[f"{mode}/stopped_at"] == results[1][f"{mode}/stopped_at"] < zero[f"{mode}/resumed_step"]
        # the save at the stop is committed when fit returns (a background one was waited for)
        assert results[0][f"{mode}/committed_step"] == results[1][f"{mode}/committed_step"] == zero[f"{mode}/stopped_at"]
        at_stop = zero[f"{mode}/at_stop"]
        # nothing written locally: the commit object, DCP's index and both ranks' shards in the bucket
        assert "last.ckpt" in at_stop, at_stop
        versions = [name.rpartition("/")[0] for name in at_stop if name.startswith("last.ckpt.d/") and name.endswith("/.metadata")]
        # replaced versions are removed once a newer one is committed; last.ckpt's and its kept copy's stay
        kept = {name[len("last-step="):-len(".ckpt")] for name in at_stop if name.startswith("last-step=")}
        assert sorted(v.split("/")[1].partition("-")[0] for v in versions) == sorted(
            kept | {str(zero[f"{mode}/stopped_at"])}, key=int), at_stop
        for folder in versions:
            assert {f"{folder}/__0_0.distcp", f"{folder}/__1_0.distcp"} <= set(at_stop)
        assert not list(Path(tmp_path).rglob("*.distcp"))
        exported, cut = zero[f"{mode}/exported"], zero[f"{mode}/cut"]
        assert exported.keys() == cut.keys() and all(torch.equal(exported[k], cut[k]) for k in cut)
        for rank, result in enumerate(results):
            whole, resumed = result[f"{mode}/whole"], result[f"{mode}/resumed"]
            assert whole.keys() == resumed.keys()
            for key in whole:
                assert torch.equal(whole[key], resumed[key]), f"{mode}, rank {rank}: {key} differs after the resume"
            assert result[f"{mode}/resumed_from"] == f"{zero[f'{mode}/folder']}/last.ckpt", result[f"{mode}/resumed_from"]
            assert result[f"{mode}/resumed_step"] == zero[f"{mode}/resumed_step"]
    # background saves: committed by rank 0 on the writer's thread, once both ranks' shards were in
    commits = zero["async/commits"]
    assert len([name for _, name, _ in commits if name == "last.ckpt"]) >= 3, commits  # an epoch's end, the stop, the resumed run's
    for thread, name, files in commits:
        assert thread.startswith("checkpoint-writer") and {".metadata", "__0_0.distcp", "__1_0.distcp"} <= set(files), \
            (thread, name, files)
    # before the sync resume: an uncommitted newest version of last.ckpt, and newer.ckpt committed
    # but missing a shard file; "last" read neither, and the next commit removed the uncommitted one
    before, damaged = zero["before_resume"], zero["damaged_version"]
    assert len([name for name in before if name.startswith("last.ckpt.d/") and name.endswith("/.metadata")]) == 3, before
    assert f"checkpoints/{damaged}/__1_0.distcp" not in before and "checkpoints/newer.ckpt" in before, before
    after = zero["sync/at_end"]
    uncommitted = {name.rpartition("/")[0] for name in before if name.startswith("last.ckpt.d/")} - \
        {name.rpartition("/")[0] for name in zero["sync/at_stop"]}
    assert uncommitted and not any(name.startswith(tuple(uncommitted)) for name in after), (uncommitted, after)


def test_ddp_saves_single_files_to_a_bucket_and_resumes_exactly(server: S3Server, tmp_path: Path) -> None:
    results = _ranks_of(DDP_WORKER, server, tmp_path)
    zero = results[0]
    stopped = zero["stopped_at"]
    assert results[1]["stopped_at"] == stopped < zero["resumed_step"] == results[1]["resumed_step"]
    assert zero["committed_step"] == results[1]["committed_step"] == stopped
    # single objects (no version folders), nothing written locally
    assert "last.ckpt" in zero["at_stop"] and not any(".ckpt.d/" in name for name in zero["at_stop"]), zero["at_stop"]
    assert not list(Path(tmp_path).rglob("*.ckpt"))
    for rank, result in enumerate(results):
        assert result["resumed_from"] == f"{zero['folder']}/last.ckpt", result["resumed_from"]
        whole, resumed = result["whole"], result["resumed"]
        assert whole.keys() == resumed.keys()
        for key in whole:
            assert torch.equal(whole[key], resumed[key]), f"rank {rank}: {key} differs after the resume"
