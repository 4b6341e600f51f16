"""advanced_source/neural_style_tutorial.py ("Neural Transfer Using PyTorch"), at toy size: the
tutorial's `run_style_transfer` (`original`) and its port to a LightningModule (`main`), written
with this package's imports so that `load_file` runs it under Lightning too.

The tutorial optimizes an image, not a network: content and style losses are modules inserted
after convolutions of a copy of a CNN in eval mode, L-BFGS steps the input image with a closure
that clamps it to [0, 1], evaluates the losses and backpropagates (also into the CNN's weights,
which no optimizer holds), and the loop `while run[0] <= num_steps` repeats `optimizer.step`
until the closure has run more than `num_steps` times; a last clamp follows.

The port: manual optimization (the automatic loop runs each batch's forward once; LBFGS calls
its closure many times per step: docs/manual_optimization.md); the image is a parameter of the
module, `configure_optimizers` gives L-BFGS only that one; `training_step` is one
`optimizer.step(closure=closure)`, the closure the tutorial's with `self.manual_backward`;
`self.trainer.should_stop` ends the run where the tutorial's `while` ends it; the last clamp is
in `on_train_end`. The loader only counts steps.

Differences from the tutorial: a five-convolution CNN of the VGG layout (convolutions, in-place
ReLUs, max pooling) with random weights stands for the pretrained VGG-19; 16x16 images drawn
from a seeded generator for the content and style pictures; `num_steps` 40 and a line every 10
closure runs instead of 300 and 50; no plots.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader

import trainer as L

NUM_STEPS = 40
PRINT_EVERY = 10
content_layers_default = ['conv_4']
style_layers_default = ['conv_1', 'conv_2', 'conv_3', 'conv_4', 'conv_5']
cnn_normalization_mean = torch.tensor([0.485, 0.456, 0.406])
cnn_normalization_std = torch.tensor([0.229, 0.224, 0.225])


class ContentLoss(nn.Module):
    def __init__(self, target: torch.Tensor) -> None:
        super().__init__()
        self.target = target.detach()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input: torch.Tensor) -> torch.Tensor:
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):
    def __init__(self, target_feature: torch.Tensor) -> None:
        super().__init__()
        self.target = gram_matrix(target_feature).detach()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.mean = mean.clone().view(-1, 1, 1)
        self.std = std.clone().view(-1, 1, 1)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return (img - self.mean) / self.std


def get_style_model_and_losses(cnn: nn.Sequential, normalization_mean: torch.Tensor, normalization_std: torch.Tensor,
                               style_img: torch.Tensor, content_img: torch.Tensor,
                               content_layers: list[str] = content_layers_default,
                               style_layers: list[str] = style_layers_default) -> tuple[nn.Sequential, list[StyleLoss], list[ContentLoss]]:
    cnn = copy.deepcopy(cnn)
    normalization = Normalization(normalization_mean, normalization_std)
    content_losses = []
    style_losses = []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = 'conv_{}'.format(i)
        elif isinstance(layer, nn.ReLU):
            name = 'relu_{}'.format(i)
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = 'pool_{}'.format(i)
        else:
            raise RuntimeError('Unrecognized layer: {}'.format(layer.__class__.__name__))
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]
    return model, style_losses, content_losses


def vgg_like() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 3, padding=1),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(inplace=True),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True)).eval()


def images() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.rand(1, 3, 16, 16, generator=g), torch.rand(1, 3, 16, 16, generator=g)


class Scores:
    """The closure's sums, weighting and printing (the tutorial's lines)."""

    def __init__(self) -> None:
        self.run = [0]
        self.printed: list[str] = []

    def loss(self, style_losses: list[StyleLoss], content_losses: list[ContentLoss],
             style_weight: float, content_weight: float) -> tuple[Any, Any]:
        style_score: Any = 0
        content_score: Any = 0
        for sl in style_losses:
            style_score += sl.loss
        for cl in content_losses:
            content_score += cl.loss
        style_score *= style_weight
        content_score *= content_weight
        return style_score, content_score

    def count(self, style_score: torch.Tensor, content_score: torch.Tensor) -> None:
        self.run[0] += 1
        if self.run[0] % PRINT_EVERY == 0:
            self.printed.append("run {}:".format(self.run))
            self.printed.append('Style Loss : {:4f} Content Loss: {:4f}'.format(style_score.item(), content_score.item()))


def original(num_steps: int = NUM_STEPS, style_weight: float = 1000000, content_weight: float = 1) -> tuple[torch.Tensor, Scores]:
    cnn = vgg_like()
    content_img, style_img = images()
    input_img = content_img.clone()
    model, style_losses, content_losses = get_style_model_and_losses(
        cnn, cnn_normalization_mean, cnn_normalization_std, style_img, content_img)
    optimizer = optim.LBFGS([input_img.requires_grad_()])
    scores = Scores()
    while scores.run[0] <= num_steps:

        def closure() -> torch.Tensor:
            input_img.data.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score, content_score = scores.loss(style_losses, content_losses, style_weight, content_weight)
            loss = style_score + content_score
            loss.backward()
            scores.count(style_score, content_score)
            return style_score + content_score

        optimizer.step(closure)  # type: ignore[no-untyped-call]
    input_img.data.clamp_(0, 1)
    return input_img, scores


class StyleTransfer(L.LightningModule):
    def __init__(self, cnn: nn.Sequential, content_img: torch.Tensor, style_img: torch.Tensor, num_steps: int = NUM_STEPS,
                 style_weight: float = 1000000, content_weight: float = 1) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.model, self.style_losses, self.content_losses = get_style_model_and_losses(
            cnn, cnn_normalization_mean, cnn_normalization_std, style_img, content_img)
        self.input_img = nn.Parameter(content_img.clone())
        self.num_steps, self.style_weight, self.content_weight = num_steps, style_weight, content_weight
        self.scores = Scores()

    def configure_optimizers(self) -> Any:
        return optim.LBFGS([self.input_img])

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()

        def closure() -> torch.Tensor:
            self.input_img.data.clamp_(0, 1)
            optimizer.zero_grad()
            self.model(self.input_img)
            style_score, content_score = self.scores.loss(self.style_losses, self.content_losses,
                                                          self.style_weight, self.content_weight)
            loss = style_score + content_score
            self.manual_backward(loss)
            self.scores.count(style_score, content_score)
            return style_score + content_score

        optimizer.step(closure=closure)
        if self.scores.run[0] > self.num_steps:
            self.trainer.should_stop = True

    def on_train_end(self) -> None:
        self.input_img.data.clamp_(0, 1)


def main(num_steps: int = NUM_STEPS, **options: Any) -> dict[str, Any]:
    content_img, style_img = images()
    model = StyleTransfer(vgg_like(), content_img, style_img, num_steps)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", **options)
    trainer.fit(model, DataLoader(range(1000), batch_size=None))
    return {"model": model, "trainer": trainer, "output": model.input_img.detach()}
