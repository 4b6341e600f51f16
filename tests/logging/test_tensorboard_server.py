"""Start the real `tensorboard` program on loopback and read a run's curve over HTTP."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")


class Line(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_tensorboard_serves_the_logged_loss(tmp_path: Path) -> None:
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(80, 2), torch.randn(80, 1)), batch_size=4)
    trainer = Trainer(root_dir=tmp_path, max_steps=20, log_every_n_steps=5, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(Line(), data)
    logged = trainer.callback_metrics["train/loss"]
    run = trainer.log_dir.relative_to(tmp_path).as_posix()  # "default/version_0"

    port = free_port()
    log_file = (tmp_path / "tensorboard.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    query = urllib.parse.urlencode({"tag": "train/loss", "run": run})
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"
    points = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log_file.flush()
                output = (tmp_path / "tensorboard.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"tensorboard exited with {process.returncode}: {output}")
            try:
                points = fetch(url)
                if isinstance(points, list) and len(points) == 4:
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError, TimeoutError):
                pass  # not up yet, or the run not loaded yet
            time.sleep(0.5)
        runs = fetch(f"http://127.0.0.1:{port}/data/runs")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_file.close()
    assert run in runs
    assert isinstance(points, list), points
    assert [step for _, step, _ in points] == [5, 10, 15, 20]  # [wall_time, step, value]
    assert points[-1][2] == pytest.approx(logged, rel=1e-6)
