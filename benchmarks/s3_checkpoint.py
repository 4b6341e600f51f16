"""Checkpoint save and load to an S3 server against local disk, interleaved in one process.

The same whole training state (a model of a few hundred MB, default 256 MB of float32 weights, and
its SGD momentum) is saved with `Trainer.save_checkpoint` and read back with `load_checkpoint`
(CRC check + weights-only load), to a local folder and to `s3://<bucket>/bench`; prints the
medians and the ratio S3 / disk. Without `AWS_ENDPOINT_URL` set, a moto server
(`pip install 'moto[server]'`) is started on 127.0.0.1 for the run and stopped after it.

The local server measures the path's own cost (the upload protocol, a temporary copy on
reading, the checksums), not a real network's bandwidth.

Run: python benchmarks/s3_checkpoint.py [--megabytes 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer import Module, Trainer  # noqa: E402
from trainer.checkpoint import load_checkpoint  # noqa: E402


class Wide(Module):
    """Square linear layers, `megabytes` of float32 weights in all."""

    def __init__(self, megabytes: int = 256, width: int = 2048) -> None:
        super().__init__()
        width = min(width, max(8, int((megabytes * 2**20 / 4) ** 0.5)))
        layers = max(1, round(megabytes * 2**20 / 4 / (width * width + width)))
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-6, momentum=0.9)


@contextlib.contextmanager
def s3_server() -> Iterator[None]:
    """The endpoint in AWS_ENDPOINT_URL, or a moto server started for the run."""
    if os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3"):
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"moto's server did not start on {endpoint} (pip install 'moto[server]')") from None
                time.sleep(0.2)
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION="us-east-1")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=256, help="float32 weights of the model (MB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with s3_server(), tempfile.TemporaryDirectory() as folder:
        import s3fs

        bucket = f"bench-{uuid.uuid4().hex[:10]}"
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
        torch.manual_seed(0)
        model = Wide(args.megabytes)
        trainer = Trainer(root_dir=folder, max_steps=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, device="cpu")
        width = model.layers[0].in_features
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(2, width)), batch_size=2))  # momentum exists
        size = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        targets = {"disk": str(Path(folder) / "bench.ckpt"), "s3": f"s3://{bucket}/bench/bench.ckpt"}
        times: dict[str, list[float]] = {f"{kind} {where}": [] for kind in ("save", "load") for where in targets}
        for _ in range(args.repeats):
            for where, target in targets.items():  # interleaved: the machine's load hits both alike
                start = time.perf_counter()
                trainer.save_checkpoint(target)
                times[f"save {where}"].append(time.perf_counter() - start)
                start = time.perf_counter()
                state = load_checkpoint(target)
                times[f"load {where}"].append(time.perf_counter() - start)
                del state
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{size:.0f} MB of weights (+ as much SGD momentum), median of {args.repeats}:")
    print("| | disk (s) | S3 server (s) | S3 / disk |")
    print("|---|---|---|---|")
    for kind in ("save", "load"):
        disk, s3 = medians[f"{kind} disk"], medians[f"{kind} s3"]
        print(f"| {kind} | {disk:.2f} | {s3:.2f} | {s3 / disk:.1f}x |")
    return medians


if __name__ == "__main__":
    main()
