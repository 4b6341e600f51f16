"""A fit whose checkpoints go to a bucket (`root_dir=s3://...`), optionally killed with SIGKILL
inside one of its uploads; every launch resumes with `ckpt_path="last"`.

    python s3_worker.py ROOT_URL RUN_NAME OUT.pt [KILL]

KILL is `<n>:<phase>[:<bytes>]`: this process's n-th checkpoint upload is ended by SIGKILL
- `bytes`: once that many bytes of it were written (parts of 5 MiB are uploaded as they fill);
- `commit`: with every byte uploaded, before the upload is committed;
- `after`: right after the commit, before the rest of that save (keep-last, ModelCheckpoint's deletions).
Prints `START <checkpoint resumed from, or None> <step>` when training starts and, at the end,
writes the weights to OUT.pt.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import callbacks
from trainer import Callback, Module, Trainer
from trainer.checkpoint import storage

ROOT, NAME, OUT, KILL = (sys.argv[1:] + [""] * 4)[:4] if __name__ == "__main__" else ("", "", "", "")
UPLOADS = 0
ORIGINAL = storage.RemotePath.write_object


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Cutting:
    """The upload's stream, ended by SIGKILL after `limit` bytes."""

    def __init__(self, handle: Any, limit: int) -> None:
        self.handle, self.limit, self.count = handle, limit, 0

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.handle.write(data)
        self.count += size
        if self.count >= self.limit:
            die()
        return size


def write_object(self: storage.RemotePath, write: Any, *args: Any, **kwargs: Any) -> None:
    global UPLOADS
    UPLOADS += 1
    number, phase, *rest = KILL.split(":") if KILL else ("0", "")
    if int(number) != UPLOADS:
        return ORIGINAL(self, write, *args, **kwargs)
    if phase == "after":
        ORIGINAL(self, write, *args, **kwargs)
        die()
    handle = self.fs.open(self.key, "wb", autocommit=False)
    if phase == "bytes":
        write(Cutting(handle, int(rest[0])))
    write(handle)
    handle.close()  # every part uploaded; not committed
    die()


class Wide(Module):
    """About 6 MB of weights (more than one 5 MiB upload part), with dropout (random streams matter)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 1200), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(1200, 1200), torch.nn.ReLU(), torch.nn.Linear(1200, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Report(Callback):
    def on_train_start(self, trainer: Any, module: Any) -> None:
        print(f"START {trainer.ckpt_path} {trainer.global_step}", flush=True)


def fit(root: str, name: str | None, *extra: Any) -> Wide:
    """The run: 3 epochs of 4 steps; last.ckpt (2 kept) at every epoch's end, a top-1 file every 3 steps."""
    torch.manual_seed(0)
    x = torch.randn(16, 6)
    data = TensorDataset(x, x[:, :1] * 2)
    model = Wide()
    trainer = Trainer(root_dir=root, run_name=name, max_epochs=3, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, device="cpu", seed=3, keep_last_checkpoints=2,
                      storage_options={"default_block_size": 5 * 2**20} if "://" in root else None,
                      callbacks=[*extra, callbacks.ModelCheckpoint(every_n_train_steps=3, save_top_k=1)])
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True), ckpt_path="last")
    return model


def main() -> None:
    storage.RemotePath.write_object = write_object  # type: ignore[method-assign]
    model = fit(ROOT, NAME, Report())
    torch.save(model.state_dict(), OUT)


if __name__ == "__main__":
    main()
