"""Scripts shaped like pytorch/examples, each written out twice by its tests: the original's
own loop (here) and a `trainer.Module` + `Trainer` port (tests/test_script_parity2.py).

Models are the examples' architectures at toy sizes, data is synthetic and shaped like each
example's, seeds and loader settings are the examples'. A model class is a `Module` so the
same code serves both runs; the original loop uses it as a plain `nn.Module`. Each original
returns its model and the evaluation numbers the script prints.

Amp/bf16 versions of the originals follow PyTorch's autocast recipe: autocast around each
forward and loss, one GradScaler (`scale(loss).backward()`, `step`, `update`).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.helpers.cpu import autocast_supports
from trainer import Module

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}


def autocast_for(precision: str) -> Callable[[], Any]:
    dtype = DTYPES[precision]
    return (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext


def scaler_for(precision: str) -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", enabled=precision == "amp")


# ------------------------------------------------------------------ time_sequence_prediction
# Two LSTMCells in float64, LBFGS(lr=0.8) over the whole training set once per "step", then a
# test pass under no_grad that also predicts `FUTURE` values past the input.
FUTURE = 6
TSP_STEPS = 3


def sine_waves(n: int = 7, length: int = 24, period: int = 20) -> np.ndarray:
    """generate_sine_wave.py at a smaller size (its own seed, 2)."""
    rs = np.random.RandomState(2)
    x = np.arange(length) + rs.randint(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


def tsp_data() -> tuple[list[Any], list[Any]]:
    data = sine_waves()
    train = (torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:]))
    test = (torch.from_numpy(data[:3, :-1]), torch.from_numpy(data[:3, 1:]))
    return [train], [test]


class Sequence(Module):
    def __init__(self, hidden: int = 10) -> None:
        super().__init__()
        self.automatic_optimization = False  # LBFGS evaluates the loss itself: a closure
        self.hidden_size = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.losses: list[float] = []       # the script prints every closure's loss
        self.test_losses: list[float] = []  # and the test loss after every step

    def forward(self, input: torch.Tensor, future: int = 0) -> torch.Tensor:
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)

    def test_loss(self, batch: Any) -> torch.Tensor:
        test_input, test_target = batch
        pred = self(test_input, future=FUTURE)
        return F.mse_loss(pred[:, :-FUTURE], test_target)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        input, target = batch
        opt = self.optimizers()

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = F.mse_loss(self(input), target)
            self.losses.append(loss.item())
            self.manual_backward(loss)
            return loss

        opt.step(closure=closure)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.test_losses.append(self.test_loss(batch).item())

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.8)


def make_sequence() -> Sequence:
    np.random.seed(0)
    torch.manual_seed(0)
    return Sequence().double()


def original_time_sequence(precision: str, steps: int = TSP_STEPS) -> Sequence:
    seq = make_sequence()
    (train,), (test,) = tsp_data()
    input, target = train
    autocast = autocast_for(precision)
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
    for _ in range(steps):
        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            with autocast():
                loss = F.mse_loss(seq(input), target)
            seq.losses.append(loss.item())
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad(), autocast():
            seq.test_losses.append(seq.test_loss(test).item())
    return seq


# ------------------------------------------------------------------------------ mnist_rnn
# An LSTM over the rows of each image, BatchNorm1d and Dropout2d on its last output,
# Adadelta(lr=0.1), StepLR(step_size=1, gamma=0.7) after each epoch's test pass; the test
# loader shuffles (as the example's does); the test pass sums the loss and counts the hits.
# --dry-run breaks both loops after their first batch.
SIDE = 6


class MnistRNN(Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(input_size=SIDE, hidden_size=12, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(12)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(12, 10)
        self.fc2 = nn.Linear(10, 10)
        self.results: list[tuple[float, int]] = []

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input = input.reshape(-1, SIDE, SIDE)
        if torch.is_autocast_enabled("cpu") and not autocast_supports("lstm", torch.get_autocast_dtype("cpu")):
            # oneDNN has no float16 LSTM on most CPUs, and no bfloat16 one without AVX-512 ("could
            # not create a primitive descriptor"): there the LSTM runs in float32, in the original
            # and the port alike (tests/helpers/cpu.py).
            with torch.autocast("cpu", enabled=False):
                output, _ = self.rnn(input.float())
        else:
            output, _ = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = F.relu(self.fc1(output))
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output.float(), dim=1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        data, target = batch
        return F.nll_loss(self(data), target)

    def on_validation_epoch_start(self) -> None:
        self.test_loss, self.correct = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        data, target = batch
        output = self(data)
        self.test_loss += F.nll_loss(output, target, reduction="sum").item()
        pred = output.argmax(dim=1, keepdim=True)
        self.correct += pred.eq(target.view_as(pred)).sum().item()
        self.log("val/loss", F.nll_loss(output, target))

    def on_validation_epoch_end(self) -> None:
        self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=0.1)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


def mnist_rnn_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(3)
    train = torch.utils.data.TensorDataset(torch.randn(40, 1, SIDE, SIDE, generator=g), torch.randint(0, 10, (40,), generator=g))
    test = torch.utils.data.TensorDataset(torch.randn(20, 1, SIDE, SIDE, generator=g), torch.randint(0, 10, (20,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=8, shuffle=True)


def make_mnist_rnn() -> tuple[MnistRNN, DataLoader, DataLoader]:
    torch.manual_seed(1)  # the script seeds, then builds its loaders, then the model
    train_loader, test_loader = mnist_rnn_data()
    return MnistRNN(), train_loader, test_loader


def original_mnist_rnn(precision: str, dry_run: bool, epochs: int = 2) -> MnistRNN:
    model, train_loader, test_loader = make_mnist_rnn()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    def train() -> None:
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                loss = F.nll_loss(model(data), target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if batch_idx % 10 == 0 and dry_run:
                break

    def test() -> None:
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for data, target in test_loader:
                with autocast():
                    output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
                if dry_run:
                    break
        model.results.append((test_loss / len(test_loader.dataset), correct))

    for _ in range(epochs):
        train()
        test()
        scheduler.step()
    return model


# ----------------------------------------------------------------------------- regression
# A Linear(4, 1) fit to a random degree-4 polynomial on fresh random batches drawn from the
# global generator, the update written by hand (`param.data.add_(-0.1 * param.grad)`), and a
# stop once a batch's loss is below 1e-3. The script loops forever (`count(1)`); both
# versions here stop at REGRESSION_CAP batches at the latest.
POLY_DEGREE = 4
REGRESSION_CAP = 600


class Polynomial:
    """The script's module-level target, drawn from the global generator after the seed."""

    def __init__(self) -> None:
        self.W_target = torch.randn(POLY_DEGREE, 1) * 5
        self.b_target = torch.randn(1) * 5

    @staticmethod
    def make_features(x: torch.Tensor) -> torch.Tensor:
        x = x.unsqueeze(1)
        return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return x.mm(self.W_target) + self.b_target.item()

    def get_batch(self, batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        random = torch.randn(batch_size)
        x = self.make_features(random)
        return x, self.f(x)


class Regression(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False  # the script updates the parameters by hand
        self.fc = nn.Linear(POLY_DEGREE, 1)
        self.batches, self.last_loss = 0, math.inf

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        batch_x, batch_y = batch
        self.fc.zero_grad()
        output = F.smooth_l1_loss(self.fc(batch_x).float(), batch_y)
        loss = output.item()
        self.manual_backward(output)
        for param in self.fc.parameters():
            assert param.grad is not None
            param.data.add_(-0.1 * param.grad)
        self.batches, self.last_loss = batch_idx + 1, loss
        if loss < 1e-3:  # the script's stop criterion: `break`
            self.trainer.should_stop = True
        return output.detach()

    def configure_optimizers(self) -> None:
        return None  # no optimizer: the update above is the script's own


class PolynomialBatches:
    """The script's endless `get_batch()` as a loader: each batch drawn when it is asked for."""

    def __init__(self, target: Polynomial, cap: int = REGRESSION_CAP) -> None:
        self.target, self.cap = target, cap

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(self.cap):
            yield self.target.get_batch()


def make_regression() -> tuple[Regression, Polynomial]:
    torch.manual_seed(3)  # the script has no seed; both versions use this one (converges in 252 batches)
    target = Polynomial()
    return Regression(), target


def original_regression(precision: str) -> Regression:
    model, target = make_regression()
    fc, autocast = model.fc, autocast_for(precision)
    for batch_idx in range(1, REGRESSION_CAP + 1):
        batch_x, batch_y = target.get_batch()
        fc.zero_grad()
        with autocast():
            output = F.smooth_l1_loss(fc(batch_x).float(), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            assert param.grad is not None
            param.data.add_(-0.1 * param.grad)
        model.batches, model.last_loss = batch_idx, loss
        if loss < 1e-3:
            break
    return model


# ------------------------------------------------------------------------------------ gcn
# Two graph convolutions (a sparse normalised adjacency, sparse row-normalised features),
# Adam(lr=0.01, weight_decay=5e-4), dropout 0.5, the whole graph as one batch: each epoch one
# step, then the loss and accuracy on the train and validation nodes in eval mode; the test
# nodes once at the end. Seed 42 before the node split (randperm) and the model.
class GraphConv(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, use_bias: bool = False) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(Module):
    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, use_bias: bool = True, dropout_p: float = 0.1) -> None:
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)
        self.results: list[tuple[float, float, float, float]] = []
        self.test_result: tuple[float, float] | None = None

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.gc1(input_tensor, adj_mat))
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x.float(), dim=1)

    def evaluate(self, batch: Any, mask: torch.Tensor) -> tuple[float, float]:
        features, adj, labels = batch[:3]
        output, target = self(features, adj)[mask], labels[mask]
        loss = F.nll_loss(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
        return loss.item(), acc.item()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, adj, labels, idx_train = batch[:4]
        output = self(features, adj)
        return F.nll_loss(output[idx_train], labels[idx_train])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.results.append(self.evaluate(batch, batch[3]) + self.evaluate(batch, batch[4]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.test_result = self.evaluate(batch, batch[5])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01, weight_decay=5e-4)


def graph(nodes: int = 24, features: int = 10, classes: int = 3, edges: int = 40) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random graph processed the way load_cora processes Cora."""
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(nodes, features, generator=g) < 0.3).float()
    scale = 1 / torch.sum(x, dim=1)
    scale[scale == float("inf")] = 0
    x = torch.diag(scale).to_sparse() @ x
    labels = torch.randint(0, classes, (nodes,), generator=g)
    pairs = torch.randint(0, nodes, (2, edges), generator=g)
    adj = torch.sparse_coo_tensor(pairs, torch.ones(edges), (nodes, nodes), dtype=torch.int64)
    adj = torch.eye(nodes) + adj
    degree = torch.sqrt(1 / torch.sum(adj, dim=1))
    degree[degree == float("inf")] = 0
    d = torch.diag(degree).to_sparse()
    adj = d @ adj @ d
    return x.to_sparse(), labels, adj.to_sparse()


def make_gcn() -> tuple[GCN, tuple[torch.Tensor, ...]]:
    features, labels, adj = graph()
    torch.manual_seed(42)
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:8], idx[8:14], idx[14:]
    model = GCN(features.shape[1], 8, int(labels.max().item()) + 1, False, 0.5)
    return model, (features, adj, labels, idx_train, idx_val, idx_test)


def original_gcn(precision: str, epochs: int = 4) -> GCN:
    model, batch = make_gcn()
    features, adj, labels, idx_train, idx_val, idx_test = batch
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def test(mask: torch.Tensor) -> tuple[float, float]:
        model.eval()
        with torch.no_grad(), autocast():
            return model.evaluate(batch, mask)

    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        with autocast():
            output = model(features, adj)
            loss = F.nll_loss(output[idx_train], labels[idx_train])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        model.results.append(test(idx_train) + test(idx_val))
    model.test_result = test(idx_test)
    return model


# ------------------------------------------------------------------ mnist_forward_forward
# Hinton's forward-forward: each layer trained alone (its own Adam) for EPOCHS full-batch
# steps on positive (true label overlaid) and negative (wrong label) data, then its detached
# outputs feed the next layer. The error is read by overlaying each label and summing the
# layers' goodness. The script draws the negative labels with torch.randint.
FF_EPOCHS, FF_THRESHOLD, FF_LR = 5, 2.0, 0.03


def overlay_y_on_x(x: torch.Tensor, y: Any, classes: int = 10) -> torch.Tensor:
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


def get_y_neg(y: torch.Tensor) -> torch.Tensor:
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(int(y_samp.item()))
        y_neg[idx] = torch.tensor(allowed_indices)[torch.randint(len(allowed_indices), size=(1,))].item()
    return y_neg


class FFLayer(nn.Linear):
    """The example's `Layer`, less its `train(x_pos, x_neg)`: that name is `nn.Module.train(mode)`,
    which `model.train()` calls on every submodule once the layers are registered (the example
    keeps them in a plain list, so they never are); the ports call it `goodness_loss`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return F.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def goodness_loss(self, x_pos: torch.Tensor, x_neg: torch.Tensor) -> torch.Tensor:
        g_pos = self.forward(x_pos).float().pow(2).mean(1)
        g_neg = self.forward(x_neg).float().pow(2).mean(1)
        return torch.log1p(torch.exp(torch.cat([-g_pos + FF_THRESHOLD, g_neg - FF_THRESHOLD]))).mean()


class FFNet(Module):
    def __init__(self, dims: tuple[int, ...] = (36, 20, 20)) -> None:
        super().__init__()
        self.automatic_optimization = False  # one optimizer per layer, each trained on its own
        self.layers = nn.ModuleList([FFLayer(dims[d], dims[d + 1]) for d in range(len(dims) - 1)])
        self.losses: list[float] = []
        self.errors: list[float] = []
        self.h: tuple[torch.Tensor, torch.Tensor] | None = None

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.float().pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        return torch.cat(goodness_per_label, 1).argmax(1)

    def error(self, x: torch.Tensor, y: torch.Tensor) -> float:
        return 1.0 - self.predict(x).eq(y).float().mean().item()

    # The port: epoch l trains layer l, one batch (the whole set) per step.
    def training_step(self, batch: Any, batch_idx: int) -> None:
        layer_idx = self.current_epoch
        if batch_idx == 0:
            if layer_idx == 0:
                self.h = batch
            else:  # what the previous layer's train() returned
                assert self.h is not None
                previous = self.layers[layer_idx - 1]
                self.h = (previous(self.h[0]).detach(), previous(self.h[1]).detach())
        assert self.h is not None
        opt = self.optimizers()[layer_idx]
        loss = self.layers[layer_idx].goodness_loss(*self.h)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.losses.append(loss.item())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.errors.append(self.error(*batch))

    def configure_optimizers(self) -> Any:
        return [torch.optim.Adam(layer.parameters(), lr=FF_LR) for layer in self.layers]


def ff_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(4)
    train = torch.utils.data.TensorDataset(torch.randn(40, 36, generator=g), torch.randint(0, 10, (40,), generator=g))
    test = torch.utils.data.TensorDataset(torch.randn(20, 36, generator=g), torch.randint(0, 10, (20,), generator=g))
    return DataLoader(train, batch_size=40), DataLoader(test, batch_size=20)


def make_ff() -> tuple[FFNet, tuple[torch.Tensor, ...], DataLoader]:
    """Model, then the first (only) training batch, then the negative labels, as the script."""
    torch.manual_seed(1)  # the script parses --seed but never seeds; both versions seed here
    train_loader, test_loader = ff_data()
    net = FFNet()
    x, y = next(iter(train_loader))
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, get_y_neg(y))
    return net, (x, y, x_pos, x_neg), test_loader


def original_ff(precision: str) -> FFNet:
    net, (x, y, x_pos, x_neg), test_loader = make_ff()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    h_pos, h_neg = x_pos, x_neg
    for layer in net.layers:
        opt = torch.optim.Adam(layer.parameters(), lr=FF_LR)
        for _ in range(FF_EPOCHS):
            with autocast():
                loss = layer.goodness_loss(h_pos, h_neg)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            net.losses.append(loss.item())
        with autocast():
            h_pos, h_neg = layer(h_pos).detach(), layer(h_neg).detach()
    with torch.no_grad(), autocast():
        net.errors.append(net.error(x, y))
    x_te, y_te = next(iter(test_loader))
    with torch.no_grad(), autocast():
        net.errors.append(net.error(x_te, y_te))
    return net


# -------------------------------------------------------------------- language_translation
# nn.Transformer seq2seq (sequence-first), sinusoidal positions with dropout, padded batches
# with causal and padding masks, CrossEntropyLoss(ignore_index=<pad>), Adam(betas=(0.9,
# 0.98), eps=1e-9), unshuffled loaders. The script validates *without* torch.no_grad() and
# averages its losses over `len(list(loader))`, which iterates each loader once more.
PAD, BOS, EOS = 1, 2, 3
SRC_VOCAB, TGT_VOCAB = 11, 13


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 64) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


def generate_square_subsequent_mask(size: int) -> torch.Tensor:
    mask = (torch.triu(torch.ones((size, size))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))


def create_mask(src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, ...]:
    tgt_mask = generate_square_subsequent_mask(tgt.shape[0])
    src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)
    return src_mask, tgt_mask, (src == PAD).transpose(0, 1), (tgt == PAD).transpose(0, 1)


class Translator(Module):
    def __init__(self, label_smoothing: float = 0.0, embed_size: int = 16, dropout: float = 0.1) -> None:
        super().__init__()
        self.src_embedding = nn.Embedding(SRC_VOCAB, embed_size)
        self.tgt_embedding = nn.Embedding(TGT_VOCAB, embed_size)
        self.pos_enc = PositionalEncoding(embed_size, dropout)
        self.transformer = nn.Transformer(d_model=embed_size, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=32, dropout=dropout)
        self.ff = nn.Linear(embed_size, TGT_VOCAB)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=label_smoothing)
        self.loaders: tuple[DataLoader, DataLoader] | None = None  # the script's train_dl, valid_dl
        self.train_losses: list[float] = []
        self.val_losses: list[float] = []

    def forward(self, src: torch.Tensor, trg: torch.Tensor, *masks: torch.Tensor) -> torch.Tensor:
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask = masks
        outs = self.transformer(self.pos_enc(self.src_embedding(src)), self.pos_enc(self.tgt_embedding(trg)), src_mask,
                                tgt_mask, None, src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.ff(outs)

    def loss(self, batch: Any) -> torch.Tensor:
        src, tgt = batch
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = self(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        tgt_out = tgt[1:, :]
        return self.loss_fn(logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))

    # The port.
    def on_train_epoch_start(self) -> None:
        self.losses = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.losses += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        assert self.loaders is not None
        self.train_losses.append(self.losses / len(list(self.loaders[0])))

    def on_validation_epoch_start(self) -> None:
        self.val_sum = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self.loss(batch)
        self.val_sum += loss.item()
        self.log("val/loss", loss)

    def on_validation_epoch_end(self) -> None:
        assert self.loaders is not None
        self.val_losses.append(self.val_sum / len(list(self.loaders[1])))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)


class Sentences(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.pairs = []
        for _ in range(n):
            src_len, tgt_len = (int(v) for v in torch.randint(2, 7, (2,), generator=g))
            src = torch.randint(4, SRC_VOCAB, (src_len,), generator=g)
            tgt = torch.randint(4, TGT_VOCAB, (tgt_len,), generator=g)
            self.pairs.append((torch.cat([torch.tensor([BOS]), src, torch.tensor([EOS])]),
                               torch.cat([torch.tensor([BOS]), tgt, torch.tensor([EOS])])))

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pairs[i]


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    src_batch, tgt_batch = zip(*batch)
    return (torch.nn.utils.rnn.pad_sequence(list(src_batch), padding_value=PAD),
            torch.nn.utils.rnn.pad_sequence(list(tgt_batch), padding_value=PAD))


def make_translator(label_smoothing: float) -> Translator:
    torch.manual_seed(0)
    model = Translator(label_smoothing)
    model.loaders = (DataLoader(Sentences(24, 6), batch_size=6, collate_fn=collate),
                     DataLoader(Sentences(10, 7), batch_size=6, collate_fn=collate))
    return model


def original_translation(precision: str, label_smoothing: float, epochs: int = 2) -> Translator:
    model = make_translator(label_smoothing)
    assert model.loaders is not None
    train_dl, valid_dl = model.loaders
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optim = model.configure_optimizers()

    def train() -> float:
        losses = 0.0
        model.train()
        for batch in train_dl:
            with autocast():
                loss = model.loss(batch)
            optim.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optim)
            scaler.update()
            losses += loss.item()
        return losses / len(list(train_dl))

    def validate() -> float:
        losses = 0.0
        model.eval()
        for batch in valid_dl:  # no torch.no_grad(): as the example
            with autocast():
                losses += model.loss(batch).item()
        return losses / len(list(valid_dl))

    for _ in range(epochs):
        model.train_losses.append(train())
        model.val_losses.append(validate())
    return model


# ------------------------------------------------------------------------ siamese_network
# Two images through one shared feature extractor (conv + BatchNorm), concatenated features,
# an MLP and a sigmoid, BCELoss; pairs drawn in the dataset's __getitem__ with Python's
# `random` (same class for even indices, different for odd); Adadelta(lr=1.0), StepLR(gamma=0.7)
# after each epoch's test pass; unshuffled loaders (the example shuffles only on accelerators).
class SiameseNetwork(Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                                      nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
        self.sigmoid = nn.Sigmoid()
        self.features.apply(self.init_weights)
        self.fc.apply(self.init_weights)
        self.criterion = nn.BCELoss()
        self.results: list[tuple[float, int]] = []

    def init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x: torch.Tensor) -> torch.Tensor:
        output = self.features(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1: torch.Tensor, input2: torch.Tensor) -> torch.Tensor:
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))

    def loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        images_1, images_2, targets = batch
        outputs = self(images_1, images_2).squeeze().float()  # BCELoss is autocast-unsafe: float32
        return self.criterion(outputs, targets), outputs

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)[0]

    def on_validation_epoch_start(self) -> None:
        self.test_loss, self.correct = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, outputs = self.loss(batch)
        self.test_loss += loss.sum().item()
        pred = torch.where(outputs > 0.5, 1, 0)
        self.correct += pred.eq(batch[2].view_as(pred)).sum().item()

    def on_validation_epoch_end(self) -> None:
        self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=1.0)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


class AppMatcher(Dataset):
    """APP_MATCHER over synthetic 8x8 uint8 digits, three of each class."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        targets = torch.arange(10).repeat(3)
        self.data = torch.randint(0, 256, (len(targets), 1, 8, 8), generator=g, dtype=torch.uint8)
        self.grouped_examples = {i: np.where(targets.numpy() == i)[0] for i in range(10)}

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        selected_class = random.randint(0, 9)
        random_index_1 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
        image_1 = self.data[self.grouped_examples[selected_class][random_index_1]].clone().float()
        if index % 2 == 0:
            random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            while random_index_2 == random_index_1:
                random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0] - 1)
            image_2 = self.data[self.grouped_examples[selected_class][random_index_2]].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other_selected_class = random.randint(0, 9)
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)
            random_index_2 = random.randint(0, self.grouped_examples[other_selected_class].shape[0] - 1)
            image_2 = self.data[self.grouped_examples[other_selected_class][random_index_2]].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def make_siamese() -> tuple[SiameseNetwork, DataLoader, DataLoader]:
    torch.manual_seed(1)
    random.seed(1)  # the script never seeds Python's generator; both versions do, the same way
    train_loader = DataLoader(AppMatcher(8), batch_size=8)
    test_loader = DataLoader(AppMatcher(9), batch_size=12)
    return SiameseNetwork(), train_loader, test_loader


def original_siamese(precision: str, epochs: int = 2) -> SiameseNetwork:
    model, train_loader, test_loader = make_siamese()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    def train() -> None:
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            with autocast():
                loss = model.loss(batch)[0]
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    def test() -> None:
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for batch in test_loader:
                with autocast():
                    loss, outputs = model.loss(batch)
                test_loss += loss.sum().item()
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(batch[2].view_as(pred)).sum().item()
        model.results.append((test_loss / len(test_loader.dataset), correct))

    for _ in range(epochs):
        train()
        test()
        scheduler.step()
    return model
