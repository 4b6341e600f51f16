"""benchmarks/models.py runs at tiny sizes on a CPU (the GPU run uses the same code), and the
Trainer and the raw loop train the same models there."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_tiny_models_benchmark_runs(capsys):
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "benchmarks" / "models.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--tiny", "--no-compile", "--rounds", "1", "--steps", "2"])
    assert {(r["model"], r["precision"]) for r in rows} == {(m, p) for m in ("resnet", "gpt") for p in ("fp32", "bf16", "amp")}
    assert all(r["raw"] > 0 and r["trainer"] > 0 for r in rows)
    assert "| resnet | fp32 | False |" in capsys.readouterr().out
