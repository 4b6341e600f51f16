"""pytorch/examples' fast_neural_style (its `train`) at toy size: the transformer network, a
stand-in for its loss network, the script's own loop, and a port to a `Module`
(tests/examples/test_fast_neural_style.py).

The loss network is torchvision's pretrained vgg16, which is not used here: `TinyVgg16` stands
in for it in both runs, with vgg16's `features` layout (the same convolutions, ReLUs and
max-pools at the same indices, sliced as the script's `Vgg16` slices them into relu1_2, relu2_2,
relu3_3 and relu4_3) at 4-8 channels. Like `models.vgg16(weights=...)` it is built with the
global generator's draws (its layers' default init) and then given fixed "pretrained" weights
from a generator of its own; it never requires grad and stays in training mode, as the script
leaves it.

The script as written: seeds, an unshuffled loader of images in [0, 255], `TransformerNet`
(reflection-padded convolutions, affine InstanceNorm, five residual blocks, nearest upsampling;
here at 4/8/8 channels), Adam(lr), MSELoss; the style image's Gram matrices computed once before
the loop; per batch `normalize_batch` on the output *and* on the input batch (dividing them by
255 in place), the content loss on relu2_2, the style loss summed over the four features then
scaled in place, one backward and step; the running means printed every `log_interval`
batches, the transformer's state dict saved every `checkpoint_interval` batches (between
`eval().cpu()` and `to(device).train()`) and after training. Amp/bf16 versions follow PyTorch's
recipe (autocast around the forward and losses, one GradScaler).
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module

C1, C2, C3, IMAGE, BATCH, LOG_INTERVAL, CHECKPOINT_INTERVAL = 4, 8, 8, 16, 2, 2, 2
CONTENT_WEIGHT, STYLE_WEIGHT, LR = 1e5, 1e10, 1e-3
VggOutputs = namedtuple("VggOutputs", ["relu1_2", "relu2_2", "relu3_3", "relu4_3"])


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, upsample: int) -> None:
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_in = torch.nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x_in))


class TransformerNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.in1 = ConvLayer(3, C1, kernel_size=9, stride=1), torch.nn.InstanceNorm2d(C1, affine=True)
        self.conv2, self.in2 = ConvLayer(C1, C2, kernel_size=3, stride=2), torch.nn.InstanceNorm2d(C2, affine=True)
        self.conv3, self.in3 = ConvLayer(C2, C3, kernel_size=3, stride=2), torch.nn.InstanceNorm2d(C3, affine=True)
        self.res1, self.res2, self.res3 = ResidualBlock(C3), ResidualBlock(C3), ResidualBlock(C3)
        self.res4, self.res5 = ResidualBlock(C3), ResidualBlock(C3)
        self.deconv1 = UpsampleConvLayer(C3, C2, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(C2, affine=True)
        self.deconv2 = UpsampleConvLayer(C2, C1, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(C1, affine=True)
        self.deconv3 = ConvLayer(C1, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res5(self.res4(self.res3(self.res2(self.res1(y)))))
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


def tiny_vgg16_features() -> torch.nn.Sequential:
    """vgg16's `features` up to index 22, at 4-8 channels: "M" is a max-pool."""
    layers: list[torch.nn.Module] = []
    channels = 3
    for v in (4, 4, "M", 8, 8, "M", 8, 8, 8, "M", 8, 8, 8):
        if v == "M":
            layers.append(torch.nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            assert isinstance(v, int)
            layers += [torch.nn.Conv2d(channels, v, kernel_size=3, padding=1), torch.nn.ReLU(inplace=True)]
            channels = v
    return torch.nn.Sequential(*layers)


class TinyVgg16(torch.nn.Module):
    """The script's `Vgg16` over `tiny_vgg16_features`, with fixed weights."""

    def __init__(self, requires_grad: bool = False) -> None:
        super().__init__()
        features = tiny_vgg16_features()  # draws from the global generator, as vgg16's construction does
        pretrained = torch.Generator().manual_seed(16)
        with torch.no_grad():
            for p in features.parameters():
                fan_in = p[0].numel() if p.dim() > 1 else 1
                p.copy_(torch.randn(p.shape, generator=pretrained) * (2 / fan_in) ** 0.5 if p.dim() > 1 else 0.05)
        self.slice1, self.slice2, self.slice3, self.slice4 = (torch.nn.Sequential() for _ in range(4))
        for x in range(4):
            self.slice1.add_module(str(x), features[x])
        for x in range(4, 9):
            self.slice2.add_module(str(x), features[x])
        for x in range(9, 16):
            self.slice3.add_module(str(x), features[x])
        for x in range(16, 23):
            self.slice4.add_module(str(x), features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X: torch.Tensor) -> VggOutputs:
        h_relu1_2 = self.slice1(X)
        h_relu2_2 = self.slice2(h_relu1_2)
        h_relu3_3 = self.slice3(h_relu2_2)
        h_relu4_3 = self.slice4(h_relu3_3)
        return VggOutputs(h_relu1_2, h_relu2_2, h_relu3_3, h_relu4_3)


def gram_matrix(y: torch.Tensor) -> torch.Tensor:
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


def normalize_batch(batch: torch.Tensor) -> torch.Tensor:
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def style_image() -> torch.Tensor:
    return torch.rand(3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(3)).mul(255)


def losses(transformer: torch.nn.Module, vgg: torch.nn.Module, gram_style: list[torch.Tensor],
           x: torch.Tensor, content_weight: float, style_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The script's batch, from `y = transformer(x)` to the two weighted losses."""
    mse_loss = torch.nn.MSELoss()
    n_batch = len(x)
    y = transformer(x)
    y = normalize_batch(y)
    x = normalize_batch(x)
    features_y = vgg(y)
    features_x = vgg(x)
    content_loss = content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)
    style_loss: Any = 0.
    for ft_y, gm_s in zip(features_y, gram_style):
        gm_y = gram_matrix(ft_y)
        style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
    style_loss *= style_weight
    return content_loss, style_loss


class FastNeuralStyle(Module):
    def __init__(self, save_dir: Path | None = None, content_weight: float = CONTENT_WEIGHT,
                 style_weight: float = STYLE_WEIGHT) -> None:
        super().__init__()
        self.content_weight, self.style_weight = content_weight, style_weight
        self.transformer = TransformerNet()
        self.vgg = TinyVgg16(requires_grad=False)
        self.save_dir = save_dir
        self.printed: list[tuple[float, float, float]] = []
        self.scale: float | None = None  # the original's GradScaler scale at the end (amp)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.transformer.parameters(), LR)

    def on_fit_start(self) -> None:
        style = style_image().repeat(BATCH, 1, 1, 1).to(self.device)
        self.gram_style = [gram_matrix(y) for y in self.vgg(normalize_batch(style))]

    def on_train_epoch_start(self) -> None:
        self.agg_content_loss, self.agg_style_loss = 0., 0.

    def training_step(self, batch: Any, batch_id: int) -> torch.Tensor:
        x, _ = batch
        content_loss, style_loss = losses(self.transformer, self.vgg, self.gram_style, x,
                                          self.content_weight, self.style_weight)
        self.agg_content_loss += content_loss.item()
        self.agg_style_loss += style_loss.item()
        if (batch_id + 1) % LOG_INTERVAL == 0:
            record(self.printed, self.agg_content_loss, self.agg_style_loss, batch_id)
        return content_loss + style_loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_id: int) -> None:
        if self.save_dir is not None and (batch_id + 1) % CHECKPOINT_INTERVAL == 0:
            save(self.transformer, self.save_dir, f"ckpt_epoch_{self.current_epoch}_batch_id_{batch_id + 1}.pth")

    def on_fit_end(self) -> None:
        if self.save_dir is not None:
            name = f"epoch_{self.trainer.max_epochs}_{self.content_weight}_{self.style_weight}.model"
            save(self.transformer, self.save_dir, name)


def record(printed: list[tuple[float, float, float]], content: float, style: float, batch_id: int) -> None:
    printed.append((content / (batch_id + 1), style / (batch_id + 1), (content + style) / (batch_id + 1)))


def save(transformer: torch.nn.Module, save_dir: Path, name: str) -> None:
    device = next(transformer.parameters()).device
    transformer.eval().cpu()
    torch.save(transformer.state_dict(), save_dir / name)
    transformer.to(device).train()


def make_fast_neural_style(save_dir: Path | None = None, **weights: float) -> tuple[FastNeuralStyle, DataLoader]:
    torch.manual_seed(42)
    images = torch.rand(6, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0)).mul(255)
    train_loader = DataLoader(TensorDataset(images, torch.zeros(6, dtype=torch.long)), batch_size=BATCH)
    return FastNeuralStyle(save_dir, **weights), train_loader


def original_fast_neural_style(precision: str, save_dir: Path | None = None, epochs: int = 2,
                               **weights: float) -> FastNeuralStyle:
    model, train_loader = make_fast_neural_style(save_dir, **weights)
    transformer, vgg = model.transformer, model.vgg
    optimizer = torch.optim.Adam(transformer.parameters(), LR)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    style = style_image().repeat(BATCH, 1, 1, 1)
    gram_style = [gram_matrix(y) for y in vgg(normalize_batch(style))]
    for e in range(epochs):
        transformer.train()
        agg_content_loss, agg_style_loss = 0., 0.
        for batch_id, (x, _) in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                content_loss, style_loss = losses(transformer, vgg, gram_style, x,
                                                  model.content_weight, model.style_weight)
                total_loss = content_loss + style_loss
            scaler.scale(total_loss).backward()
            scaler.step(optimizer)
            scaler.update()
            agg_content_loss += content_loss.item()
            agg_style_loss += style_loss.item()
            if (batch_id + 1) % LOG_INTERVAL == 0:
                record(model.printed, agg_content_loss, agg_style_loss, batch_id)
            if save_dir is not None and (batch_id + 1) % CHECKPOINT_INTERVAL == 0:
                save(transformer, save_dir, f"ckpt_epoch_{e}_batch_id_{batch_id + 1}.pth")
    if save_dir is not None:
        save(transformer, save_dir, f"epoch_{epochs}_{model.content_weight}_{model.style_weight}.model")
    model.scale = scaler.get_scale() if scaler.is_enabled() else None
    return model
