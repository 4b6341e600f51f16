"""Three small projects written the Lightning way, with only their imports changed
(`import trainer as L`, `from callbacks import ...`), run end to end; a hand-written PyTorch loop
doing the same work gives the reference, and the weights are equal (torch.equal).

- a GAN in the shape of Lightning's GAN template (manual optimization, two optimizers,
  toggle_optimizer, self.log, images through self.logger.experiment);
- Lightning's bug-report template (BoringModel with its train/val/test loaders on the module);
- an autoencoder with a LightningDataModule, seed_everything, EarlyStopping and ModelCheckpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split

import trainer as L
from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint


# ===================================================================================== GAN
class Generator(torch.nn.Module):
    def __init__(self, latent_dim: int = 4, out: int = 2) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(latent_dim, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, out))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


class Discriminator(torch.nn.Module):
    def __init__(self, size: int = 2) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(size, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1), torch.nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 0.0002, b1: float = 0.5, b2: float = 0.999) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim)
        self.discriminator = Discriminator()
        self.validation_z = torch.randn(8, latent_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def adversarial_loss(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch: Any) -> None:
        (points,) = batch
        optimizer_g, optimizer_d = self.optimizers()
        z = torch.randn(points.shape[0], self.hparams.latent_dim).type_as(points)

        self.toggle_optimizer(optimizer_g)
        valid = torch.ones(points.size(0), 1).type_as(points)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        self.toggle_optimizer(optimizer_d)
        real_loss = self.adversarial_loss(self.discriminator(points), valid)
        fake = torch.zeros(points.size(0), 1).type_as(points)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def configure_optimizers(self) -> Any:
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def on_train_epoch_end(self) -> None:
        z = self.validation_z.type_as(self.generator.model[0].weight)
        sample = self(z).detach()
        self.logger.experiment.add_image("generated_points", sample.unsqueeze(0), self.current_epoch)


def points(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(5)
    return TensorDataset(torch.randn(n, 2, generator=g) * 0.5 + 2.0)


def gan_by_hand(epochs: int) -> GAN:
    L.seed_everything(42)
    model = GAN()
    loader = DataLoader(points(), batch_size=16, shuffle=True)
    opt_g = torch.optim.Adam(model.generator.parameters(), lr=0.0002, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(model.discriminator.parameters(), lr=0.0002, betas=(0.5, 0.999))
    bce = F.binary_cross_entropy
    for _ in range(epochs):
        for (x,) in loader:
            z = torch.randn(x.shape[0], 4)
            valid, fake = torch.ones(x.size(0), 1), torch.zeros(x.size(0), 1)
            model.discriminator.requires_grad_(False)
            bce(model.discriminator(model.generator(z)), valid).backward()
            opt_g.step()
            opt_g.zero_grad()
            model.discriminator.requires_grad_(True)
            model.generator.requires_grad_(False)
            d_loss = (bce(model.discriminator(x), valid) + bce(model.discriminator(model.generator(z).detach()), fake)) / 2
            d_loss.backward()
            opt_d.step()
            opt_d.zero_grad()
            model.generator.requires_grad_(True)
    return model


def test_gan_template(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    L.seed_everything(42)
    model = GAN()
    dm = DataLoader(points(), batch_size=16, shuffle=True)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=L.TensorBoardLogger(save_dir=tmp_path, name="gan"),
                        callbacks=[LearningRateMonitor()], log_every_n_steps=1, enable_progress_bar=False)
    trainer.fit(model, dm)
    reference = gan_by_hand(epochs=3)
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(ours, theirs), name
    events = EventAccumulator(str(trainer.log_dir), size_guidance={"images": 0})
    events.Reload()
    assert len(events.Images("generated_points")) == 3
    assert {"g_loss", "d_loss", "lr-Adam", "lr-Adam-1"} <= set(events.Tags()["scalars"])


# ====================================================================== bug-report template
class RandomDataset(Dataset):
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class BoringModel(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict[str, torch.Tensor]:
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("valid_loss", loss)

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("test_loss", loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)


def test_bug_report_template(tmp_path: Path) -> None:
    L.seed_everything(0)
    model = BoringModel()
    trainer = L.Trainer(default_root_dir=tmp_path, limit_train_batches=5, limit_val_batches=3, limit_test_batches=4,
                        max_epochs=2, enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(model)
    result = trainer.test(model, verbose=False)

    L.seed_everything(0)  # the same work, by hand
    reference = BoringModel()
    train = DataLoader(RandomDataset(32, 64), batch_size=2)
    val = DataLoader(RandomDataset(32, 64), batch_size=2)
    optimizer = torch.optim.SGD(reference.layer.parameters(), lr=0.1)
    for _ in range(2):
        for i, batch in enumerate(train):
            if i == 5:
                break
            reference(batch).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            for i, batch in enumerate(val):
                if i == 3:
                    break
    test = DataLoader(RandomDataset(32, 64), batch_size=2)
    with torch.no_grad():
        losses = [reference(batch).sum() for i, batch in zip(range(4), test)]
    assert torch.equal(model.layer.weight, reference.layer.weight) and torch.equal(model.layer.bias, reference.layer.bias)
    assert result[0]["test_loss"] == torch.stack(losses).mean().item()
    assert trainer.global_step == 10
    assert set(trainer.callback_metrics) == {"test_loss"}  # Lightning's: test() starts from empty callback_metrics


# ============================================================== autoencoder + DataModule
class PatchData(L.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self) -> None:
        pass  # a download would go here

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        full = TensorDataset(torch.rand(112, 1, 8, 8, generator=g))
        self.train_set, self.val_set, self.test_set = random_split(full, [80, 16, 16], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class LitAutoEncoder(L.LightningModule):
    def __init__(self, hidden_dim: int = 16, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 3))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(3, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = F.mse_loss(self(x), x.view(x.size(0), -1))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val_loss", F.mse_loss(self(x), x.view(x.size(0), -1)), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("test_loss", F.mse_loss(self(x), x.view(x.size(0), -1)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


def test_autoencoder_with_a_datamodule(tmp_path: Path) -> None:
    L.seed_everything(1234)
    dm = PatchData()
    model = LitAutoEncoder()
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2)
    trainer = L.Trainer(max_epochs=4, default_root_dir=tmp_path, callbacks=[EarlyStopping("val_loss", patience=10), checkpoint],
                        enable_progress_bar=False)
    trainer.fit(model, datamodule=dm)
    result = trainer.test(model, datamodule=dm, verbose=False)

    L.seed_everything(1234)
    data = PatchData()
    data.setup("fit")
    reference = LitAutoEncoder()
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3)
    for _ in range(4):
        for (x,) in data.train_dataloader():
            F.mse_loss(reference(x), x.view(x.size(0), -1)).backward()
            optimizer.step()
            optimizer.zero_grad()
        with torch.no_grad():
            for _batch in data.val_dataloader():
                pass
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(ours, theirs), name
    with torch.no_grad():
        (x,) = next(iter(data.test_dataloader()))
        expected = F.mse_loss(reference(x), x.view(x.size(0), -1)).item()
    assert abs(result[0]["test_loss"] - expected) < 1e-6  # one test batch
    best = LitAutoEncoder.load_from_checkpoint(checkpoint.best_model_path)
    assert best.hparams == {"hidden_dim": 16, "learning_rate": 1e-3} and len(checkpoint.best_k_models) == 2
