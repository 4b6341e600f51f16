"""pytorch/examples at toy size, each written twice: the script's own loop and a port to a `Module`.

One module per example (`mnist`, `vae`, `word_language_model`, `time_sequence_prediction`,
`mnist_rnn`, `regression`, `gcn`, `mnist_forward_forward`, `language_translation`,
`siamese_network`, `gat`, `super_resolution`, `reinforcement_learning`, `imagenet`, `mingpt`)
holds the model (a `trainer.Module`, so the same code serves both runs; the original loop uses
it as a plain `nn.Module`) and the original script's loop as the example writes it (its
optimizer and scheduler, `model.train()`/`model.eval()`, `torch.no_grad()`, its per-epoch test
pass, its seed, its loaders' shuffling). tests/examples/test_<example>.py trains the port with
`Trainer(...)` on the same seed and data and compares the final weights with `torch.equal`,
and the numbers the script prints with `==`.

Architectures are the examples' at toy sizes, data is synthetic and shaped like each example's
(no downloads). Amp/bf16 versions of the originals follow PyTorch's autocast recipe: autocast
around each forward and loss, one GradScaler (`scale(loss).backward()`, `step`, `update`).

Trainer options the ports use (`QUIET`):
- `num_sanity_val_steps=0`: the originals have no sanity check. The sanity check would not
  change the weights (it runs with every random stream restored), but the modules record
  each evaluation's numbers, and it would add a record the script never prints
  (`QUIET_WITH_SANITY_CHECK` keeps it, for the ports that record nothing).
- `logger=False`, `enable_checkpointing=False`, `enable_progress_bar=False`: nothing
  written, as the scripts here save nothing.
- `isolate_validation_rng` stays False: the scripts' test passes draw from the torch
  generator (each `iter(DataLoader)` draws a base seed, a shuffling test loader draws its
  order), and the training after them depends on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainer import Module, Trainer

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}
PRECISIONS = ["fp32", "amp", "bf16"]
QUIET_WITH_SANITY_CHECK: dict[str, Any] = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                               device="cpu")
QUIET: dict[str, Any] = dict(QUIET_WITH_SANITY_CHECK, num_sanity_val_steps=0, enable_model_summary=False)


def autocast_for(precision: str) -> Callable[[], Any]:
    dtype = DTYPES[precision]
    return (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext


def scaler_for(precision: str) -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", enabled=precision == "amp")


def amp_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    scaler.scale(loss).backward()  # a plain backward and step when the scaler is disabled
    scaler.step(optimizer)
    scaler.update()


def train_test_original(make_model: Callable[[], Module], make_data: Callable[[], tuple[DataLoader, DataLoader]],
                        precision: str, every: int | None, epochs: int = 2) -> Module:
    """The loop of the examples shaped like `mnist` and `vae`: train(); test(); scheduler.step()
    per epoch (test every `every` batches instead when given), with autocast and a GradScaler
    for amp/bf16. The model's `loss(batch)` is the script's loss."""
    torch.manual_seed(1)
    model = make_model()
    train_loader, test_loader = make_data()
    setup = model.configure_optimizers()
    optimizer, scheduler = setup if isinstance(setup, tuple) else (setup, None)
    autocast, scaler = autocast_for(precision), scaler_for(precision)

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


def ported_train_test(make_model: Callable[[], Module], make_data: Callable[[], tuple[DataLoader, DataLoader]],
                      precision: str, every: int | None, epochs: int = 2) -> Module:
    """`train_test_original`'s work as `Trainer.fit`, the test loader as validation (with the
    default sanity check)."""
    torch.manual_seed(1)
    model = make_model()
    train_loader, test_loader = make_data()
    Trainer(precision=precision, max_epochs=epochs, val_check_interval=every, **QUIET_WITH_SANITY_CHECK).fit(
        model, train_loader, test_loader)
    return model
