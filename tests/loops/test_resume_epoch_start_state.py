"""On a resume inside an epoch the epoch-start hooks run again, and what the checkpoint restores
wins over what they reset: the module's own state dict (a recurrent state kept in registered
buffers, as PyTorch's word_language_model keeps it), and the optimizers' and schedulers' states.
Each case: the resumed run's weights equal the uninterrupted run's (torch.equal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.loops.test_tbptt import BSZ, VOCAB, Chunks
from trainer import Callback, Module, Trainer
from trainer.checkpoint import load_checkpoint

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")
PER_EPOCH = 9  # batches of Chunks()


class BufferLM(Module):
    """Truncated BPTT with the hidden state in persistent buffers, zeroed at every epoch's start
    (by the module itself, or by a callback: `reset_in_module=False`)."""

    def __init__(self, reset_in_module: bool = True, in_place: bool = True, carry: bool = True) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.drop = torch.nn.Dropout(0.2)
        self.head = torch.nn.Linear(8, VOCAB)
        self.register_buffer("h", torch.zeros(1, BSZ, 8), persistent=True)
        self.register_buffer("c", torch.zeros(1, BSZ, 8), persistent=True)
        self.register_buffer("seen", torch.zeros(()), persistent=True)  # chunks of this epoch, weighting the loss
        self.reset_in_module, self.in_place, self.carry = reset_in_module, in_place, carry

    def reset_state(self) -> None:
        if self.in_place:
            self.h.zero_()
            self.c.zero_()
            self.seen.zero_()
        else:
            self.h, self.c, self.seen = torch.zeros_like(self.h), torch.zeros_like(self.c), torch.zeros_like(self.seen)

    def on_train_epoch_start(self) -> None:
        if self.reset_in_module:
            self.reset_state()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out, (h, c) = self.lstm(self.drop(self.embed(x)), (self.h.clone(), self.c.clone()))
        if not self.carry:  # each chunk from zeros (a state that differs between ranks can't be kept by FSDP)
            pass
        elif self.in_place:
            self.h.copy_(h.detach())
            self.c.copy_(c.detach())
        else:
            self.h, self.c = h.detach(), c.detach()
        weight = 1.0 + 0.1 * self.seen
        self.seen += 1
        return weight * torch.nn.functional.cross_entropy(self.head(self.drop(out)).reshape(-1, VOCAB), y.reshape(-1))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 3, 0.5),
                                                         "interval": "step"}}


class ResetState(Callback):
    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        module.reset_state()


class RestartOptimizer(Callback):
    """A warm restart at every epoch's start: Adam's moments dropped, the learning rate halved
    in place, the step scheduler's count back to zero (none of it idempotent)."""

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        optimizer = trainer.optimizers[0]
        optimizer.state.clear()
        for group in optimizer.param_groups:
            group["lr"] *= 0.5
        trainer.lr_scheduler_configs[0].scheduler.last_epoch = 0


def new_model(**options: Any) -> BufferLM:
    torch.manual_seed(0)
    return BufferLM(**options)


def loader() -> DataLoader:
    return DataLoader(Chunks(), batch_size=None, shuffle=False)


def uninterrupted(callbacks: list[Callback], **options: Any) -> BufferLM:
    model = new_model(**options)
    torch.manual_seed(1)
    Trainer(max_epochs=2, callbacks=callbacks, **QUIET).fit(model, loader())
    return model


def resumed(tmp_path: Path, callbacks: list[Callback], **options: Any) -> BufferLM:
    model = new_model(**options)
    torch.manual_seed(1)
    first = Trainer(max_steps=PER_EPOCH + 4, root_dir=tmp_path, logger=False, enable_progress_bar=False,
                    callbacks=callbacks)
    first.fit(model, loader())
    path = first.log_dir / "last.ckpt"
    saved = load_checkpoint(path)
    assert saved["loop"]["batches_done"] == 4 and saved["loop"]["epoch"] == 1  # inside the second epoch
    assert saved["module"]["seen"] == 4  # the state the epoch-start hook would wipe
    assert saved["module"]["h"].abs().sum() > 0 or not options.get("carry", True)
    torch.manual_seed(99)
    model = new_model(**options)
    Trainer(max_epochs=2, callbacks=callbacks, **QUIET).fit(model, loader(), ckpt_path=path)
    return model


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    mine, other = a.state_dict(), b.state_dict()
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"differ from the uninterrupted run: {different}"


@pytest.mark.parametrize("in_place", [True, False], ids=["copy_", "assigned"])
def test_buffer_state_reset_by_the_module_resumes_exactly(in_place: bool, tmp_path: Path) -> None:
    assert_same_state(resumed(tmp_path, [], in_place=in_place), uninterrupted([], in_place=in_place))


def test_buffer_state_reset_by_a_callback_resumes_exactly(tmp_path: Path) -> None:
    options = {"reset_in_module": False}
    assert_same_state(resumed(tmp_path, [ResetState()], **options), uninterrupted([ResetState()], **options))


def test_optimizer_and_scheduler_state_reset_at_epoch_start_resume_exactly(tmp_path: Path) -> None:
    assert_same_state(resumed(tmp_path, [RestartOptimizer()]), uninterrupted([RestartOptimizer()]))
