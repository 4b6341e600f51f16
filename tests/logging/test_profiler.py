"""`Trainer(profiler=...)`: a window of optimizer steps traced into the run folder
as Chrome-trace JSON (TensorBoard's profiler view, Perfetto), with a summary; off by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Trainer


def test_two_profiled_steps_write_a_trace_with_the_models_operators(tmp_path: Path):
    trainer = Trainer(max_steps=5, root_dir=tmp_path, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, profiler={"wait": 1, "warmup": 1, "active": 2})
    trainer.fit(TinyNet(), loader(make_data()))
    traces = list((trainer.log_dir / "profiler").glob("*.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any("addmm" in n or "linear" in n for n in names)  # the model's matrix products
    assert (trainer.log_dir / "profiler" / "summary.txt").read_text().strip()


def test_no_profiler_writes_nothing(tmp_path: Path):
    Trainer(max_steps=3, root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(
        TinyNet(), loader(make_data())
    )
    assert list(tmp_path.iterdir()) == []


def test_bad_profiler_settings():
    with pytest.raises(ValueError, match="profiler"):
        Trainer(profiler={"activ": 3})
