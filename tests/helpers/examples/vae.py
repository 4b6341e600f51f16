"""pytorch/examples' vae at toy size: its model and data. The script's loop is the one it
shares with mnist, `train_test_original` (tests/helpers/examples/__init__.py); the port is
tested in tests/examples/test_vae.py.

The reparameterisation draws noise in training *and* in evaluation; Adam, a summed BCE plus
KL divergence; synthetic data in [0, 1].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module


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


def vae_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train, test = TensorDataset(torch.rand(64, 36, generator=g)), TensorDataset(torch.rand(20, 36, generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=8)
