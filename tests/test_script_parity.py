"""PyTorch examples ported to a `Module` train to the originals' weights, validation included.

Two scripts shaped like pytorch/examples' `mnist` (conv net with dropout, Adadelta, StepLR
stepped after each epoch's test pass) and `vae` (reparameterisation draws noise in training
*and* in evaluation), on small synthetic data. The originals' loops are written out as the
examples write them: train an epoch, evaluate over the test loader, step the scheduler; with
`val_check_interval` the evaluation runs every n batches instead. Each is compared with
`torch.equal` in fp32, amp (float16 autocast + GradScaler) and bf16.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.reference import DTYPES, assert_same_weights
from trainer import Module, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


class MnistNet(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, 1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(128, 16)
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(self.dropout2(x))
        return F.log_softmax(x.float(), dim=1)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=1.0)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


class VAE(Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc21, self.fc22 = torch.nn.Linear(36, 16), torch.nn.Linear(16, 4), torch.nn.Linear(16, 4)
        self.fc3, self.fc4 = torch.nn.Linear(4, 16), torch.nn.Linear(16, 36)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        std = torch.exp(0.5 * logvar)
        z = mu + torch.randn_like(std) * std  # noise in evaluation too, as the example does
        return self.fc4(F.relu(self.fc3(z))), mu, logvar

    def loss(self, batch: Any) -> torch.Tensor:
        (x,) = batch
        logits, mu, logvar = self(x)
        bce = F.binary_cross_entropy_with_logits(logits.float(), x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar.float() - mu.float().pow(2) - logvar.float().exp())
        return bce + kld

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def mnist_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(64, 1, 12, 12, generator=g), torch.randint(0, 10, (64,), generator=g))
    test = TensorDataset(torch.randn(24, 1, 12, 12, generator=g), torch.randint(0, 10, (24,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=10)


def vae_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train, test = TensorDataset(torch.rand(64, 36, generator=g)), TensorDataset(torch.rand(20, 36, generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=8)


SCRIPTS: dict[str, tuple[Callable[[], Module], Callable[[], tuple[DataLoader, DataLoader]]]] = {
    "mnist": (MnistNet, mnist_data),
    "vae": (VAE, vae_data),
}


def original(script: str, precision: str, every: int | None, epochs: int = 2) -> Module:
    """The example's own loop: train(); test(); scheduler.step() per epoch (test every
    `every` batches instead when given), with autocast and a GradScaler for amp/bf16."""
    make_model, make_data = SCRIPTS[script]
    torch.manual_seed(1)
    model = make_model()
    train_loader, test_loader = make_data()
    setup = model.configure_optimizers()
    optimizer, scheduler = setup if isinstance(setup, tuple) else (setup, None)
    dtype = DTYPES[precision]
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")

    def test() -> None:
        model.eval()
        with torch.no_grad():
            for batch in test_loader:
                with autocast():
                    model.loss(batch)
        model.train()

    for _ in range(epochs):
        model.train()
        for i, batch in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                loss = model.loss(batch)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if every is not None and (i + 1) % every == 0:
                test()
        if every is None:
            test()
        if scheduler is not None:
            scheduler.step()
    return model


def ported(script: str, precision: str, every: int | None, epochs: int = 2) -> Module:
    make_model, make_data = SCRIPTS[script]
    torch.manual_seed(1)
    model = make_model()
    train_loader, test_loader = make_data()
    Trainer(precision=precision, max_epochs=epochs, val_check_interval=every, **QUIET).fit(model, train_loader, test_loader)
    return model


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize("every", [None, 3], ids=["test-each-epoch", "val_check_interval-3"])
@pytest.mark.parametrize("script", ["mnist", "vae"])
def test_a_ported_example_trains_to_the_originals_weights(script: str, precision: str, every: int | None) -> None:
    assert_same_weights(ported(script, precision, every), original(script, precision, every))


def test_the_comparison_can_fail() -> None:
    """The original without its test pass ends elsewhere: validation's draws matter here."""
    model = ported("vae", "fp32", None)
    make_model, make_data = SCRIPTS["vae"]
    torch.manual_seed(1)
    reference = make_model()
    train_loader, _ = make_data()
    Trainer(max_epochs=2, **QUIET).fit(reference, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, reference)


# --------------------------------------------------------------- word_language_model
# The example batchifies a token stream into columns and slices `bptt` rows at a time (no
# DataLoader); the hidden state starts at zero each epoch, is carried (detached) from one
# slice to the next, and evaluation starts its own. Clipping at 0.25 before each SGD step.
VOCAB, BPTT, COLUMNS = 12, 5, 4


def batchify(tokens: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rows = tokens.numel() // COLUMNS
    data = tokens[: rows * COLUMNS].view(COLUMNS, rows).t().contiguous()
    return [(data[i : i + min(BPTT, rows - 1 - i)], data[i + 1 : i + 1 + min(BPTT, rows - 1 - i)])
            for i in range(0, rows - 1, BPTT)]


def corpus() -> tuple[list[Any], list[Any]]:
    g = torch.Generator().manual_seed(0)
    return batchify(torch.randint(0, VOCAB, (164,), generator=g)), batchify(torch.randint(0, VOCAB, (64,), generator=g))


class RNNModel(Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Embedding(VOCAB, 8)
        self.rnn = torch.nn.RNN(8, 16, nonlinearity="tanh")
        self.drop = torch.nn.Dropout(0.2)
        self.decoder = torch.nn.Linear(16, VOCAB)
        self.hidden: torch.Tensor | None = None
        self.eval_hidden: torch.Tensor | None = None

    def init_hidden(self) -> torch.Tensor:
        return torch.zeros(1, COLUMNS, 16)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(output)).float(), hidden

    def loss(self, batch: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits, hidden = self(x, hidden.detach())
        return F.cross_entropy(logits.view(-1, VOCAB), y.reshape(-1)), hidden

    def on_train_epoch_start(self) -> None:
        self.hidden = self.init_hidden()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        assert self.hidden is not None
        loss, self.hidden = self.loss(batch, self.hidden)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.eval_hidden = self.init_hidden()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        assert self.eval_hidden is not None
        loss, self.eval_hidden = self.loss(batch, self.eval_hidden)
        self.log("val/loss", loss, batch_size=len(batch[0]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=2.0)


def original_lm(precision: str, epochs: int = 2) -> RNNModel:
    torch.manual_seed(1)
    model = RNNModel()
    train, val = corpus()
    dtype = DTYPES[precision]
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    optimizer = model.configure_optimizers()

    def evaluate() -> None:
        model.eval()
        hidden = model.init_hidden()
        with torch.no_grad():
            for batch in val:
                with autocast():
                    _, hidden = model.loss(batch, hidden)

    for _ in range(epochs):
        model.train()
        hidden = model.init_hidden()
        for batch in train:
            with autocast():
                loss, hidden = model.loss(batch, hidden)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        evaluate()
    return model


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_a_ported_word_language_model_trains_to_the_originals_weights(precision: str) -> None:
    torch.manual_seed(1)
    model = RNNModel()
    train, val = corpus()
    Trainer(precision=precision, max_epochs=2, gradient_clip_val=0.25, **QUIET).fit(model, train, val)
    assert_same_weights(model, original_lm(precision))
