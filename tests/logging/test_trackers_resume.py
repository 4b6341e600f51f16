"""A resumed run is the same run in every tracker, with the values of a run never interrupted.

The real libraries, offline: TensorBoard event files read back with TensorBoard's own
EventAccumulator, `metrics.csv` with the csv module, W&B in offline mode read back with W&B's
own reader of its run files (`wandb leet inspect --json`), MLflow on a SQLite store in
tmp_path read back with `MlflowClient`.

Two ways a run stops, both resumed with a new Trainer and `ckpt_path`:

- Ctrl-C after a logged step: last.ckpt is written at that step, nothing is logged after it;
- killed after the epoch's checkpoint (a `SystemExit` raised from a callback: no checkpoint
  is written, as when the process is killed), so the trackers already hold three steps after
  the checkpoint's. The resumed run also changes `max_epochs` (5 -> 3), which MLflow refuses
  to record as a changed param value.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

from trainer import Callback, Module, Trainer
from trainer.loggers import CSVLogger, MLflowLogger, TensorBoardLogger, WandbLogger, flatten_params

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TAGS = ("train/loss", "train/grad_norm", "train/lr-group0", "val/loss")  # deterministic (not the timings)
STEPS_PER_EPOCH, EPOCHS, KILLED_AT = 8, 3, 11  # the epoch's checkpoint is at step 8
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_DISABLE_GIT": "true",
           "WANDB_DISABLE_CODE": "true"}


class Line(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 5, 0.5), "interval": "step"}}


class Stop(Callback):
    """Raise `error` in on_train_batch_end of optimizer step `step` (after it was logged)."""

    def __init__(self, step: int, error: type[BaseException]) -> None:
        self.step, self.error = step, error

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise self.error()


def loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True).sin())
    return DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1)), DataLoader(data, batch_size=8)


def trackers(root: Path) -> list[Any]:
    return [
        TensorBoardLogger(root),
        CSVLogger(root),
        WandbLogger(project="resume", save_dir=root / "wandb-files", mode="offline"),
        MLflowLogger("resume", tracking_uri=f"sqlite:///{root / 'mlflow.db'}"),
    ]


def fit(root: Path, *, max_epochs: int = EPOCHS, stop: Stop | None = None, ckpt_path: str | None = None) -> Trainer:
    torch.manual_seed(0)
    model = Line()
    trainer = Trainer(root_dir=root, max_epochs=max_epochs, log_every_n_steps=1, enable_progress_bar=False,
                      logger=trackers(root), callbacks=[stop] if stop else [])
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return trainer


# ----------------------------------------------------------------------------- readers
def read_tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in TAGS}


def read_csv(path: Path) -> dict[str, list[tuple[int, float]]]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {tag: [(int(r["step"]), float(r[tag])) for r in rows if r.get(tag)] for tag in TAGS} | {
        "steps": [(int(r["step"]), 0.0) for r in rows]
    }


def read_wandb(run_dir: Path) -> tuple[dict[str, Any], dict[str, list[tuple[int, float]]]]:
    """W&B's own reader of an offline run's `.wandb` file: its run record and its history."""
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and "No such command" in done.stderr:
        pytest.skip("this wandb has no `wandb leet inspect` (its reader of offline run files)")
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    run = next(r["run"] for r in records if r["type"] == "run")
    run["config"] = {}
    for record in records:  # the hyperparameters: config updates after the run record
        if record["type"] == "config":
            run["config"].update(record["config"]["update"])
    history: dict[str, list[tuple[int, float]]] = {tag: [] for tag in TAGS}
    for record in records:
        if record["type"] == "history":
            item = record["history"]["item"]
            for tag in TAGS:
                if tag in item:
                    history[tag].append((int(item["_step"]), float(item[tag])))
    return run, history


def read_mlflow(root: Path) -> tuple[Any, dict[str, list[tuple[int, float, int]]]]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]  # one MLflow run
    run = runs[0]
    history = {tag: sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run.info.run_id, tag)) for tag in TAGS}
    return run, history


def latest_per_step(points: list[tuple[int, float, int]]) -> dict[int, float]:
    """MLflow keeps every value logged for a step: the latest one is the resumed run's."""
    latest: dict[int, tuple[int, float]] = {}
    for step, value, stamp in points:
        if step not in latest or stamp >= latest[step][0]:
            latest[step] = (stamp, value)
    return {step: value for step, (_, value) in latest.items()}


def wandb_runs(root: Path) -> list[Path]:
    return sorted((root / "wandb-files" / "wandb").glob("offline-run-*"))


# ------------------------------------------------------------------------------- tests
@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {**OFFLINE, "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("uninterrupted")
    environment = {**OFFLINE, "WANDB_DIR": str(root)}
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    try:
        trainer = fit(root)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    assert trainer.global_step == STEPS_PER_EPOCH * EPOCHS
    (run_dir,) = wandb_runs(root)
    mlflow_run, mlflow_history = read_mlflow(root)
    wandb_run, wandb_history = read_wandb(run_dir)
    return {
        "tensorboard": read_tensorboard(trainer.log_dir),
        "csv": read_csv(trainer.log_dir / "metrics.csv"),
        "wandb": wandb_history,
        "mlflow": {tag: {s: v for s, v, _ in points} for tag, points in mlflow_history.items()},
        "hparams": {
            "csv": flatten_params(yaml.safe_load((trainer.log_dir / "hparams.yaml").read_text())),
            "wandb": flatten_params({k: v for k, v in wandb_run["config"].items() if k != "_wandb"}),
            "mlflow": mlflow_run.data.params,
        },
    }


def test_the_uninterrupted_run_gives_each_tracker_the_same_values(uninterrupted: dict[str, Any]) -> None:
    steps = list(range(1, STEPS_PER_EPOCH * EPOCHS + 1))
    csv_values = uninterrupted["csv"]
    assert [s for s, _ in csv_values["train/loss"]] == steps
    assert [s for s, _ in csv_values["val/loss"]] == [STEPS_PER_EPOCH * (e + 1) for e in range(EPOCHS)]
    # Lightning's layout: one row per write, so a validation's results are a row of their own at its step
    assert sorted({s for s, _ in csv_values["steps"]}) == steps
    assert len(csv_values["steps"]) == len(steps) + len(csv_values["val/loss"])
    hparams = uninterrupted["hparams"]
    assert hparams["csv"]["trainer/max_epochs"] == EPOCHS and "trainer/precision" in hparams["csv"]
    assert hparams["wandb"] == hparams["csv"]  # the same hyperparameters in every tracker
    assert hparams["mlflow"] == {k: str(v) for k, v in hparams["csv"].items()}  # MLflow keeps params as text
    for tag in TAGS:
        assert uninterrupted["wandb"][tag] == csv_values[tag]
        assert sorted(uninterrupted["mlflow"][tag].items()) == csv_values[tag]
        assert uninterrupted["tensorboard"][tag] == [(s, pytest.approx(v, rel=1e-6)) for s, v in csv_values[tag]]


@pytest.mark.parametrize("how", ["ctrl_c", "killed_after_checkpoint"])
def test_a_resumed_run_continues_the_same_run_in_every_tracker(tmp_path: Path, uninterrupted: dict[str, Any], how: str) -> None:
    root = tmp_path / "runs"
    if how == "ctrl_c":
        with pytest.raises(KeyboardInterrupt):
            fit(root, stop=Stop(KILLED_AT, KeyboardInterrupt))
        resumed_after = KILLED_AT
    else:
        with pytest.raises(SystemExit):
            fit(root, max_epochs=5, stop=Stop(KILLED_AT, SystemExit))
        resumed_after = STEPS_PER_EPOCH
    folder = root / "default" / "version_0"
    checkpoint = torch.load(folder / "last.ckpt", weights_only=True)
    assert checkpoint["loop"]["global_step"] == resumed_after
    assert [entry["class"] for entry in checkpoint["loggers"]] == ["TensorBoardLogger", "CSVLogger", "WandbLogger", "MLflowLogger"]

    trainer = fit(root, ckpt_path=str(folder / "last.ckpt"))
    assert trainer.global_step == STEPS_PER_EPOCH * EPOCHS
    assert trainer.log_dir == folder and [p.name for p in (root / "default").iterdir()] == ["version_0"]

    # TensorBoard: one folder, two event files; the purge hides what the killed run wrote after the checkpoint
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2
    assert read_tensorboard(folder) == uninterrupted["tensorboard"]
    # CSV: one file, the rows of the uninterrupted run (none twice, none lost)
    assert [p.relative_to(root).as_posix() for p in root.rglob("*.csv")] == ["default/version_0/metrics.csv"]
    written = read_csv(folder / "metrics.csv")
    assert written["steps"] == uninterrupted["csv"]["steps"]
    assert {tag: written[tag] for tag in TAGS} == {tag: uninterrupted["csv"][tag] for tag in TAGS}
    assert not list(folder.glob(".*.tmp"))  # the atomic rewrites left nothing behind

    # W&B offline: one run id, one offline folder per process; the resumed one starts after the checkpoint
    first, second = wandb_runs(root)
    (run_a, history_a), (run_b, history_b) = read_wandb(first), read_wandb(second)
    assert run_a["run_id"] == run_b["run_id"] == checkpoint["loggers"][2]["identity"]["id"]
    assert run_b.get("resume") is True
    for tag in TAGS:
        steps_b = [s for s, _ in history_b[tag]]
        assert steps_b == sorted(set(steps_b)) and all(s > resumed_after for s in steps_b)
        assert history_b[tag] == [p for p in uninterrupted["wandb"][tag] if p[0] > resumed_after]
        assert [p for p in history_a[tag] if p[0] <= resumed_after] == [p for p in uninterrupted["wandb"][tag] if p[0] <= resumed_after]
    assert run_b["config"]["trainer"]["max_epochs"] == EPOCHS

    # MLflow: one run (read_mlflow checks); its latest value at every step is the uninterrupted run's
    run, history = read_mlflow(root)
    assert run.info.run_id == checkpoint["loggers"][3]["identity"]["run_id"] and run.info.status == "FINISHED"
    for tag in TAGS:
        assert latest_per_step(history[tag]) == uninterrupted["mlflow"][tag]
        twice = sorted({s for s, _, _ in history[tag] if sum(1 for p in history[tag] if p[0] == s) > 1})
        overlap = [s for s in range(resumed_after + 1, KILLED_AT + 1) if s in uninterrupted["mlflow"][tag]]
        assert twice == overlap  # the killed run's steps after the checkpoint: both values kept
    if how == "killed_after_checkpoint":  # max_epochs 5 -> 3: the first value stays, the new one is a tag
        assert run.data.params["trainer/max_epochs"] == "5"
        assert run.data.tags["changed_on_resume/trainer/max_epochs"] == "3"


def test_a_checkpoint_without_logger_identities_still_resumes_into_a_new_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        fit(root, stop=Stop(KILLED_AT, KeyboardInterrupt))
    old = root / "old.ckpt"
    state = torch.load(root / "default" / "version_0" / "last.ckpt", weights_only=True)
    del state["loggers"]  # as written before run identities were saved
    torch.save(state, old)
    trainer = fit(root, ckpt_path=str(old))
    assert trainer.global_step == STEPS_PER_EPOCH * EPOCHS
    assert trainer.log_dir == root / "default" / "version_1"
    assert len(wandb_runs(root)) == 2 and len({read_wandb(p)[0]["run_id"] for p in wandb_runs(root)}) == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    assert len(client.search_runs([client.get_experiment_by_name("resume").experiment_id])) == 2
