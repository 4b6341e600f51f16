"""Code snippets of Lightning's documentation (docs/source-pytorch), completed into runs with
this package's imports, as a user moving over copies them: the manual-optimization page
(the minimal loop, accumulation, clipping, the two-optimizer GAN, schedulers stepped by hand,
alternating frequencies, the LBFGS closure), the optimization page (a scheduler dict,
`configure_gradient_clipping`, `optimizer_step` on the wrapped optimizer, `lr_scheduler_step`
for a scheduler of another API, OneCycleLR from `estimated_stepping_batches`), early stopping
(`stopping_reason`, the `MyEarlyStopping` subclass), checkpointing (top-k `ModelCheckpoint` with
its paths, `save_checkpoint` + `load_from_checkpoint` with an overridden hyperparameter,
`on_save_checkpoint`/`on_load_checkpoint` in a module and a callback, `strict_loading=False`
with a `state_dict` that leaves the encoder out) and a printing callback.

Each `run_<snippet>(root_dir)` returns what tests/lightning/test_lightning_docs_snippets.py
compares with Lightning's run: `model`, `trainer`, and the snippet's own observations. What the
snippets leave as `...` (`compute_loss`, `Generator`, the data, `N`) is filled in with the
smallest thing that works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import EarlyStopping, ModelCheckpoint
# EARLY
from trainer import Callback, LightningModule, Trainer

N = 2
QUIET: dict[str, Any] = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)


def loader(n: int = 32, shuffle: bool = True, seed: int = 1) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=8, shuffle=shuffle)


class Base(LightningModule):
    """What the snippets take for granted: a layer, `compute_loss`, an optimizer, validation."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def compute_loss(self, batch: Any) -> Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.compute_loss(batch)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.compute_loss(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(model: LightningModule, root_dir: Path, val: bool = True, **options: Any) -> dict[str, Any]:
    options = {**QUIET, "max_epochs": 3, **options}
    trainer = Trainer(default_root_dir=root_dir, **options)
    trainer.fit(model, loader(), loader(16, shuffle=False, seed=2) if val else None)
    return {"model": model, "trainer": trainer}


# ------------------------------------------------------------------ manual optimization page
class ManualMinimal(Base):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.compute_loss(batch)
        self.manual_backward(loss)
        opt.step()


class ManualAccumulation(ManualMinimal):
    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        loss = self.compute_loss(batch) / N
        self.manual_backward(loss)
        if (batch_idx + 1) % N == 0:
            opt.step()
            opt.zero_grad()


class ManualClipping(ManualMinimal):
    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        loss = self.compute_loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        opt.step()


class SimpleGAN(LightningModule):
    def __init__(self, alternate: bool = False) -> None:
        super().__init__()
        self.G = nn.Sequential(nn.Linear(2, 4))
        self.D = nn.Sequential(nn.Linear(4, 1))
        self._Z = torch.distributions.Normal(torch.zeros(2), torch.ones(2))
        self.criterion = nn.BCEWithLogitsLoss()
        self.alternate = alternate
        self.automatic_optimization = False

    def sample_z(self, n: int) -> Tensor:
        return self._Z.sample((n,))

    def sample_G(self, n: int) -> Tensor:
        return self.G(self.sample_z(n))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        g_opt, d_opt = self.optimizers()
        X, _ = batch
        batch_size = X.shape[0]
        real_label = torch.ones((batch_size, 1), device=self.device)
        fake_label = torch.zeros((batch_size, 1), device=self.device)
        g_X = self.sample_G(batch_size)
        errD = self.criterion(self.D(X), real_label) + self.criterion(self.D(g_X.detach()), fake_label)
        d_opt.zero_grad()
        self.manual_backward(errD)
        if not self.alternate or (batch_idx + 1) % 2 == 0:  # "update discriminator every other step"
            d_opt.step()
        errG = self.criterion(self.D(g_X), real_label)
        g_opt.zero_grad()
        self.manual_backward(errG)
        g_opt.step()
        self.log_dict({"g_loss": errG, "d_loss": errD}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        g_opt = torch.optim.Adam(self.G.parameters(), lr=1e-3)
        d_opt = torch.optim.Adam(self.D.parameters(), lr=1e-3)
        return g_opt, d_opt


class ManualSchedulers(ManualMinimal):
    """The scheduler stepped every N batches and every N epochs by hand."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return [optimizer], [scheduler]

    def training_step(self, batch: Any, batch_idx: int) -> None:
        super().training_step(batch, batch_idx)
        sch = self.lr_schedulers()
        if (batch_idx + 1) % N == 0:
            sch.step()
        if self.trainer.is_last_batch and (self.trainer.current_epoch + 1) % N == 0:
            sch.step()


class ManualPlateau(ManualMinimal):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.1, patience=0)
        return [optimizer], [scheduler]

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.compute_loss(batch) + 10.0 * (self.current_epoch > 0)  # worse after the first epoch
        self.manual_backward(loss)
        opt.step()
        self.log("loss", loss)

    def on_train_epoch_end(self) -> None:
        sch = self.lr_schedulers()
        sch.step(self.trainer.callback_metrics["loss"])


class ManualLBFGS(ManualMinimal):
    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()

        def closure() -> Tensor:
            loss = self.compute_loss(batch)
            opt.zero_grad()
            self.manual_backward(loss)
            return loss

        opt.step(closure=closure)


def run_manual(root_dir: Path, name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = {"minimal": ManualMinimal, "accumulation": ManualAccumulation, "clipping": ManualClipping,
             "gan": SimpleGAN, "gan_alternating": lambda: SimpleGAN(alternate=True), "schedulers": ManualSchedulers,
             "plateau": ManualPlateau, "lbfgs": ManualLBFGS}[name]()
    result = fit(model, root_dir)
    result["lrs"] = [group["lr"] for opt in result["trainer"].optimizers for group in opt.param_groups]
    return result


# ------------------------------------------------------------------------ optimization page
class SchedulerDict(Base):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1}}


class StrongerClipping(Base):
    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None) -> None:
        if self.current_epoch > 1:  # the page's 5, for a 3-epoch run
            gradient_clip_val = gradient_clip_val * 2
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)


class UnwrappedStep(Base):
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        optimizer = optimizer.optimizer
        optimizer.step(closure=optimizer_closure)


class EpochScheduler:
    """A scheduler of another API (timm's: `step(epoch)`), not a torch LRScheduler."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.base = [group["lr"] for group in optimizer.param_groups]

    def step(self, epoch: int) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base):
            group["lr"] = base * 0.5 ** epoch

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base = state["base"]


class OwnScheduler(Base):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [{"scheduler": EpochScheduler(optimizer), "interval": "epoch"}]

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step(epoch=self.current_epoch)


class OneCycle(Base):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=self.trainer.estimated_stepping_batches)
        return optimizer, scheduler


def run_optimization(root_dir: Path, name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model = {"scheduler_dict": SchedulerDict, "stronger_clipping": StrongerClipping, "unwrapped_step": UnwrappedStep,
             "own_scheduler": OwnScheduler, "one_cycle": OneCycle}[name]()
    options = {"gradient_clip_val": 0.01} if name == "stronger_clipping" else {}
    result = fit(model, root_dir, **options)
    result["lrs"] = [group["lr"] for opt in result["trainer"].optimizers for group in opt.param_groups]
    return result
