"""The resume check under 2 Gloo processes, loaders read in the main process (one torchrun launch for
every assertion): exact on a correct pipeline; on a DistributedSampler whose epoch a user's
batch sampler counts in memory, every rank reports the same first bad batch and the cause; the
accumulation check across the two ranks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.launch import ROOT, run_torchrun
from tests.helpers.pipelines import FIRST_AFTER_RESUME

WORKER = ROOT / "tests" / "helpers" / "scripts" / "check_resume_worker.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("check_resume_ddp")
    done = run_torchrun(WORKER, str(out), cwd=out, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json", "rank1.json"]  # the check left no folder here
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_the_check_trains_under_two_processes_and_a_correct_pipeline_is_exact(ranks):
    assert [r["world"] for r in ranks] == [2, 2]
    assert all(r["correct"]["exact"] for r in ranks), ranks[0]["correct"]["text"]


def test_a_broken_pipeline_gives_every_rank_the_same_report_naming_the_batch_and_the_cause(ranks):
    reports = [r["broken"] for r in ranks]
    assert reports[0] == reports[1]
    report = reports[0]
    assert not report["exact"] and tuple(report["first_bad_batch"]) == FIRST_AFTER_RESUME
    assert report["rank"] in (0, 1) and f"on rank {report['rank']}" in report["text"]
    assert any("DistributedSampler at the loader's batch_sampler.base" in c for c in report["causes"])


def test_the_accumulation_check_across_ranks_flags_the_per_micro_batch_mean_and_passes_num_items(ranks):
    mean, items = ranks[0]["accumulation"]["True"], ranks[0]["accumulation"]["False"]
    assert [r["accumulation"] for r in ranks] == [ranks[0]["accumulation"]] * 2  # one verdict on every rank
    assert mean["ranks"] == items["ranks"] == 2 and "on each of 2 ranks" in mean["text"]
    assert not mean["ok"] and abs(mean["ratio"] - 1) > 0.01 and "num_items" in mean["text"]
    assert items["ok"] and abs(items["ratio"] - 1) < 1e-5, items["text"]
