"""Three small projects written the Lightning way, with only their imports changed
(`import trainer as L`, `from callbacks import ...`), run end to end; a hand-written PyTorch loop
doing the same work gives the reference, and the weights are equal (torch.equal).

- a GAN in the shape of Lightning's GAN template (manual optimization, two optimizers,
  toggle_optimizer, self.log, images through self.logger.experiment);
- Lightning's bug-report template (BoringModel with its train/val/test loaders on the module);
- an autoencoder with a LightningDataModule, seed_everything, EarlyStopping and ModelCheckpoint.

The projects are those of tests/helpers/lightning_projects (compared with Lightning itself in
tests/lightning/test_parity_training.py); here they run with the template's callbacks and logger.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainer as L
from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from tests.helpers.lightning_projects.autoencoder import LitAutoEncoder, PatchData
from tests.helpers.lightning_projects.boring import BoringModel, RandomDataset
from tests.helpers.lightning_projects.gan import GAN as TemplateGAN
from tests.helpers.lightning_projects.gan import points


# ===================================================================================== GAN
class GAN(TemplateGAN):
    """The project's GAN with the template's own epoch end: a sample of generated points as an image."""

    def on_train_epoch_end(self) -> None:
        z = self.validation_z.type_as(self.generator.model[0].weight)
        sample = self(z).detach()
        self.logger.experiment.add_image("generated_points", sample.unsqueeze(0), self.current_epoch)


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
    # Lightning asks for val_dataloader() inside its sanity check, whose random state it restores
    # after: the validation data's draws leave the streams as they were (so do the Trainer's)
    state = torch.random.get_rng_state()
    val = DataLoader(RandomDataset(32, 64), batch_size=2)
    torch.random.set_rng_state(state)
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
