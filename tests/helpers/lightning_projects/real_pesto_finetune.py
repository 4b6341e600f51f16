"""Fine-tuning a pitch estimator on streamed audio, from a public repository found by code
search (file id 68610708099: `ml/pesto/finetune/train.py`, "Entry point for fine-tuning PESTO
on guitar audio in streaming mode").

Kept as written: `ToLogMagnitude`, `BatchRandomNoise` and `BatchRandomGain` (their own random
draws per batch), `_global_grad_norm` and the `GradientNormLogger` callback (the gradient norm
logged from `on_after_backward` and again from `on_before_zero_grad`, after clipping), the
optimizer and scheduler "partials" handed to the module (Adam with weight decay,
`CosineAnnealingLR(T_max=epochs)`), and `main`'s Trainer: a `ModelCheckpoint(dirpath=run_dir,
filename="last", save_last=True, save_top_k=0, every_n_epochs=1)` beside a second one in the
same folder (`filename="best-epoch={epoch:03d}-train_loss={train_loss:.6f}"`,
`monitor="train_loss"`, `auto_insert_metric_name=False`), `LearningRateMonitor(
logging_interval='epoch')`, `TensorBoardLogger(save_dir=run_dir.parent, name=run_name,
version="")` (no version folder: the run folder is `run_dir` itself), `gradient_clip_val`,
`reload_dataloaders_every_n_epochs=1` ("rebuilds HCQT each epoch (new offset)"),
`num_sanity_val_steps=0`, `fit(..., ckpt_path=cfg.resume_from)`, then
`trainer.save_checkpoint(run_dir / f"finetuned-{run_name}.ckpt")`.
Substituted (the repository's vendored PESTO module, ResNet encoder, losses, loss weighting
and streaming DataModule are other files): `PESTO` is a small self-supervised module of the
same shape (an encoder over log-magnitude frames, a pitch-shift equivariance loss and an
invariance loss between two augmented views, logging `train_loss`), the loss weighting
callback is left out, and `GuitarStreamingDataModule` cuts 12 synthetic frames from a random
offset of a fixed signal at every `train_dataloader()` call; `TrainConfig` is a dataclass
with shrunk values (three epochs, batch 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as _nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

import trainer as pl  # as in Lightning.pytorch
from trainer.callbacks import LearningRateMonitor, ModelCheckpoint
from trainer.loggers import TensorBoardLogger


class ToLogMagnitude(_nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = torch.finfo(torch.float32).eps

    def forward(self, x):
        if x.size(-1) == 2:
            x = torch.view_as_complex(x)
        if x.ndim == 2:
            x.unsqueeze_(1)
        x = x.abs()
        x.clamp_(min=self.eps).log10_().mul_(20)
        return x


class BatchRandomNoise(_nn.Module):
    def __init__(self, min_snr: float = 0.1, max_snr: float = 2.0, p: float = 0.7):
        super().__init__()
        self.min_snr = min_snr
        self.max_snr = max_snr
        self.p = p

    def forward(self, x):
        bs = x.size(0)
        device = x.device
        snr = torch.empty(bs, device=device).uniform_(self.min_snr, self.max_snr)
        mask = torch.rand_like(snr).le(self.p)
        snr[mask] = 0
        noise_std = snr * x.view(bs, -1).std(dim=-1)
        noise_std = noise_std.unsqueeze(-1).expand_as(x.view(bs, -1)).view_as(x)
        return x + noise_std * torch.randn_like(x)


class BatchRandomGain(_nn.Module):
    def __init__(self, min_gain: float = 0.5, max_gain: float = 1.5, p: float = 0.7):
        super().__init__()
        self.min_gain = min_gain
        self.max_gain = max_gain
        self.p = p

    def forward(self, x):
        bs = x.size(0)
        device = x.device
        vol = torch.empty(bs, device=device).uniform_(self.min_gain, self.max_gain)
        mask = torch.rand_like(vol).le(self.p)
        vol[mask] = 1
        vol = vol.unsqueeze(-1).expand_as(x.view(bs, -1)).view_as(x)
        return vol * x


def _global_grad_norm(module: torch.nn.Module) -> torch.Tensor | None:
    norms = [
        p.grad.detach().norm(2)
        for p in module.parameters()
        if p.grad is not None
    ]
    if not norms:
        return None
    return torch.norm(torch.stack(norms), 2)


class GradientNormLogger(pl.Callback):
    """Log gradient norms before and after Lightning gradient clipping."""

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        norm = _global_grad_norm(pl_module)
        if norm is not None:
            pl_module.log("train/grad_norm_pre_clip", norm, prog_bar=False, logger=True)

    def on_before_zero_grad(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        optimizer: optim.Optimizer,
    ) -> None:
        norm = _global_grad_norm(pl_module)
        if norm is not None:
            pl_module.log("train/grad_norm_post_clip", norm, prog_bar=False, logger=True)


# ---------------------------------------------------------------- stand-ins for the repository's other files
@dataclass
class TrainConfig:
    epochs: int = 3
    lr: float = 1e-2
    weight_decay: float = 1e-4
    batch_size: int = 4
    grad_clip: float = 0.5
    log_every_n_steps: int = 1
    run_name: str = "guitar"
    resume_from: str | None = None


class PESTO(pl.LightningModule):
    def __init__(self, encoder, optimizer_cls, scheduler_cls, transforms):
        super().__init__()
        self.encoder = encoder
        self.optimizer_cls, self.scheduler_cls = optimizer_cls, scheduler_cls
        self.transforms = _nn.Sequential(*transforms)
        self.preprocessor = ToLogMagnitude()

    def training_step(self, batch, batch_idx):
        x = self.preprocessor(batch[0])
        view_1, view_2 = self.transforms(x), self.transforms(x)
        shifted = torch.roll(view_2, 1, dims=-1)
        y1, y2, y3 = (self.encoder(v.flatten(1)).softmax(-1) for v in (view_1, view_2, shifted))
        invariance = -(y1 * y2.clamp_min(1e-6).log()).sum(-1).mean()
        equivariance = (y3 - y2).pow(2).sum(-1).mean()
        loss = invariance + equivariance
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("loss/invariance", invariance)
        return loss

    def configure_optimizers(self):
        optimizer = self.optimizer_cls(self.parameters())
        return [optimizer], [self.scheduler_cls(optimizer)]


class GuitarStreamingDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int):
        super().__init__()
        self.batch_size = batch_size
        self.signal = torch.randn(400, 2, generator=torch.Generator().manual_seed(4))
        self.offsets: list[int] = []

    def train_dataloader(self):
        offset = int(torch.randint(0, 100, ()))
        self.offsets.append(offset)
        frames = self.signal[offset:offset + 12 * 8].reshape(12, 8, 2)
        return DataLoader(TensorDataset(frames), batch_size=self.batch_size, shuffle=True)


# ---------------------------------------------------------------- main, as written (argument parsing left out)
def main(root_dir: str | Path, precision: str = "32-true", resume: bool = False) -> dict[str, Any]:
    cfg = TrainConfig()
    pl.seed_everything(0)
    run_dir = Path(root_dir) / "runs" / cfg.run_name
    run_dir.mkdir(parents=True, exist_ok=True)

    def opt_partial(params):
        return optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    def sched_partial(optimizer):
        return optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)

    results = {}
    for attempt in ("first", "resumed") if resume else ("first",):
        datamodule = GuitarStreamingDataModule(batch_size=cfg.batch_size)
        module = PESTO(_nn.Sequential(_nn.Linear(8, 8), _nn.ReLU(), _nn.Linear(8, 6)), opt_partial, sched_partial,
                       transforms=[BatchRandomNoise(), BatchRandomGain()])
        last_ckpt_cb = ModelCheckpoint(
            dirpath=str(run_dir),
            filename="last",
            save_last=True,
            save_top_k=0,
            every_n_epochs=1,
        )
        best_ckpt_cb = ModelCheckpoint(
            dirpath=str(run_dir),
            filename="best-epoch={epoch:03d}-train_loss={train_loss:.6f}",
            monitor="train_loss",
            mode="min",
            save_top_k=1,
            save_last=False,
            auto_insert_metric_name=False,
        )
        lr_cb = LearningRateMonitor(logging_interval='epoch')
        grad_norm_cb = GradientNormLogger()

        logger = TensorBoardLogger(save_dir=str(run_dir.parent), name=cfg.run_name, version="")

        trainer = pl.Trainer(
            max_epochs=cfg.epochs + (1 if attempt == "resumed" else 0),
            accelerator="cpu",
            devices=1,
            precision=precision,
            gradient_clip_val=cfg.grad_clip,
            log_every_n_steps=cfg.log_every_n_steps,
            callbacks=[last_ckpt_cb, best_ckpt_cb, lr_cb, grad_norm_cb],
            logger=logger,
            reload_dataloaders_every_n_epochs=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(run_dir),
            num_sanity_val_steps=0,
        )
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.resume_from)
        final_ckpt = run_dir / f"finetuned-{cfg.run_name}{'-resumed' if attempt == 'resumed' else ''}.ckpt"
        trainer.save_checkpoint(str(final_ckpt))
        results[attempt] = {
            "model": module, "trainer": trainer, "val": dict(trainer.callback_metrics),
            "offsets": datamodule.offsets, "last": Path(last_ckpt_cb.last_model_path).name,
            "best": Path(best_ckpt_cb.best_model_path).name, "log_dir": Path(logger.log_dir).resolve(),
            "files": sorted(str(p.relative_to(root_dir)) for p in Path(root_dir).rglob("*.ckpt")),
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
        }
        cfg.resume_from = last_ckpt_cb.last_model_path
    return {**results["first"], "resumed": results.get("resumed"), "run_dir": run_dir.resolve()}
