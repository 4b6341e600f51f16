"""A HiFi-GAN vocoder trained by hand with two optimizers and two schedulers, from a public
repository found by code search (file id 66612958656: `class HiFiGAN(L.LightningModule)` with
`HiFiGANGenerator`).

Kept as written: `HiFiGANGenerator` (weight-normed pre/post convolutions and transposed
upsampling layers, `init_weights` applied to the upsamplers, parallel residual blocks run
through `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` while training and
directly in eval mode, SiLU activations, `tanh` output, `remove_parametrizations`), and `HiFiGAN`
whole: `automatic_optimization = False`, `self.optimizers()` unpacked into the generator's and
the discriminators' optimizers, the discriminator step under `train_discriminator` (its fake
audio made under `no_grad`), the generator step with feature-matching and adversarial losses
plus the mel L1 loss times 45, `update_lr()` stepping both `ExponentialLR` schedulers from
`self.lr_schedulers()` after every batch, `log_dict({'gen/total', 'disc/total'}, prog_bar=True)`
(`disc/total` a Python float `0.` while the discriminators are off), and `configure_optimizers`
returning `[opt_g, opt_d], [scheduler_g, scheduler_d]` with AdamW over `itertools.chain` of both
discriminators' parameters.
Substituted (the repository's `model/` modules are not in the file): `Conv1DNet`,
`TransConv1DNet`, `init_weights`, `ParallelResBlock`, the multi-period and multi-scale
discriminators, the three losses (HiFi-GAN's least-squares forms) and the mel features (a
fixed random projection of framed audio, log-compressed) are short versions written here;
sizes shrunk (hop 8, four mels, three upsamplings); the data are 12 synthetic clips; no
driver is in the file: a two-epoch `fit` without validation.
"""

from __future__ import annotations

import itertools
from functools import partial
from math import prod
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


# ---------------------------------------------------------------- stand-ins for the repository's model/ modules
def init_weights(m, mean=0.0, std=0.01):
    if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
        m.weight.data.normal_(mean, std)


class Conv1DNet(nn.Conv1d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, dilation=1):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation,
                         padding=(kernel_size * dilation - dilation) // 2)

    def weight_norm(self):
        weight_norm(self)
        return self

    def remove_weight_norm(self):
        parametrize.remove_parametrizations(self, "weight")


class TransConv1DNet(nn.ConvTranspose1d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=(kernel_size - stride) // 2)

    def weight_norm(self):
        weight_norm(self)
        return self

    def remove_weight_norm(self):
        parametrize.remove_parametrizations(self, "weight")


class ParallelResBlock(nn.Module):
    def __init__(self, channels, kernel_sizes, dilation_sizes):
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.ModuleList([Conv1DNet(channels, channels, k, dilation=d).weight_norm() for d in dilations])
            for k, dilations in zip(kernel_sizes, dilation_sizes)
        ])

    def forward(self, x):
        outs = []
        for convs in self.blocks:
            y = x
            for conv in convs:
                y = y + conv(F.leaky_relu(y, 0.1))
            outs.append(y)
        return torch.stack(outs).mean(0)

    def remove_parametrizations(self):
        for convs in self.blocks:
            for conv in convs:
                conv.remove_weight_norm()


class _Disc(nn.Module):
    def __init__(self, period: int):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([nn.Conv1d(1, 4, 3, padding=1), nn.Conv1d(4, 4, 3, padding=1)])
        self.post = nn.Conv1d(4, 1, 3, padding=1)

    def forward(self, x):
        fmap = []
        x = x[..., :: self.period]
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            fmap.append(x)
        x = self.post(x)
        fmap.append(x)
        return x.flatten(1), fmap


class _MultiDisc(nn.Module):
    periods: tuple = (1,)

    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList([_Disc(p) for p in self.periods])

    def forward(self, y, y_hat):
        real, gen, fmap_real, fmap_gen = [], [], [], []
        for d in self.discriminators:
            r, fr = d(y)
            g, fg = d(y_hat)
            real.append(r), gen.append(g), fmap_real.append(fr), fmap_gen.append(fg)
        return real, gen, fmap_real, fmap_gen


class MultiPeriodDiscriminator(_MultiDisc):
    periods = (2, 3)


class MultiScaleDiscriminator(_MultiDisc):
    periods = (1,)


class FeatureMatchingLoss(nn.Module):
    def forward(self, fmap_r, fmap_g):
        loss = 0
        for dr, dg in zip(fmap_r, fmap_g):
            for rl, gl in zip(dr, dg):
                loss += torch.mean(torch.abs(rl - gl))
        return loss * 2


class DiscriminatorLoss(nn.Module):
    def forward(self, disc_real_outputs, disc_generated_outputs):
        loss, r_losses, g_losses = 0, [], []
        for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
            r_loss = torch.mean((1 - dr) ** 2)
            g_loss = torch.mean(dg ** 2)
            loss += r_loss + g_loss
            r_losses.append(r_loss.item())
            g_losses.append(g_loss.item())
        return loss, r_losses, g_losses


class GeneratorLoss(nn.Module):
    def forward(self, disc_outputs):
        loss, gen_losses = 0, []
        for dg in disc_outputs:
            l = torch.mean((1 - dg) ** 2)
            gen_losses.append(l)
            loss += l
        return loss, gen_losses


class MelSpectrogramFeatures(nn.Module):
    def __init__(self, sr, n_fft, n_mels, win_length, hop_length):
        super().__init__()
        self.hop_length = hop_length
        self.register_buffer("basis", torch.randn(hop_length, n_mels, generator=torch.Generator().manual_seed(0)))

    def forward(self, audio):
        frames = audio.unfold(-1, self.hop_length, self.hop_length)
        return torch.log1p((frames @ self.basis).abs()).transpose(1, 2)


# ---------------------------------------------------------------- the file, as written
class HiFiGANGenerator(nn.Module):
    def __init__(
            self, hop_length: int = 512, num_mels: int = 512,
            upsample_rates: tuple[int] = (8, 8, 2, 2, 2), upsample_kernel_sizes: tuple[int] = (16, 16, 4, 4, 4),
            resblock_kernel_sizes: tuple[int] = (3, 7, 11), resblock_dilation_sizes: tuple[tuple[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
            upsample_initial_channel: int = 512, pre_conv_kernel_size: int = 13,
            post_conv_kernel_size: int = 13, activation: Callable[[Tensor], Tensor]=partial(F.silu, inplace=False)):
        super(HiFiGANGenerator, self).__init__()

        assert (prod(upsample_rates)==hop_length), f"hop_length must be {prod(upsample_rates)}"
        self.conv_pre = Conv1DNet(num_mels, upsample_initial_channel, pre_conv_kernel_size, stride=1).weight_norm()
        self.num_upsamples = len(upsample_rates)
        self.num_kernels = len(resblock_kernel_sizes)

        self.ups: list[TransConv1DNet] = nn.ModuleList([
            TransConv1DNet(upsample_initial_channel // (2**i), upsample_initial_channel // (2 ** (i + 1)), k, stride=u,).weight_norm()
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes))
        ])
        self.ups.apply(init_weights)

        self.resblocks: list[ParallelResBlock] = nn.ModuleList()
        ch: int = None
        for i in range(len(self.ups)):
            ch = upsample_initial_channel // (2 ** (i + 1))
            self.resblocks.append(ParallelResBlock(ch, resblock_kernel_sizes, resblock_dilation_sizes,))

        self.act = activation
        self.conv_post = Conv1DNet(ch, 1, post_conv_kernel_size, stride=1).weight_norm()
    def forward(self, x):
        x = self.conv_pre(x)
        for upsample_layer, resblock_group in zip(self.ups, self.resblocks):
            x = upsample_layer(self.act(x))
            if self.training: x = checkpoint(resblock_group, x, use_reentrant=False, )
            else: x = resblock_group(x)
        return torch.tanh(self.conv_post(self.act(x)))

    def remove_parametrizations(self):
        for up in self.ups: up.remove_weight_norm()
        for block in self.resblocks: block.remove_parametrizations()
        self.conv_pre.remove_weight_norm()
        self.conv_post.remove_weight_norm()

class HiFiGAN(L.LightningModule):
    def __init__(self, hop_length: int = 512, num_mels: int = 512,
            upsample_rates: tuple[int] = (8, 8, 2, 2, 2), upsample_kernel_sizes: tuple[int] = (16, 16, 4, 4, 4),
            resblock_kernel_sizes: tuple[int] = (3, 7, 11), resblock_dilation_sizes: tuple[tuple[int]] = ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
            upsample_initial_channel: int = 512, pre_conv_kernel_size: int = 13,
            post_conv_kernel_size: int = 13, sample_rate=44100, n_fft=2048, win_length=2048, training: bool = True):
        super().__init__()
        self.mpd = MultiPeriodDiscriminator()
        self.msd = MultiScaleDiscriminator()

        self.melspec = MelSpectrogramFeatures(sr=sample_rate, n_fft=n_fft, n_mels=num_mels, win_length=win_length, hop_length=hop_length)
        self.generator = HiFiGANGenerator(hop_length=hop_length, num_mels=num_mels, upsample_rates=upsample_rates, upsample_kernel_sizes=upsample_kernel_sizes,
                                          resblock_kernel_sizes=resblock_kernel_sizes, resblock_dilation_sizes=resblock_dilation_sizes,
                                          upsample_initial_channel=upsample_initial_channel, pre_conv_kernel_size=pre_conv_kernel_size, post_conv_kernel_size=post_conv_kernel_size)

        self.lr = 1e-4
        self.feature_loss = FeatureMatchingLoss()
        self.discriminator_loss = DiscriminatorLoss()
        self.generator_loss = GeneratorLoss()
        self.l1_factor = 45

        self.automatic_optimization = False
        self.train_discriminator = False

    def forward(self, x): return self.generator(x)

    def get_mel_spec(self, x: Tensor) -> Tensor: return self.melspec(x)

    def training_step(self, batch, batch_idx):
        audio_mel, audio = batch

        optim_g, optim_d = self.optimizers()

        # Discriminator step
        if self.train_discriminator:
            optim_d.zero_grad()
            with torch.no_grad():
                audio_pred = self(audio_mel)
            mpd_score_real, mpd_score_gen, _, _ = self.mpd(y=audio, y_hat=audio_pred)
            loss_disc_mpd, _, _ = self.discriminator_loss(disc_real_outputs=mpd_score_real, disc_generated_outputs=mpd_score_gen)
            msd_score_real, msd_score_gen, _, _ = self.msd(y=audio, y_hat=audio_pred)
            loss_disc_msd, _, _ = self.discriminator_loss(disc_real_outputs=msd_score_real, disc_generated_outputs=msd_score_gen)
            loss_d = loss_disc_msd + loss_disc_mpd
            self.manual_backward(loss_d)
            optim_d.step()
        else: loss_d = 0.

        # Generator step
        optim_g.zero_grad()

        audio_pred = self(audio_mel)
        audio_pred_mel = self.get_mel_spec(audio_pred.squeeze(1))

        loss_mel = F.l1_loss(audio_pred_mel, audio_mel)
        if self.train_discriminator:
            _, mpd_score_gen, fmap_mpd_real, fmap_mpd_gen = self.mpd(y=audio, y_hat=audio_pred)
            _, msd_score_gen, fmap_msd_real, fmap_msd_gen = self.msd(y=audio, y_hat=audio_pred)
            loss_fm_mpd = self.feature_loss(fmap_mpd_real, fmap_mpd_gen)
            loss_fm_msd = self.feature_loss(fmap_msd_real, fmap_msd_gen)
            loss_gen_mpd, _ = self.generator_loss(disc_outputs=mpd_score_gen)
            loss_gen_msd, _ = self.generator_loss(disc_outputs=msd_score_gen)
        else:
            loss_gen_msd = loss_gen_mpd = loss_fm_msd = loss_fm_mpd = 0
        loss_g = loss_gen_msd + loss_gen_mpd + loss_fm_msd + loss_fm_mpd + loss_mel * self.l1_factor
        self.manual_backward(loss_g)
        optim_g.step()

        self.update_lr()
        self.log_dict({'gen/total': loss_g, 'disc/total': loss_d}, prog_bar=True)

    def configure_optimizers(self):
        gen_params = self.generator.parameters()
        disc_params = itertools.chain(self.msd.parameters(), self.mpd.parameters())
        opt_g = torch.optim.AdamW(gen_params, lr=self.lr, betas=(0.8, 0.9), weight_decay=0.1)
        opt_d = torch.optim.AdamW(disc_params, lr=self.lr, betas=(0.8, 0.9), weight_decay=0.1)

        decay = .999
        scheduler_g = torch.optim.lr_scheduler.ExponentialLR(opt_g, decay)
        scheduler_d = torch.optim.lr_scheduler.ExponentialLR(opt_d, decay)
        return [opt_g, opt_d], [scheduler_g, scheduler_d]

    def update_lr(self,):
        sch1, sch2 = self.lr_schedulers()
        sch1.step()
        sch2.step()


# ---------------------------------------------------------------- a driver (none is in the file)
def main(root_dir: str | Path, precision: str = "32-true", train_discriminator: bool = True) -> dict[str, Any]:
    L.seed_everything(0)
    model = HiFiGAN(hop_length=8, num_mels=4, upsample_rates=(2, 2, 2), upsample_kernel_sizes=(4, 4, 4),
                    resblock_kernel_sizes=(3,), resblock_dilation_sizes=((1, 3),), upsample_initial_channel=8,
                    pre_conv_kernel_size=3, post_conv_kernel_size=3)
    model.train_discriminator = train_discriminator
    audio = torch.rand(12, 1, 32) * 2 - 1
    with torch.no_grad():
        audio_mel = model.get_mel_spec(audio.squeeze(1))
    loader = DataLoader(TensorDataset(audio_mel, audio), batch_size=4, shuffle=True)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", precision=precision, default_root_dir=str(root_dir),
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(model, loader)
    lrs = [optimizer.param_groups[0]["lr"] for optimizer in trainer.optimizers]
    metrics = dict(trainer.callback_metrics)
    model.generator.remove_parametrizations()
    return {"model": model, "trainer": trainer, "val": metrics, "lrs": lrs}
