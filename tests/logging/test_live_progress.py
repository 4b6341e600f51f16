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


LINES_EVERY_4 = {"every_n_steps": 4, "every_seconds": None}


def _fields(line: str) -> list[str]:
    """The metric names of a line, in their order (not epoch, step, samples/s, elapsed, ETA)."""
    fixed = ("epoch ", "end of epoch ", "step ", "elapsed ", "ETA ")
    return [f.rsplit(" ", 1)[0] for f in line.split(" | ") if not f.startswith(fixed) and not f.endswith("samples/s")]


def test_manual_optimization_lines_count_the_run_not_its_batches(tmp_path, capsys):
    """A GAN steps two optimizers per batch: the steps are counted as such, the percentage and
    ETA follow the run (batches of max_epochs, or max_steps), never past 100%."""
    from tests.helpers.gan import make_gan, make_points, points_loader

    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, device="cpu", progress_lines=LINES_EVERY_4)
    trainer.fit(make_gan(), points_loader(make_points(16)))  # 4 batches an epoch, 2 steps each
    lines = capsys.readouterr().err.splitlines()
    progress = [re.search(r"\| step (\d+)(/\d+)? \((\d+)%\)", line) for line in lines]
    assert all(progress), lines
    steps = [(int(m.group(1)), m.group(2), int(m.group(3))) for m in progress]  # type: ignore[union-attr]
    assert trainer.global_step == 16 and steps[-1] == (16, None, 100)  # no total: a batch may take any number of steps
    assert [(step, percent) for step, _, percent in steps] == [(step, round(100 * step / 16)) for step, _, _ in steps]
    assert all("ETA " in line for line, (_, _, percent) in zip(lines, steps) if percent < 100), lines
    capsys.readouterr()
    by_steps = Trainer(max_steps=6, logger=False, enable_checkpointing=False, device="cpu", progress_lines=LINES_EVERY_4)
    by_steps.fit(make_gan(), points_loader(make_points(16)))  # max_steps alone: the total is exact
    last = capsys.readouterr().err.splitlines()[-1]
    assert "| step 6/6 (100%) |" in last, last


def test_the_loss_is_on_every_line_from_the_first(tmp_path, capsys):
    """Lines written before the first log_every_n_steps step (here every line: 4 steps an
    epoch, interval 50) show the loss and the prog_bar metrics of the latest step."""

    class Shown(type(make_model())):  # type: ignore[misc]
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("shown", 2 * loss.detach(), prog_bar=True)
            return loss

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    trainer = Trainer(max_epochs=3, root_dir=tmp_path, device="cpu", enable_checkpointing=False)
    trainer.fit(Shown(), loader(make_data(16)))
    lines = capsys.readouterr().err.splitlines()
    lines = [line for line in lines if "epoch" in line]
    assert len(lines) == 3, lines
    for line in lines:
        values = dict(field.rsplit(" ", 1) for field in line.split(" | ")[2:] if field.startswith(("loss ", "shown ")))
        assert set(values) == {"loss", "shown"}, line
        assert float(values["shown"]) == pytest.approx(2 * float(values["loss"]), rel=1e-3)  # the same step's values


def test_fields_keep_one_order_on_every_line(tmp_path, capsys):
    """`loss` first, then the rest by name, whatever order they were logged or shown in."""

    class Many(type(make_model())):  # type: ignore[misc]
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("zeta", loss.detach(), prog_bar=True)
            self.log("alpha", loss.detach(), prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            super().validation_step(batch, batch_idx)
            self.log("val/shown", 1.0, prog_bar=True)

    trainer = Trainer(max_epochs=3, logger=False, enable_checkpointing=False, device="cpu", log_every_n_steps=6,
                      progress_lines=LINES_EVERY_4)
    trainer.fit(Many(), loader(make_data(16)), loader(make_data(8, seed=3), shuffle=False))
    lines = [line for line in capsys.readouterr().err.splitlines() if "epoch" in line]
    orders = [_fields(line) for line in lines]
    assert all(order == sorted(order, key=lambda name: (name != "loss", name)) for order in orders), lines
    assert ["loss", "alpha", "val/loss", "val/shown", "zeta"] in orders, lines
