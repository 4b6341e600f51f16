"""The UvA deep-learning course's notebooks 01-03 (Lightning-AI/tutorials, course_UvA-DL), their
training ported to a LightningModule and `Trainer(...).fit` as a user would port it, with this
package's imports. The notebooks' own networks, data and hand-written loops are in
tests/helpers/tutorials/uva_intro.py; tests/tutorials/test_uva_intro.py trains each port under
this package and under Lightning, and the notebook's loop, in one process and compares them.

* 01 (`xor_main`): the XOR classifier, `training_step` with the notebook's loss, `test_step`
  logging the accuracy; no validation, as the notebook has none.
* 02 (`activation_main`): one activation function's MLP, `val_acc` logged per epoch,
  `ModelCheckpoint(monitor="val_acc", mode="max", save_weights_only=True)` for the notebook's
  "save on a better validation accuracy", `EarlyStopping(monitor="val_acc", mode="max",
  patience=...)` for its early stop, then `trainer.test(ckpt_path="best")`.
* 03 (`optimizer_main`): the notebook's own optimizers, which are plain classes (not
  `torch.optim.Optimizer`). `way="manual"`: the module keeps the notebook's optimizer and steps
  it itself under manual optimization (`configure_optimizers` builds it and returns None).
  `way="torch"`: the same update rules rewritten as `torch.optim.Optimizer` subclasses
  (per-parameter state in `self.state`, `step(closure=None)` calling the closure when given),
  returned from `configure_optimizers` under automatic optimization. `way="template"` returns
  the notebook's object as it is, which both frameworks refuse.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.utils.data as data

import trainer as pl
from callbacks import EarlyStopping, ModelCheckpoint
from tests.helpers.tutorials.uva_intro import (
    BATCH, OPTIMIZERS, ActivationNetwork, InitNetwork, act_fn_by_name, fashion_sets, init_base_model, set_seed,
    xor_data,
)

QUIET: dict[str, Any] = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)


# ----------------------------------------------------------------------------------- 01: XOR
class XORClassifier(pl.LightningModule):
    def __init__(self, num_inputs: int, num_hidden: int, num_outputs: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(num_inputs, num_hidden)
        self.act_fn = nn.Tanh()
        self.linear2 = nn.Linear(num_hidden, num_outputs)
        self.loss_module = nn.BCEWithLogitsLoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.act_fn(self.linear1(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        data_inputs, data_labels = batch
        loss = self.loss_module(self(data_inputs).squeeze(dim=1), data_labels.float())
        self.log("train_loss", loss)
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> None:
        data_inputs, data_labels = batch
        pred_labels = (torch.sigmoid(self(data_inputs).squeeze(dim=1)) >= 0.5).long()
        self.log("test_acc", (pred_labels == data_labels).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def xor_main(root_dir: Path, num_epochs: int = 4) -> dict[str, Any]:
    torch.manual_seed(42)
    model = XORClassifier(num_inputs=2, num_hidden=4, num_outputs=1)
    train_loader, test_loader = xor_data()
    trainer = pl.Trainer(default_root_dir=root_dir, max_epochs=num_epochs, enable_checkpointing=False, **QUIET)
    trainer.fit(model, train_loader)
    test = trainer.test(model, test_loader)
    return {"model": model, "trainer": trainer, "test": test[0]}


# ------------------------------------------------------------------- 02: activation functions
class ActivationModule(pl.LightningModule):
    def __init__(self, act_fn_name: str) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = ActivationNetwork(act_fn=act_fn_by_name[act_fn_name]())
        self.loss_module = nn.CrossEntropyLoss()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        imgs, labels = batch
        preds = self.net(imgs)
        loss = self.loss_module(preds, labels)
        self.log("train_acc", (preds.argmax(dim=-1) == labels).float().mean(), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        self.log("val_acc", (self.net(imgs).argmax(dim=-1) == labels).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        self.log("test_acc", (self.net(imgs).argmax(dim=-1) == labels).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-2, momentum=0.9)


def activation_main(root_dir: Path, act_fn_name: str = "relu", max_epochs: int = 6, patience: int = 2) -> dict[str, Any]:
    train_set, val_set, test_set = fashion_sets()
    val_loader = data.DataLoader(val_set, batch_size=BATCH, shuffle=False, drop_last=False)
    test_loader = data.DataLoader(test_set, batch_size=BATCH, shuffle=False, drop_last=False)
    set_seed(42)
    model = ActivationModule(act_fn_name)
    train_loader = data.DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True)
    checkpoint = ModelCheckpoint(monitor="val_acc", mode="max", save_weights_only=True)
    stop = EarlyStopping(monitor="val_acc", mode="max", patience=patience)
    trainer = pl.Trainer(default_root_dir=root_dir, max_epochs=max_epochs, callbacks=[checkpoint, stop], **QUIET)
    trainer.fit(model, train_loader, val_loader)
    last = {k: v.clone() for k, v in model.net.state_dict().items()}
    test = trainer.test(model, test_loader, ckpt_path="best")
    return {"model": model, "net": model.net, "last": last, "trainer": trainer, "test": test[0],
            "best": Path(checkpoint.best_model_path).name, "best_score": float(checkpoint.best_model_score),
            "stopped_epoch": stop.stopped_epoch}


# ----------------------------------------------------------- 03: initialisation, optimizers
class TorchTemplate(torch.optim.Optimizer):
    """The notebook's `OptimizerTemplate` on torch's interface: state per parameter in
    `self.state` (so a checkpoint carries it), and `step(closure=None)`."""

    def __init__(self, params: Any, lr: float, **defaults: float) -> None:
        super().__init__(params, dict(lr=lr, **defaults))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update_param(p, group, self.state[p])
        return loss

    def update_param(self, p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError


class TorchSGD(TorchTemplate):
    def update_param(self, p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        p.add_(-group["lr"] * p.grad)


class TorchSGDMomentum(TorchTemplate):
    def update_param(self, p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        momentum = group["momentum"]
        previous = state.get("momentum", torch.zeros_like(p))
        state["momentum"] = (1 - momentum) * p.grad + momentum * previous
        p.add_(-group["lr"] * state["momentum"])


class TorchAdam(TorchTemplate):
    def update_param(self, p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        beta1, beta2 = group["beta1"], group["beta2"]
        if not state:
            state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
        state["step"] += 1
        state["m"] = (1 - beta1) * p.grad + beta1 * state["m"]
        state["v"] = (1 - beta2) * (p.grad) ** 2 + beta2 * state["v"]
        p_2nd_mom = state["v"] / (1 - beta2 ** state["step"])
        p_mom = state["m"] / (1 - beta1 ** state["step"])
        p.add_(-(group["lr"] / (torch.sqrt(p_2nd_mom) + group["eps"])) * p_mom)


TORCH_OPTIMIZERS = {
    "SGD": lambda params: TorchSGD(params, lr=1e-1),
    "SGDMom": lambda params: TorchSGDMomentum(params, lr=1e-1, momentum=0.9),
    "Adam": lambda params: TorchAdam(params, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8),
}


class OptimizerModule(pl.LightningModule):
    def __init__(self, net: InitNetwork, optimizer_name: str, way: str) -> None:
        super().__init__()
        self.net = net
        self.optimizer_name = optimizer_name
        self.way = way
        self.automatic_optimization = way != "manual"
        self.loss_module = nn.CrossEntropyLoss()
        self.train_losses: list[float] = []

    def configure_optimizers(self) -> Any:
        if self.way == "torch":
            return TORCH_OPTIMIZERS[self.optimizer_name](self.parameters())
        optimizer = OPTIMIZERS[self.optimizer_name](self.parameters())
        if self.way == "template":
            return optimizer
        self.notebook_optimizer = optimizer  # stepped by training_step itself
        return None

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        imgs, labels = batch
        if self.automatic_optimization:
            loss = self.loss_module(self.net(imgs), labels)
        else:
            self.notebook_optimizer.zero_grad()
            loss = self.loss_module(self.net(imgs), labels)
            self.manual_backward(loss)
            self.notebook_optimizer.step()
        self.train_losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        self.log("val_acc", (self.net(imgs).argmax(dim=-1) == labels).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        self.log("test_acc", (self.net(imgs).argmax(dim=-1) == labels).float().mean())


class ValidationScores(pl.Callback):
    """The epoch's `val_acc` after each validation of fit (the notebook's `val_scores`)."""

    def __init__(self) -> None:
        self.scores: list[float] = []

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.scores.append(float(trainer.callback_metrics["val_acc"]))


def optimizer_main(root_dir: Path, optimizer_name: str = "Adam", way: str = "manual", max_epochs: int = 3) -> dict[str, Any]:
    """`way="torch"` keeps the notebook's best model by `ModelCheckpoint` and tests it; with
    `way="manual"` the Trainer takes no optimizer step (`global_step` stays 0, in Lightning too),
    so no step-driven checkpoint is written: the last weights are tested."""
    base_model = init_base_model()
    train_set, val_set, test_set = fashion_sets()
    val_loader = data.DataLoader(val_set, batch_size=BATCH, shuffle=False, drop_last=False)
    test_loader = data.DataLoader(test_set, batch_size=BATCH, shuffle=False, drop_last=False)
    model = OptimizerModule(copy.deepcopy(base_model), optimizer_name, way)
    train_loader = data.DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True)
    scores = ValidationScores()
    checkpoint = ModelCheckpoint(monitor="val_acc", mode="max", save_weights_only=True)
    trainer = pl.Trainer(default_root_dir=root_dir, max_epochs=max_epochs, callbacks=[scores, checkpoint], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, train_loader, val_loader)
    last = {k: v.clone() for k, v in model.net.state_dict().items()}
    test = trainer.test(model, test_loader, ckpt_path="best" if way == "torch" else None)
    return {"model": model, "net": model.net, "last": last, "trainer": trainer, "test": test[0],
            "val_scores": scores.scores, "best": Path(checkpoint.best_model_path).name,
            "warnings": [str(w.message) for w in caught]}
