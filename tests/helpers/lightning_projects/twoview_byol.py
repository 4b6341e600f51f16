"""Self-supervised pretraining on two augmented views, the way BYOL/SimSiam repositories write
it: the dataset draws two random views of every sample in `__getitem__` (torch's generator, in
the main process, `num_workers=0`), an online network with a predictor, a target network that
follows it by an exponential moving average in `on_train_batch_end`, a learning-rate warm-up
written in an `optimizer_step` override (`optimizer.step(closure=optimizer_closure)`, then the
param groups' lr, as Lightning's docs show it), and short runs cut by one of `limit_train_batches`
(an int or a fraction), `max_steps`, a callback's `trainer.should_stop`, `max_time` or
`fast_dev_run`. The training set is map-style, or a stream without `len()` (`stream=True`).

Every read draws from the generator the model's noise uses, so a batch read that is never
trained on shifts what follows; `reads` lists the sample indices the run asked for, in order."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset

import trainer as L


class TwoViews(Dataset):
    def __init__(self, count: int = 48, dim: int = 12, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.points = torch.randn(count, dim, generator=g)
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.points)

    def view(self, x: torch.Tensor) -> torch.Tensor:
        mask = (torch.rand_like(x) > 0.2).float()  # random feature dropout
        return x * mask + 0.1 * torch.randn_like(x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads.append(index)
        x = self.points[index]
        return self.view(x), self.view(x)


class TwoViewStream(IterableDataset):
    """The same samples without `len()`: a random order drawn when a pass starts."""

    def __init__(self, base: TwoViews) -> None:
        self.base = base

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in torch.randperm(len(self.base)).tolist():
            yield self.base[index]


def mlp(dim_in: int, hidden: int, dim_out: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(dim_in, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, dim_out))


class BYOL(L.LightningModule):
    def __init__(self, dim: int = 12, hidden: int = 16, proj: int = 8, learning_rate: float = 0.05, tau: float = 0.9,
                 warmup_steps: int = 6) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.online = torch.nn.Sequential(mlp(dim, hidden, hidden), mlp(hidden, hidden, proj))
        self.predictor = mlp(proj, hidden, proj)
        self.target = copy.deepcopy(self.online)
        self.target.requires_grad_(False)

    @staticmethod
    def regression(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        v1, v2 = batch
        p1, p2 = self.predictor(self.online(v1)), self.predictor(self.online(v2))
        with torch.no_grad():
            z1, z2 = self.target(v1), self.target(v2)
        loss = self.regression(p1, z2) + self.regression(p2, z1)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        tau = self.hparams.tau
        with torch.no_grad():
            for online, target in zip(self.online.parameters(), self.target.parameters()):
                target.mul_(tau).add_(online, alpha=1 - tau)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        optimizer.step(closure=optimizer_closure)
        if self.trainer.global_step < self.hparams.warmup_steps:
            scale = min(1.0, float(self.trainer.global_step + 1) / self.hparams.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = scale * self.hparams.learning_rate

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = list(self.online.parameters()) + list(self.predictor.parameters())
        return torch.optim.SGD(params, lr=self.hparams.learning_rate / self.hparams.warmup_steps, momentum=0.9)


class StopAt(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def main(root_dir: str | Path, precision: str = "32-true", stream: bool = False, max_epochs: int = 3,
         **budget: Any) -> dict[str, Any]:
    """`budget`: Trainer arguments (`limit_train_batches`, `max_steps`, `max_time`, `fast_dev_run`) and
    `stop_at=n` for a callback that requests a stop once n steps are done."""
    root_dir = Path(root_dir)
    L.seed_everything(3)
    data = TwoViews()
    loader = DataLoader(TwoViewStream(data) if stream else data, batch_size=8, shuffle=not stream, drop_last=True)
    model = BYOL()
    stop_at = budget.pop("stop_at", None)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StopAt(stop_at)] if stop_at is not None else [], **budget)
    trainer.fit(model, loader)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "reads": list(data.reads),
            "lr": trainer.optimizers[0].param_groups[0]["lr"], "after": torch.rand(4)}
