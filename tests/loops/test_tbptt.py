"""State carried across batches: an LSTM language model with truncated BPTT (PyTorch's
`word_language_model` pattern) keeps its hidden state in the checkpoint and resumes mid-epoch
bit for bit; a callback that saves from `on_train_batch_end` every step resumes exactly after
a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.reference import assert_same_weights
from trainer import Callback, Module, Trainer
from trainer.checkpoint import load_checkpoint

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
VOCAB, BSZ, BPTT = 11, 3, 5


class Chunks(Dataset):
    """Consecutive (input, target) chunks of a token stream batchified into BSZ columns."""

    def __init__(self, tokens: int = 3 * 5 * 9 + 1, seed: int = 0) -> None:
        stream = torch.randint(0, VOCAB, (tokens,), generator=torch.Generator().manual_seed(seed))
        columns = (tokens - 1) // BSZ
        self.data = stream[: columns * BSZ + 1]
        self.columns = columns

    def __len__(self) -> int:
        return self.columns // BPTT

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.arange(BSZ) * self.columns
        idx = rows[:, None] + i * BPTT + torch.arange(BPTT)[None, :]
        return self.data[idx], self.data[idx + 1]


class LanguageModel(Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.drop = torch.nn.Dropout(0.2)
        self.head = torch.nn.Linear(8, VOCAB)
        self.hidden: tuple[torch.Tensor, torch.Tensor] | None = None

    def on_train_epoch_start(self) -> None:  # a new epoch starts from zeros (a resume restores after it)
        self.hidden = (torch.zeros(1, BSZ, 8), torch.zeros(1, BSZ, 8))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        assert self.hidden is not None
        hidden = (self.hidden[0].detach(), self.hidden[1].detach())  # truncate backpropagation
        out, self.hidden = self.lstm(self.drop(self.embed(x)), hidden)
        return torch.nn.functional.cross_entropy(self.head(self.drop(out)).reshape(-1, VOCAB), y.reshape(-1))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hidden"] = [t.detach() for t in self.hidden] if self.hidden is not None else None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint["hidden"]
        self.hidden = (saved[0], saved[1]) if saved is not None else None

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def new_model() -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel()


def chunks_loader() -> DataLoader:
    return DataLoader(Chunks(), batch_size=None, shuffle=False)


def test_lstm_hidden_state_resumes_mid_epoch_bit_for_bit(tmp_path: Path) -> None:
    reference = new_model()
    torch.manual_seed(1)
    Trainer(max_epochs=2, **QUIET).fit(reference, chunks_loader())  # 9 batches per epoch

    model = new_model()
    torch.manual_seed(1)
    first = Trainer(max_steps=9 + 4, root_dir=tmp_path, logger=False, enable_progress_bar=False)
    first.fit(model, chunks_loader())
    saved = load_checkpoint(first.log_dir / "last.ckpt")
    assert saved["loop"]["batches_done"] == 4 and saved["hidden"] is not None

    torch.manual_seed(99)
    resumed = new_model()
    Trainer(max_epochs=2, **QUIET).fit(resumed, chunks_loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert_same_weights(reference, resumed)


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, torch
    sys.path.insert(0, {root!r})
    from tests.loops.test_tbptt import EverySave, chunks_loader, new_model
    from trainer import Trainer
    model = new_model()
    torch.manual_seed(1)
    trainer = Trainer(max_epochs=2, callbacks=[EverySave({path!r}, kill_at={kill_at})],
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
    trainer.fit(model, chunks_loader())
    """
)


class EverySave(Callback):
    """Saves after every optimizer step from on_train_batch_end; optionally dies with SIGKILL."""

    def __init__(self, path: str, kill_at: int | None = None) -> None:
        self.path, self.kill_at = path, kill_at

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        trainer.save_checkpoint(self.path)
        if trainer.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


def test_checkpoint_saved_every_step_from_on_train_batch_end_resumes_after_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "every.ckpt"
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(root=root, path=str(path), kill_at=12)], timeout=120)
    assert done.returncode == -signal.SIGKILL
    saved = load_checkpoint(path)
    assert saved["loop"]["global_step"] == 12 and saved["cut"]["clean"]

    reference = new_model()
    torch.manual_seed(1)
    Trainer(max_epochs=2, **QUIET).fit(reference, chunks_loader())
    resumed = new_model()
    Trainer(max_epochs=2, **QUIET).fit(resumed, chunks_loader(), ckpt_path=path)
    assert_same_weights(reference, resumed)
