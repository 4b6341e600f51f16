"""The UvA deep-learning course's first three notebooks (Lightning-AI/tutorials,
course_UvA-DL/01-introduction-to-pytorch, 02-activation-functions,
03-initialization-and-optimization): their networks, data and hand-written loops, at toy size.

* 01: `XORDataset`, `SimpleClassifier` (2-4-1 with tanh), `BCEWithLogitsLoss`, SGD at 0.1, the
  notebook's `train_model` (zero_grad, backward, step; no validation) and `eval_model` (the
  accuracy of the sigmoid outputs thresholded at 0.5). A peek batch (`next(iter(data_loader))`)
  is drawn before training, as the notebook does.
* 02: six hand-written activation functions (`Sigmoid` ... `Swish`), `BaseNetwork` (an MLP in an
  `nn.Sequential`), and `train_model`: SGD with momentum, validation accuracy every epoch, the
  best model saved (`.config` + `.tar`) on a strictly better accuracy, early stopping after
  `patience` epochs without one, the best model loaded back and tested.
* 03: `BaseNetwork` in an `nn.ModuleList`, `kaiming_init`, the notebook's own optimizers
  (`OptimizerTemplate` with `SGD`, `SGDMomentum`, `Adam`: plain classes, *not*
  `torch.optim.Optimizer`), and `train_model` (best model by validation accuracy, no early
  stopping, training losses and accuracies recorded).

Shrunk or substituted: FashionMNIST is 1x8x8 images of a seeded generator (416 split 384/32 by
`random_split` as the notebooks split theirs, drawing from the data's own generator so every run
gets the same split; 32 test images); hidden sizes [32, 16, 16, 8];
batches of 16; a few epochs; no `pin_memory` (no GPU here), no tqdm, no plots. Validation and
test sets of 32 in batches of 16 keep an epoch-mean accuracy exact in float32, so the port's
logged accuracy and the notebook's Python float compare with `==`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as data

HIDDEN = [32, 16, 16, 8]
INPUT = 64
BATCH = 16


# ----------------------------------------------------------------------------------- 01: XOR
class XORDataset(data.Dataset):
    def __init__(self, size: int, std: float = 0.1) -> None:
        super().__init__()
        self.size = size
        self.std = std
        data_ = torch.randint(low=0, high=2, size=(size, 2), dtype=torch.float32)
        self.label = (data_.sum(dim=1) == 1).to(torch.long)
        self.data = data_ + std * torch.randn(data_.shape)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[idx], self.label[idx]


class SimpleClassifier(nn.Module):
    def __init__(self, num_inputs: int, num_hidden: int, num_outputs: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(num_inputs, num_hidden)
        self.act_fn = nn.Tanh()
        self.linear2 = nn.Linear(num_hidden, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.act_fn(self.linear1(x)))


def xor_data() -> tuple[data.DataLoader, data.DataLoader]:
    """The notebook's cells in order: a dataset of 200 and a peek at one shuffled batch, then the
    training set (200 instead of 1000) and the test set (96 instead of 500)."""
    peek = data.DataLoader(XORDataset(size=200), batch_size=8, shuffle=True)
    next(iter(peek))
    train_loader = data.DataLoader(XORDataset(size=200), batch_size=128, shuffle=True)
    test_loader = data.DataLoader(XORDataset(size=96), batch_size=32, shuffle=False, drop_last=False)
    return train_loader, test_loader


def xor_notebook(num_epochs: int) -> tuple[SimpleClassifier, float]:
    torch.manual_seed(42)
    model = SimpleClassifier(num_inputs=2, num_hidden=4, num_outputs=1)
    loss_module = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader, test_loader = xor_data()
    model.train()
    for _ in range(num_epochs):
        for data_inputs, data_labels in train_loader:
            preds = model(data_inputs).squeeze(dim=1)
            loss = loss_module(preds, data_labels.float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    true_preds, num_preds = 0.0, 0.0
    with torch.no_grad():
        for data_inputs, data_labels in test_loader:
            pred_labels = (torch.sigmoid(model(data_inputs).squeeze(dim=1)) >= 0.5).long()
            true_preds += (pred_labels == data_labels).sum()
            num_preds += data_labels.shape[0]
    return model, float(true_preds / num_preds)


# ------------------------------------------------------------ FashionMNIST-like (02 and 03)
def fashion_sets(seed: int = 7) -> tuple[data.Dataset, data.Dataset, data.Dataset]:
    """(train_set, val_set, test_set): noise images with a brighter patch (row and half row)
    that gives the label, normalised as the notebooks' transforms do; split by `random_split`."""
    generator = torch.Generator().manual_seed(seed)

    def images(n: int) -> data.TensorDataset:
        labels = torch.randint(0, 10, (n,), generator=generator)
        x = torch.rand(n, 1, 8, 8, generator=generator) * 0.5
        for i, label in enumerate(labels.tolist()):
            x[i, 0, label % 8, 4 * (label // 8):4 * (label // 8) + 4] += 0.5
        return data.TensorDataset((x - 0.5) / 0.5, labels)

    train_set, val_set = data.random_split(images(416), [384, 32], generator=generator)
    return train_set, val_set, images(32)


def accuracy(net: nn.Module, data_loader: data.DataLoader) -> float:
    """The notebooks' `test_model`."""
    net.eval()
    true_preds, count = 0.0, 0
    for imgs, labels in data_loader:
        with torch.no_grad():
            preds = net(imgs).argmax(dim=-1)
            true_preds += (preds == labels).sum().item()
            count += labels.shape[0]
    return true_preds / count


def set_seed(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)


def save_model(model: nn.Module, model_path: str, model_name: str) -> None:
    os.makedirs(model_path, exist_ok=True)
    with open(os.path.join(model_path, model_name + ".config"), "w") as f:
        json.dump(model.config, f)  # type: ignore[arg-type]
    torch.save(model.state_dict(), os.path.join(model_path, model_name + ".tar"))


def load_model(model_path: str, model_name: str, net: nn.Module) -> nn.Module:
    net.load_state_dict(torch.load(os.path.join(model_path, model_name + ".tar")))
    return net


# ------------------------------------------------------------------- 02: activation functions
class ActivationFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.name = self.__class__.__name__
        self.config: dict[str, Any] = {"name": self.name}


class Sigmoid(ActivationFunction):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1 / (1 + torch.exp(-x))


class Tanh(ActivationFunction):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_exp, neg_x_exp = torch.exp(x), torch.exp(-x)
        return (x_exp - neg_x_exp) / (x_exp + neg_x_exp)


class ReLU(ActivationFunction):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (x > 0).float()


class LeakyReLU(ActivationFunction):
    def __init__(self, alpha: float = 0.1) -> None:
        super().__init__()
        self.config["alpha"] = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, self.config["alpha"] * x)


class ELU(ActivationFunction):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, torch.exp(x) - 1)


class Swish(ActivationFunction):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


act_fn_by_name: dict[str, type[ActivationFunction]] = {
    "sigmoid": Sigmoid, "tanh": Tanh, "relu": ReLU, "leakyrelu": LeakyReLU, "elu": ELU, "swish": Swish}


class ActivationNetwork(nn.Module):
    """02's `BaseNetwork`."""

    def __init__(self, act_fn: ActivationFunction, input_size: int = INPUT, num_classes: int = 10,
                 hidden_sizes: list[int] = HIDDEN) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        layer_size_last = input_size
        for layer_size in hidden_sizes:
            layers += [nn.Linear(layer_size_last, layer_size), act_fn]
            layer_size_last = layer_size
        layers += [nn.Linear(hidden_sizes[-1], num_classes)]
        self.layers = nn.Sequential(*layers)
        self.config = {"act_fn": act_fn.config, "input_size": input_size, "num_classes": num_classes,
                       "hidden_sizes": hidden_sizes}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x.view(x.size(0), -1))


def activation_notebook(act_fn_name: str, path: str, max_epochs: int, patience: int) -> dict[str, Any]:
    """02's cell `set_seed(42); net = BaseNetwork(act_fn); train_model(net, name)`."""
    train_set, val_set, test_set = fashion_sets()
    val_loader = data.DataLoader(val_set, batch_size=BATCH, shuffle=False, drop_last=False)
    test_loader = data.DataLoader(test_set, batch_size=BATCH, shuffle=False, drop_last=False)
    set_seed(42)
    net = ActivationNetwork(act_fn=act_fn_by_name[act_fn_name]())
    name = f"FashionMNIST_{act_fn_name}"
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    loss_module = nn.CrossEntropyLoss()
    train_loader_local = data.DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True)
    val_scores: list[float] = []
    best_val_epoch = -1
    for epoch in range(max_epochs):
        net.train()
        for imgs, labels in train_loader_local:
            optimizer.zero_grad()
            loss = loss_module(net(imgs), labels)
            loss.backward()
            optimizer.step()
        val_acc = accuracy(net, val_loader)
        val_scores.append(val_acc)
        if len(val_scores) == 1 or val_acc > val_scores[best_val_epoch]:
            save_model(net, path, name)
            best_val_epoch = epoch
        elif best_val_epoch <= epoch - patience:
            break
    last = {k: v.clone() for k, v in net.state_dict().items()}
    load_model(path, name, net=net)
    return {"net": net, "last": last, "val_scores": val_scores, "best_epoch": best_val_epoch,
            "test_acc": accuracy(net, test_loader)}


# ----------------------------------------------------------- 03: initialisation, optimizers
class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class InitNetwork(nn.Module):
    """03's `BaseNetwork` (its layers in an `nn.ModuleList`)."""

    def __init__(self, act_fn: nn.Module, input_size: int = INPUT, num_classes: int = 10,
                 hidden_sizes: list[int] = HIDDEN) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        layer_sizes = [input_size] + hidden_sizes
        for layer_index in range(1, len(layer_sizes)):
            layers += [nn.Linear(layer_sizes[layer_index - 1], layer_sizes[layer_index]), act_fn]
        layers += [nn.Linear(layer_sizes[-1], num_classes)]
        self.layers = nn.ModuleList(layers)
        self.config = {"act_fn": act_fn.__class__.__name__, "input_size": input_size,
                       "num_classes": num_classes, "hidden_sizes": hidden_sizes}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.size(0), -1)
        for layer in self.layers:
            x = layer(x)
        return x


def kaiming_init(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        if name.endswith(".bias"):
            param.data.fill_(0)
        elif name.startswith("layers.0"):
            param.data.normal_(0, 1 / math.sqrt(param.shape[1]))
        else:
            param.data.normal_(0, math.sqrt(2) / math.sqrt(param.shape[1]))


class OptimizerTemplate:
    def __init__(self, params: Any, lr: float) -> None:
        self.params = list(params)
        self.lr = lr

    def zero_grad(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            self.update_param(p)

    def update_param(self, p: torch.Tensor) -> None:
        raise NotImplementedError


class SGD(OptimizerTemplate):
    def update_param(self, p: torch.Tensor) -> None:
        p.add_(-self.lr * p.grad)  # type: ignore[operator]


class SGDMomentum(OptimizerTemplate):
    def __init__(self, params: Any, lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = momentum
        self.param_momentum = {p: torch.zeros_like(p.data) for p in self.params}

    def update_param(self, p: torch.Tensor) -> None:
        self.param_momentum[p] = (1 - self.momentum) * p.grad + self.momentum * self.param_momentum[p]
        p.add_(-self.lr * self.param_momentum[p])


class Adam(OptimizerTemplate):
    def __init__(self, params: Any, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        super().__init__(params, lr)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.param_step = {p: 0 for p in self.params}
        self.param_momentum = {p: torch.zeros_like(p.data) for p in self.params}
        self.param_2nd_momentum = {p: torch.zeros_like(p.data) for p in self.params}

    def update_param(self, p: torch.Tensor) -> None:
        self.param_step[p] += 1
        self.param_momentum[p] = (1 - self.beta1) * p.grad + self.beta1 * self.param_momentum[p]
        self.param_2nd_momentum[p] = (1 - self.beta2) * (p.grad) ** 2 + self.beta2 * self.param_2nd_momentum[p]
        bias_correction_1 = 1 - self.beta1 ** self.param_step[p]
        bias_correction_2 = 1 - self.beta2 ** self.param_step[p]
        p_2nd_mom = self.param_2nd_momentum[p] / bias_correction_2
        p_mom = self.param_momentum[p] / bias_correction_1
        p_lr = self.lr / (torch.sqrt(p_2nd_mom) + self.eps)
        p.add_(-p_lr * p_mom)


#: The notebook's three runs: name -> the `optim_func` it passes to `train_model`.
OPTIMIZERS: dict[str, Callable[[Any], OptimizerTemplate]] = {
    "SGD": lambda params: SGD(params, lr=1e-1),
    "SGDMom": lambda params: SGDMomentum(params, lr=1e-1, momentum=0.9),
    "Adam": lambda params: Adam(params, lr=1e-3),
}


def init_base_model() -> InitNetwork:
    """03's `base_model`, after its data cells (their peek batch included)."""
    set_seed(42)
    train_set, _, _ = fashion_sets()
    next(iter(data.DataLoader(train_set, batch_size=64, shuffle=True, drop_last=False)))
    base_model = InitNetwork(act_fn=nn.ReLU())
    kaiming_init(base_model)
    return base_model


def optimizer_notebook(net: nn.Module, optimizer_name: str, path: str, max_epochs: int) -> dict[str, Any]:
    """03's `train_model(net, "FashionMNIST_<name>", optim_func, max_epochs, batch_size)`."""
    train_set, val_set, test_set = fashion_sets()
    val_loader = data.DataLoader(val_set, batch_size=BATCH, shuffle=False, drop_last=False)
    test_loader = data.DataLoader(test_set, batch_size=BATCH, shuffle=False, drop_last=False)
    name = f"FashionMNIST_{optimizer_name}"
    optimizer = OPTIMIZERS[optimizer_name](net.parameters())
    loss_module = nn.CrossEntropyLoss()
    train_loader_local = data.DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True)
    val_scores: list[float] = []
    train_losses: list[float] = []
    best_val_epoch = -1
    for epoch in range(max_epochs):
        net.train()
        for imgs, labels in train_loader_local:
            optimizer.zero_grad()
            loss = loss_module(net(imgs), labels)
            loss.backward()
            optimizer.step()
            train_losses.append(loss.item())
        val_scores.append(accuracy(net, val_loader))
        if len(val_scores) == 1 or val_scores[-1] > val_scores[best_val_epoch]:
            save_model(net, path, name)
            best_val_epoch = epoch
    last = {k: v.clone() for k, v in net.state_dict().items()}
    load_model(path, name, net=net)
    return {"net": net, "last": last, "val_scores": val_scores, "train_losses": train_losses,
            "best_epoch": best_val_epoch, "test_acc": accuracy(net, test_loader)}
