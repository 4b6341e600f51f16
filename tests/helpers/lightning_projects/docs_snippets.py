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

Each `run_<snippet>(root_dir)` returns what the docs-snippets test (test_*_docs_snippets.py)
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
from callbacks.early_stopping import EarlyStoppingReason
from trainer import Callback, LightningModule, Trainer
from trainer.loggers.logger import Logger, rank_zero_experiment
from trainer.utilities import rank_zero_only

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


def fit(model: LightningModule, root_dir: Path, val: bool = True, ckpt_path: Any = None, shuffle: bool = True,
        **options: Any) -> dict[str, Any]:
    """`shuffle=False` for the runs that resume: Lightning does not restore the random streams a
    shuffling loader draws from (this package does), so only an unshuffled resume compares."""
    options = {**QUIET, "max_epochs": 3, **options}
    trainer = Trainer(default_root_dir=root_dir, **options)
    trainer.fit(model, loader(shuffle=shuffle), loader(16, shuffle=False, seed=2) if val else None, ckpt_path=ckpt_path)
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
    after_epoch = 5

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None) -> None:
        if self.current_epoch > self.after_epoch:
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
    lists = False  # the page returns `optimizer, scheduler`, which Lightning 2.6 refuses

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=self.trainer.estimated_stepping_batches)
        return ([optimizer], [scheduler]) if self.lists else (optimizer, scheduler)


def run_optimization(root_dir: Path, name: str, **attributes: Any) -> dict[str, Any]:
    """`attributes` set on the module: `after_epoch` (StrongerClipping), `lists` (OneCycle)."""
    torch.manual_seed(0)
    model = {"scheduler_dict": SchedulerDict, "stronger_clipping": StrongerClipping, "unwrapped_step": UnwrappedStep,
             "own_scheduler": OwnScheduler, "one_cycle": OneCycle}[name]()
    for key, value in attributes.items():
        setattr(model, key, value)
    options = {"gradient_clip_val": 0.01} if name == "stronger_clipping" else {}
    result = fit(model, root_dir, **options)
    result["lrs"] = [group["lr"] for opt in result["trainer"].optimizers for group in opt.param_groups]
    return result


# ------------------------------------------------------------------------- early stopping page
class MyEarlyStopping(EarlyStopping):
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # override this to disable early stopping at the end of val loop
        pass

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # instead, do it at the end of training loop
        self._run_early_stopping_check(trainer)


def run_early_stopping(root_dir: Path, name: str) -> dict[str, Any]:
    """`patience`: val_loss falls, so mode="max" never improves; `threshold`: reached at once;
    `subclass`: the page's `MyEarlyStopping`, with validation twice an epoch (checks at validation's
    end, which the subclass turns off) and the check moved to the end of training."""
    torch.manual_seed(0)
    options: dict[str, Any] = {}
    if name == "patience":
        early_stopping = EarlyStopping(monitor="val_loss", patience=1, mode="max")
    elif name == "threshold":
        early_stopping = EarlyStopping(monitor="val_loss", stopping_threshold=100.0)
    else:
        early_stopping = MyEarlyStopping(monitor="val_loss", patience=1, mode="max")
        options["val_check_interval"] = 0.5
    result = fit(Base(), root_dir, callbacks=[early_stopping], max_epochs=4, **options)
    printed = []
    if early_stopping.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        printed.append("Training stopped due to patience exhaustion")
    elif early_stopping.stopping_reason == EarlyStoppingReason.STOPPING_THRESHOLD:
        printed.append("Training stopped due to reaching stopping threshold")
    elif early_stopping.stopping_reason == EarlyStoppingReason.NOT_STOPPED:
        printed.append("Training completed normally without early stopping")
    return {**result, "printed": printed, "message": early_stopping.stopping_reason_message,
            "stopped_epoch": early_stopping.stopped_epoch, "wait_count": early_stopping.wait_count,
            "state": early_stopping.state_dict()}


# -------------------------------------------------------------------------- checkpointing pages
class MyLightningModule(Base):
    def __init__(self, learning_rate: float, another_parameter: str, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loaded: list[Any] = []

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["something_cool_i_want_to_save"] = {"epoch_seen": self.current_epoch}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.loaded.append(checkpoint["something_cool_i_want_to_save"])


class LitCallback(Callback):
    def __init__(self) -> None:
        self.loaded: list[Any] = []

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint["something_cool_i_want_to_save"] = {"step_seen": trainer.global_step}

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.loaded.append(checkpoint["something_cool_i_want_to_save"])


class MyPrintingCallback(Callback):
    def __init__(self) -> None:
        self.printed: list[str] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.printed.append("Training is starting")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.printed.append("Training is ending")


def run_top_k(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    checkpoint_callback = ModelCheckpoint(dirpath=root_dir / "my/path/", save_top_k=2, monitor="val_loss")
    printing = MyPrintingCallback()
    result = fit(Base(), root_dir, callbacks=[checkpoint_callback, printing])
    trainer = result["trainer"]
    assert trainer.checkpoint_callback is checkpoint_callback
    return {**result, "files": sorted(p.name for p in (root_dir / "my/path").iterdir()),
            "best": Path(checkpoint_callback.best_model_path).name, "last": checkpoint_callback.last_model_path,
            "best_k": sorted(Path(p).name for p in checkpoint_callback.best_k_models), "printed": printing.printed}


def run_save_and_load(root_dir: Path) -> dict[str, Any]:
    """`trainer.save_checkpoint` then `load_from_checkpoint` (with a hyperparameter overridden),
    the checkpoint's `hyper_parameters`, and the module's and a callback's own entries read back
    on a resume."""
    torch.manual_seed(0)
    model = MyLightningModule(learning_rate=0.1, another_parameter="a")
    callback = LitCallback()
    result = fit(model, root_dir, callbacks=[callback], max_epochs=2, shuffle=False)
    result["trainer"].save_checkpoint(root_dir / "example.ckpt")
    new_model = MyLightningModule.load_from_checkpoint(checkpoint_path=root_dir / "example.ckpt")
    changed = MyLightningModule.load_from_checkpoint(root_dir / "example.ckpt", learning_rate=0.05)
    checkpoint = torch.load(root_dir / "example.ckpt", map_location=lambda storage, loc: storage, weights_only=True)
    resumed, resumed_callback = MyLightningModule(learning_rate=0.1, another_parameter="a"), LitCallback()
    again = fit(resumed, root_dir / "resumed", callbacks=[resumed_callback], max_epochs=3,
                ckpt_path=root_dir / "example.ckpt", shuffle=False)
    return {**result, "new_model": new_model, "hparams": dict(new_model.hparams), "changed": dict(changed.hparams),
            "saved_hparams": dict(checkpoint["hyper_parameters"]), "cool": checkpoint["something_cool_i_want_to_save"],
            "module_loaded": new_model.loaded + resumed.loaded, "callback_loaded": resumed_callback.loaded,
            "resumed": again["model"], "resumed_step": again["trainer"].global_step}


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)


class PartialModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        # This model only trains the decoder, we don't save the encoder
        self.encoder = Encoder().requires_grad_(False)
        self.decoder = nn.Linear(3, 1)
        # Set to False because we only care about the decoder
        self.strict_loading = False

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        # Don't save the encoder, it is not being trained
        return {k: v for k, v in super().state_dict(*args, **kwargs).items() if "encoder" not in k}

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.decoder(self.encoder(x)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.decoder.parameters(), lr=0.1)


def run_strict_loading(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    first = fit(PartialModel(), root_dir, val=False, max_epochs=1, shuffle=False)
    first["trainer"].save_checkpoint(root_dir / "partial.ckpt")
    saved = sorted(torch.load(root_dir / "partial.ckpt", weights_only=True)["state_dict"])
    torch.manual_seed(1)  # another encoder: the checkpoint does not have one
    model = PartialModel()
    result = fit(model, root_dir / "resumed", val=False, max_epochs=2, ckpt_path=root_dir / "partial.ckpt", shuffle=False)
    return {**result, "saved_keys": saved, "weights": {k: v.clone() for k, v in nn.Module.state_dict(model).items()}}


# -------------------------------------------------------------- evaluation (intermediate) page
def class_loader(n: int, seed: int, noise: float = 0.0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)
    return DataLoader(TensorDataset(x + noise * torch.randn(n, 4, generator=g), y), batch_size=8)


class EvalModel(LightningModule):
    """The page's test_dataloader with three loaders, test_step by dataloader_idx with both
    naming styles, and outputs kept per loader for on_test_epoch_end."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)
        self.test_outputs: dict[int, dict[str, list[Tensor]]] = {}

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def test_dataloader(self) -> Any:
        return [class_loader(16, 5), class_loader(16, 5, noise=0.5), class_loader(8, 6, noise=2.0)]

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        x, y = batch
        y_hat = self(x)
        loss = nn.functional.cross_entropy(y_hat, y)
        acc = (y_hat.argmax(dim=1) == y).float().mean()
        self.log("test_loss", loss, add_dataloader_idx=True)
        self.log("test_acc", acc, add_dataloader_idx=True)
        dataloader_names = {0: "clean", 1: "noisy", 2: "adversarial"}
        dataset_name = dataloader_names.get(dataloader_idx, f"dataset_{dataloader_idx}")
        self.log(f"test_loss_{dataset_name}", loss, add_dataloader_idx=False)
        if dataloader_idx not in self.test_outputs:
            self.test_outputs[dataloader_idx] = {"predictions": [], "targets": []}
        self.test_outputs[dataloader_idx]["predictions"].append(y_hat)
        self.test_outputs[dataloader_idx]["targets"].append(y)
        return loss

    def on_test_epoch_end(self) -> None:
        for dataloader_idx, outputs in self.test_outputs.items():
            all_predictions = torch.cat(outputs["predictions"], dim=0)
            all_targets = torch.cat(outputs["targets"], dim=0)
            overall_accuracy = (all_predictions.argmax(dim=1) == all_targets).float().mean()
            self.log(f"test_overall_acc_dataloader_{dataloader_idx}", overall_accuracy)
        self.test_outputs.clear()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def run_evaluation(root_dir: Path) -> dict[str, Any]:
    """Fit, then `trainer.test(model)` on the fitted weights ("final") and the page's four
    `trainer.test` calls, with the callback's `last_model_path` beside "last" (which file "last"
    is differs on purpose: the deliberate differences in the docs)."""
    torch.manual_seed(0)
    model = EvalModel()
    checkpoint = ModelCheckpoint(monitor="val_loss", save_last=True)
    trainer = Trainer(default_root_dir=root_dir, max_epochs=3, callbacks=[checkpoint], **QUIET)
    trainer.fit(model, class_loader(32, 1), class_loader(16, 2))
    results = {"final": trainer.test(model, verbose=False),
               "best": trainer.test(ckpt_path="best", verbose=False),
               "last": trainer.test(ckpt_path="last", verbose=False),
               "last_model_path": trainer.test(ckpt_path=checkpoint.last_model_path, verbose=False),
               "path": trainer.test(ckpt_path=checkpoint.best_model_path, verbose=False),
               "model": trainer.test(model, verbose=False)}
    return {"model": model, "trainer": trainer, "best": Path(checkpoint.best_model_path).name,
            "results": {key: [{k: float(v) for k, v in row.items()} for row in value] for key, value in results.items()}}


# ------------------------------------------------------------------------------- logging page
class MyLogger(Logger):
    """The page's custom logger, recording its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    @property
    def name(self) -> str:
        return "MyLogger"

    @property
    def version(self) -> str:
        return "0.1"

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        return self.calls

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("log_hyperparams",))

    @rank_zero_only
    def log_metrics(self, metrics: Any, step: Any = None) -> None:
        self.calls.append(("log_metrics", tuple(sorted(metrics))))

    @rank_zero_only
    def save(self) -> None:
        self.calls.append(("save",))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.calls.append(("finalize", status))


class LoggingModel(Base):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.compute_loss(batch)
        self.log("my_loss", loss, on_step=True, on_epoch=True, prog_bar=True, logger=True)
        return loss


def run_custom_logger(root_dir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    logger = MyLogger()
    result = fit(LoggingModel(), root_dir, logger=logger, log_every_n_steps=2)
    result["trainer"].validate(result["model"], loader(16, shuffle=False, seed=3), verbose=False)
    return {**result, "calls": logger.calls, "experiment": logger.experiment is logger.calls}
