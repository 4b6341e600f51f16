"""The UvA deep-learning course's "Inception, ResNet and DenseNet" notebook
(Lightning-AI/tutorials, course_UvA-DL/04-inception-resnet-densenet), with only its imports
changed: `CIFARModule` (save_hyperparameters, `example_input_array`, `[optimizer], [MultiStepLR]`,
train/val/test accuracy logged with the notebook's options), the model registry and the four
models (GoogleNet with Inception blocks, ResNet with either block, DenseNet), and `train_model`:
`ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")`,
`LearningRateMonitor("epoch")`, `trainer.logger._log_graph = True`,
`trainer.logger._default_hp_metric = None`, `load_from_checkpoint(best_model_path)`, then
`trainer.test` on the validation and the test loader.

Shrunk or substituted: CIFAR10 is 3x8x8 images drawn from a seeded generator (96 train+val,
32 test) instead of 3x32x32 photos; the augmentation (a random horizontal flip, drawn from
torch's stream as torchvision's `RandomHorizontalFlip` does) runs in the dataset as the
notebook's transforms do; batches of 16, no loader workers; the networks keep their layers
with fewer channels and blocks; 2 epochs instead of 180, with the MultiStepLR milestone
after the first; `accelerator="cpu"`; the pretrained-file download is left out.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import LearningRateMonitor, ModelCheckpoint

model_dict: dict[str, Any] = {}
act_fn_by_name = {"tanh": nn.Tanh, "relu": nn.ReLU, "leakyrelu": nn.LeakyReLU, "gelu": nn.GELU}


def create_model(model_name: str, model_hparams: dict[str, Any]) -> nn.Module:
    if model_name in model_dict:
        return model_dict[model_name](**model_hparams)
    assert False, f'Unknown model name "{model_name}". Available models are: {str(model_dict.keys())}'


class CIFARModule(pl.LightningModule):
    def __init__(self, model_name: str, model_hparams: dict[str, Any], optimizer_name: str, optimizer_hparams: dict[str, Any]) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model(model_name, model_hparams)
        self.loss_module = nn.CrossEntropyLoss()
        self.example_input_array = torch.zeros((1, 3, 8, 8), dtype=torch.float32)

    def forward(self, imgs: torch.Tensor) -> torch.Tensor:
        return self.model(imgs)

    def configure_optimizers(self) -> Any:
        if self.hparams.optimizer_name == "Adam":
            optimizer = optim.AdamW(self.parameters(), **self.hparams.optimizer_hparams)
        elif self.hparams.optimizer_name == "SGD":
            optimizer = optim.SGD(self.parameters(), **self.hparams.optimizer_hparams)
        else:
            assert False, f'Unknown optimizer: "{self.hparams.optimizer_name}"'
        scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1], gamma=0.1)
        return [optimizer], [scheduler]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        imgs, labels = batch
        preds = self.model(imgs)
        loss = self.loss_module(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log("train_acc", acc, on_step=False, on_epoch=True)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        preds = self.model(imgs).argmax(dim=-1)
        acc = (labels == preds).float().mean()
        self.log("val_acc", acc)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        imgs, labels = batch
        preds = self.model(imgs).argmax(dim=-1)
        acc = (labels == preds).float().mean()
        self.log("test_acc", acc)


# ------------------------------------------------------------------------------ the networks
class InceptionBlock(nn.Module):
    def __init__(self, c_in: int, c_red: dict[str, int], c_out: dict[str, int], act_fn: Any) -> None:
        super().__init__()
        self.conv_1x1 = nn.Sequential(nn.Conv2d(c_in, c_out["1x1"], kernel_size=1), nn.BatchNorm2d(c_out["1x1"]), act_fn())
        self.conv_3x3 = nn.Sequential(
            nn.Conv2d(c_in, c_red["3x3"], kernel_size=1), nn.BatchNorm2d(c_red["3x3"]), act_fn(),
            nn.Conv2d(c_red["3x3"], c_out["3x3"], kernel_size=3, padding=1), nn.BatchNorm2d(c_out["3x3"]), act_fn(),
        )
        self.conv_5x5 = nn.Sequential(
            nn.Conv2d(c_in, c_red["5x5"], kernel_size=1), nn.BatchNorm2d(c_red["5x5"]), act_fn(),
            nn.Conv2d(c_red["5x5"], c_out["5x5"], kernel_size=5, padding=2), nn.BatchNorm2d(c_out["5x5"]), act_fn(),
        )
        self.max_pool = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, padding=1, stride=1), nn.Conv2d(c_in, c_out["max"], kernel_size=1),
            nn.BatchNorm2d(c_out["max"]), act_fn(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.conv_1x1(x), self.conv_3x3(x), self.conv_5x5(x), self.max_pool(x)], dim=1)


class GoogleNet(nn.Module):
    def __init__(self, num_classes: int = 10, act_fn_name: str = "relu", **kwargs: Any) -> None:
        super().__init__()
        self.hparams = SimpleNamespace(num_classes=num_classes, act_fn_name=act_fn_name, act_fn=act_fn_by_name[act_fn_name])
        act_fn = self.hparams.act_fn
        self.input_net = nn.Sequential(nn.Conv2d(3, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), act_fn())
        self.inception_blocks = nn.Sequential(
            InceptionBlock(8, c_red={"3x3": 4, "5x5": 2}, c_out={"1x1": 2, "3x3": 4, "5x5": 1, "max": 1}, act_fn=act_fn),
            InceptionBlock(8, c_red={"3x3": 4, "5x5": 2}, c_out={"1x1": 3, "3x3": 6, "5x5": 2, "max": 1}, act_fn=act_fn),
            nn.MaxPool2d(3, stride=2, padding=1),  # 8x8 => 4x4
            InceptionBlock(12, c_red={"3x3": 4, "5x5": 2}, c_out={"1x1": 3, "3x3": 6, "5x5": 2, "max": 1}, act_fn=act_fn),
            nn.MaxPool2d(3, stride=2, padding=1),  # 4x4 => 2x2
            InceptionBlock(12, c_red={"3x3": 6, "5x5": 2}, c_out={"1x1": 4, "3x3": 8, "5x5": 2, "max": 2}, act_fn=act_fn),
        )
        self.output_net = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(16, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity=self.hparams.act_fn_name)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net(self.inception_blocks(self.input_net(x)))


class ResNetBlock(nn.Module):
    def __init__(self, c_in: int, act_fn: Any, subsample: bool = False, c_out: int = -1) -> None:
        super().__init__()
        if not subsample:
            c_out = c_in
        self.net = nn.Sequential(
            nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, stride=1 if not subsample else 2, bias=False),
            nn.BatchNorm2d(c_out), act_fn(),
            nn.Conv2d(c_out, c_out, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(c_out),
        )
        self.downsample = nn.Conv2d(c_in, c_out, kernel_size=1, stride=2) if subsample else None
        self.act_fn = act_fn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.net(x)
        if self.downsample is not None:
            x = self.downsample(x)
        return self.act_fn(z + x)


class PreActResNetBlock(nn.Module):
    def __init__(self, c_in: int, act_fn: Any, subsample: bool = False, c_out: int = -1) -> None:
        super().__init__()
        if not subsample:
            c_out = c_in
        self.net = nn.Sequential(
            nn.BatchNorm2d(c_in), act_fn(),
            nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, stride=1 if not subsample else 2, bias=False),
            nn.BatchNorm2d(c_out), act_fn(),
            nn.Conv2d(c_out, c_out, kernel_size=3, padding=1, bias=False),
        )
        self.downsample = (
            nn.Sequential(nn.BatchNorm2d(c_in), act_fn(), nn.Conv2d(c_in, c_out, kernel_size=1, stride=2, bias=False))
            if subsample else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.net(x)
        if self.downsample is not None:
            x = self.downsample(x)
        return z + x


resnet_blocks_by_name = {"ResNetBlock": ResNetBlock, "PreActResNetBlock": PreActResNetBlock}


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 10, num_blocks: list[int] = [1, 1, 1], c_hidden: list[int] = [4, 8, 8],  # noqa: B006
                 act_fn_name: str = "relu", block_name: str = "ResNetBlock", **kwargs: Any) -> None:
        super().__init__()
        assert block_name in resnet_blocks_by_name
        self.hparams = SimpleNamespace(num_classes=num_classes, c_hidden=c_hidden, num_blocks=num_blocks, act_fn_name=act_fn_name,
                                       act_fn=act_fn_by_name[act_fn_name], block_class=resnet_blocks_by_name[block_name])
        if self.hparams.block_class == PreActResNetBlock:
            self.input_net = nn.Sequential(nn.Conv2d(3, c_hidden[0], kernel_size=3, padding=1, bias=False))
        else:
            self.input_net = nn.Sequential(nn.Conv2d(3, c_hidden[0], kernel_size=3, padding=1, bias=False),
                                           nn.BatchNorm2d(c_hidden[0]), self.hparams.act_fn())
        blocks = []
        for block_idx, block_count in enumerate(num_blocks):
            for bc in range(block_count):
                subsample = bc == 0 and block_idx > 0
                blocks.append(self.hparams.block_class(c_in=c_hidden[block_idx if not subsample else (block_idx - 1)],
                                                       act_fn=self.hparams.act_fn, subsample=subsample, c_out=c_hidden[block_idx]))
        self.blocks = nn.Sequential(*blocks)
        self.output_net = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(c_hidden[-1], num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity=act_fn_name)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net(self.blocks(self.input_net(x)))


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, bn_size: int, growth_rate: int, act_fn: Any) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm2d(c_in), act_fn(), nn.Conv2d(c_in, bn_size * growth_rate, kernel_size=1, bias=False),
            nn.BatchNorm2d(bn_size * growth_rate), act_fn(),
            nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.net(x), x], dim=1)


class DenseNet(nn.Module):
    def __init__(self, num_classes: int = 10, num_layers: list[int] = [2, 2], bn_size: int = 2, growth_rate: int = 4,  # noqa: B006
                 act_fn_name: str = "relu", **kwargs: Any) -> None:
        super().__init__()
        act_fn = act_fn_by_name[act_fn_name]
        c_hidden = growth_rate * bn_size
        self.input_net = nn.Sequential(nn.Conv2d(3, c_hidden, kernel_size=3, padding=1))
        blocks: list[nn.Module] = []
        for block_idx, count in enumerate(num_layers):
            blocks.append(nn.Sequential(*[DenseLayer(c_hidden + i * growth_rate, bn_size, growth_rate, act_fn) for i in range(count)]))
            c_hidden = c_hidden + count * growth_rate
            if block_idx < len(num_layers) - 1:  # the transition layer
                blocks.append(nn.Sequential(nn.BatchNorm2d(c_hidden), act_fn(), nn.Conv2d(c_hidden, c_hidden // 2, kernel_size=1, bias=False),
                                            nn.AvgPool2d(kernel_size=2, stride=2)))
                c_hidden = c_hidden // 2
        self.blocks = nn.Sequential(*blocks)
        self.output_net = nn.Sequential(nn.BatchNorm2d(c_hidden), act_fn(), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                                        nn.Linear(c_hidden, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity=act_fn_name)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_net(self.blocks(self.input_net(x)))


model_dict.update(GoogleNet=GoogleNet, ResNet=ResNet, DenseNet=DenseNet)

#: The notebook's four runs: (model_name, model_hparams, optimizer_name, optimizer_hparams, save_name).
RUNS = {
    "GoogleNet": ("GoogleNet", {"num_classes": 10, "act_fn_name": "relu"}, "Adam", {"lr": 1e-3, "weight_decay": 1e-4}),
    "ResNet": ("ResNet", {"num_classes": 10, "c_hidden": [4, 8, 8], "num_blocks": [1, 1, 1], "act_fn_name": "relu"},
               "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}),
    "ResNetPreAct": ("ResNet", {"num_classes": 10, "c_hidden": [4, 8, 8], "num_blocks": [1, 1, 1], "act_fn_name": "relu",
                                "block_name": "PreActResNetBlock"}, "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}),
    "DenseNet": ("DenseNet", {"num_classes": 10, "num_layers": [2, 2], "bn_size": 2, "growth_rate": 4, "act_fn_name": "relu"},
                 "Adam", {"lr": 1e-3, "weight_decay": 1e-4}),
}


# ------------------------------------------------------------------------------------ data
class FakeCIFAR(data.Dataset):
    """Seeded 3x8x8 images, labelled by the brightest of their channel means; `flip`: a random
    horizontal flip per item, drawn from torch's stream as RandomHorizontalFlip draws it."""

    def __init__(self, size: int, seed: int, flip: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 3, 8, 8, generator=g)
        weights = torch.randn(3 * 64, 10, generator=g)
        self.labels = (self.images.flatten(1) @ weights).argmax(dim=1)
        self.flip = flip

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[idx]
        if self.flip and torch.rand(1) < 0.5:
            img = img.flip(-1)
        return img, self.labels[idx]


def make_loaders() -> tuple[data.DataLoader, data.DataLoader, data.DataLoader]:
    train_dataset, val_dataset = FakeCIFAR(96, 0, flip=True), FakeCIFAR(96, 0, flip=False)
    pl.seed_everything(42)
    train_set, _ = torch.utils.data.random_split(train_dataset, [64, 32])
    pl.seed_everything(42)
    _, val_set = torch.utils.data.random_split(val_dataset, [64, 32])
    test_set = FakeCIFAR(32, 1, flip=False)
    train_loader = data.DataLoader(train_set, batch_size=16, shuffle=True, drop_last=True, pin_memory=True, num_workers=0)
    val_loader = data.DataLoader(val_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)
    test_loader = data.DataLoader(test_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)
    return train_loader, val_loader, test_loader


def main(root_dir: str | Path, precision: str = "32-true", run: str = "ResNet", max_epochs: int = 2) -> dict[str, Any]:
    """The notebook's `train_model` for one of its four runs (`RUNS`)."""
    model_name, model_hparams, optimizer_name, optimizer_hparams = RUNS[run]
    train_loader, val_loader, test_loader = make_loaders()
    trainer = pl.Trainer(
        default_root_dir=os.path.join(str(root_dir), run),
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        precision=precision,
        callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc"), LearningRateMonitor("epoch")],
        enable_progress_bar=False,
    )
    trainer.logger._log_graph = True
    trainer.logger._default_hp_metric = None
    pl.seed_everything(42)
    trained = CIFARModule(model_name=model_name, model_hparams=model_hparams, optimizer_name=optimizer_name,
                          optimizer_hparams=optimizer_hparams)
    trainer.fit(trained, train_loader, val_loader)
    fit_metrics = dict(trainer.callback_metrics)
    model = CIFARModule.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
    result = {"test": test_result[0]["test_acc"], "val": val_result[0]["test_acc"]}
    return {"model": trained, "trainer": trainer, "best": model, "fit_metrics": fit_metrics, "val": val_result[0],
            "test": test_result[0], "result": result}
