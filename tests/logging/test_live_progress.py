"""What a run shows off a terminal (lines instead of the bar), the last step's scalars when a
run ends between logging steps, and the `epoch` scalar beside every logged value."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.reference import loader, make_data, make_model
from trainer import Trainer
from trainer.logging.live import LineProgress, wants_lines

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
from tests.helpers.reference import loader, make_data, make_model
from trainer import Trainer
extra = eval(sys.argv[1])
trainer = Trainer(max_epochs=3, logger=False, enable_checkpointing=False, device="cpu", log_every_n_steps=4, **extra)
trainer.fit(make_model(lr=0.01), loader(make_data(37)), loader(make_data(12, seed=3), shuffle=False))
"""


def run_redirected(tmp_path: Path, extra: str = "{}") -> str:
    """The script with stdout and stderr going to a file, as under SLURM, CI or nohup."""
    log = tmp_path / "train.log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", SCRIPT, extra], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=120)
    return log.read_text()


def test_output_to_a_file_is_a_few_whole_lines_with_the_metrics(tmp_path):
    text = run_redirected(tmp_path)
    assert "\r" not in text and "\x1b[" not in text
    lines = text.splitlines()
    assert len(lines) == 3, text  # one per epoch: 30 steps in well under 30 s
    for epoch, line in enumerate(lines):
        fields = line.split(" | ")
        assert fields[0] == f"end of epoch {epoch}" and fields[1].startswith(f"step {10 * (epoch + 1)}/30")
        assert re.search(r"\| loss [-\d.e+]+ \|", line) and re.search(r"\| val/loss [-\d.e+]+ \|", line), line
        assert re.search(r"\| [\d,]+ samples/s \|", line) and "elapsed " in line
    assert "ETA " in lines[0] and "ETA " not in lines[-1]  # nothing left after the last step


def test_lines_every_n_steps(tmp_path):
    text = run_redirected(tmp_path, "{'progress_lines': {'every_n_steps': 4, 'every_seconds': None}}")
    steps = [int(re.search(r"step (\d+)/", line).group(1)) for line in text.splitlines()]  # type: ignore[union-attr]
    # every 4 steps counted from the last line; epoch ends write their own
    assert steps == [4, 8, 10, 14, 18, 20, 24, 28, 30], text


def test_where_lines_are_chosen():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_lines(None, io.StringIO()) and not wants_lines(None, Terminal())
    assert wants_lines(True, Terminal()) and wants_lines({"every_n_steps": 3}, Terminal())
    assert not wants_lines(False, io.StringIO())


def test_lines_by_time_with_a_clock():
    now = [0.0]
    out = io.StringIO()
    lines = LineProgress(every_seconds=10, stream=out, clock=lambda: now[0])
    step = [0]
    lines.status = lambda: {"step": step[0], "epoch": 0, "total_steps": 100}
    lines.start_train_epoch(0, 100)
    for _ in range(40):
        step[0] += 1
        now[0] += 1.0
        if lines.due(now[0], step[0]):
            lines.set_postfix({"loss": 1.0 / step[0]})
    written = out.getvalue().splitlines()
    assert [line.split(" | ")[1] for line in written] == ["step 10/100 (10%)", "step 20/100 (20%)", "step 30/100 (30%)",
                                                         "step 40/100 (40%)"]
    assert written[0].endswith("elapsed 0:00:10 | ETA 0:01:30")


def test_the_last_step_is_written_when_the_run_ends_between_logging_steps(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = Trainer(max_epochs=2, log_every_n_steps=4, enable_progress_bar=False, device="cpu", root_dir=tmp_path)
    trainer.fit(make_model(lr=0.01), loader(make_data(37)), loader(make_data(12, seed=3), shuffle=False))
    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    series = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert [s for s, _ in series["train/loss"]] == [4, 8, 12, 16, 20]  # 20: the end, between 16 and 24
    assert [s for s, _ in series["train/mse"]] == [4, 8, 12, 16, 20]
    assert trainer.logged_metrics["train/loss"] == series["train/loss"][-1][1]
    # `epoch` beside every write, as Lightning writes it: the training steps' and the validations'
    epochs = dict(series["epoch"])
    assert {s: epochs[s] for s in (4, 8, 12, 16, 20)} == {4: 0.0, 8: 0.0, 12: 1.0, 16: 1.0, 20: 1.0}
    assert [s for s, _ in series["val/loss"]] == [10, 20] and epochs[10] == 0.0
    assert "epoch" not in trainer.logged_metrics
