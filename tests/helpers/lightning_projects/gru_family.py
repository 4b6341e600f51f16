"""A family of character-level GRU language models, as a research repository grows one: a base
class holds the optimizer, the truncated-BPTT training step and the recurrent state (a buffer
registered `persistent=True`, zeroed in `on_train_epoch_start`), and calls
`save_hyperparameters()`; a GRU subclass adds its architecture and calls it again; a third level
passes its arguments up positionally and through `**kwargs`. A fine-tuning module builds a
fresh backbone inside its own `__init__` (so the backbone's hyperparameters are collected the
way Lightning collects them), another reloads one with `load_from_checkpoint` inside `__init__`.

`main(..., stop_at=n)` stops after n steps (inside an epoch) with a step checkpoint, and a new
model and Trainer continue from it with `ckpt_path`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import trainer as L
from callbacks import ModelCheckpoint

VOCAB, COLUMNS = 9, 3


class Chunks(Dataset):
    """A token stream cut into COLUMNS columns and consecutive chunks of `bptt` tokens."""

    def __init__(self, length: int, bptt: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        steps = torch.randint(1, 3, (length,), generator=g)
        tokens = torch.cumsum(steps, 0) % VOCAB  # a walk the model can learn
        per = (length - 1) // COLUMNS
        self.x = tokens[: per * COLUMNS].view(COLUMNS, per)
        self.y = tokens[1: per * COLUMNS + 1].view(COLUMNS, per)
        self.bptt = bptt

    def __len__(self) -> int:
        return self.x.shape[1] // self.bptt

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        cut = slice(index * self.bptt, (index + 1) * self.bptt)
        return self.x[:, cut], self.y[:, cut]


class SequenceModel(L.LightningModule):
    def __init__(self, vocab: int = VOCAB, lr: float = 0.5, gamma: float = 0.8, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()

    def step_state(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def on_train_epoch_start(self) -> None:
        self.state.zero_()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch  # (1, COLUMNS, bptt): one chunk of every column
        logits, state = self.step_state(x[0], self.state.clone())  # the buffer changes before backward
        self.state.copy_(state.detach())  # truncated backpropagation: carry the value, not the graph
        loss = F.cross_entropy(logits.reshape(-1, self.hparams.vocab), y[0].reshape(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits, _ = self.step_state(x[0], torch.zeros_like(self.state))
        self.log("val_loss", F.cross_entropy(logits.reshape(-1, self.hparams.vocab), y[0].reshape(-1)))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=self.hparams.gamma)]


class GRUModel(SequenceModel):
    def __init__(self, hidden: int = 12, dropout: float = 0.1, lr: float = 1.0, **kwargs: Any) -> None:
        super().__init__(lr=lr, **kwargs)
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(self.hparams.vocab, hidden)
        self.rnn = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.drop = torch.nn.Dropout(dropout)
        self.head = torch.nn.Linear(hidden, self.hparams.vocab)
        self.register_buffer("state", torch.zeros(1, COLUMNS, hidden), persistent=True)

    def step_state(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, state = self.rnn(self.drop(self.embed(x)), state)
        return self.head(self.drop(out)), state


class TiedGRU(GRUModel):
    def __init__(self, hidden: int = 12, tie: bool = True, *args: Any, **kwargs: Any) -> None:
        super().__init__(hidden, *args, **kwargs)
        if tie:
            self.head.weight = self.embed.weight


class Finetuner(L.LightningModule):
    """A new backbone built in `__init__`, a head of its own; only the head trains."""

    def __init__(self, backbone_hidden: int = 12, head_lr: float = 0.2, checkpoint: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["checkpoint"])
        self.backbone = TiedGRU(backbone_hidden, tie=False) if checkpoint is None else \
            TiedGRU.load_from_checkpoint(checkpoint)
        self.backbone.freeze()
        self.head = torch.nn.Linear(backbone_hidden, VOCAB)


def main(root_dir: str | Path, precision: str = "32-true", stop_at: int | None = None,  # a multiple of 4
         max_epochs: int = 3) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(8)
    train, val = Chunks(181, bptt=6, seed=0), Chunks(61, bptt=6, seed=1)  # 10 chunks an epoch
    model = TiedGRU(hidden=12, dropout=0.1, gamma=0.7)
    steps = ModelCheckpoint(dirpath=root_dir / "steps", filename="{step}", every_n_train_steps=4, save_top_k=-1,
                            save_last=True)

    def trainer_for(**limits: Any) -> Any:
        return L.Trainer(precision=precision, default_root_dir=root_dir, logger=False, gradient_clip_val=0.5,
                         callbacks=[steps], enable_progress_bar=False, enable_model_summary=False, **limits)

    loaders = DataLoader(train, batch_size=1), DataLoader(val, batch_size=1)
    if stop_at is None:
        trainer = trainer_for(max_epochs=max_epochs)
        trainer.fit(model, *loaders)
    else:
        trainer_for(max_epochs=max_epochs, max_steps=stop_at).fit(model, *loaders)
        model = TiedGRU(hidden=12, dropout=0.1, gamma=0.7)  # a new process's objects
        trainer = trainer_for(max_epochs=max_epochs)
        trainer.fit(model, *loaders, ckpt_path=root_dir / "steps" / f"step={stop_at}.ckpt")
    last = root_dir / "steps" / "last.ckpt"
    reloaded = TiedGRU.load_from_checkpoint(last)
    built_inside = Finetuner(backbone_hidden=8)
    loaded_inside = Finetuner(checkpoint=str(last))
    return {"model": model, "trainer": trainer, "val": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "hparams": dict(model.hparams), "hparams_initial": dict(model.hparams_initial),
            "reloaded": reloaded, "reloaded_hparams": dict(reloaded.hparams),
            "inside_hparams": dict(built_inside.hparams), "inside_backbone": dict(built_inside.backbone.hparams),
            "loaded_inside": dict(loaded_inside.hparams), "loaded_backbone": dict(loaded_inside.backbone.hparams),
            "saved": dict(torch.load(last, map_location="cpu", weights_only=False)["hyper_parameters"]),
            "files": sorted(p.name for p in (root_dir / "steps").iterdir())}
