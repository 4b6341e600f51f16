"""pytorch/examples' distributed/minGPT-ddp at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_mingpt.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

minGPT (nn.MultiheadAttention with the script's float `attn_mask`, GELU MLP, dropout 0.1),
AdamW(betas=(0.9, 0.95)) over decay/no-decay groups in sorted name order, clip_grad_norm_
at 1.0 before each step, a DistributedSampler (one replica here) told `set_epoch(epoch)`
with the 1-based epoch; the eval pass never calls model.eval() (dropout stays on) and runs
under set_grad_enabled(False). Under use_amp the script clips the *scaled* gradients (no
unscale_): an automatic port, which unscales before clipping, ends elsewhere; a
manual-optimization port clips as the script does. The port calls set_epoch itself in
on_train_epoch_start, after the Trainer's own call (the script's epochs count from 1).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


V, BLOCK, EMBD = 8, 6, 16


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.resid_drop, self.c_proj = nn.Dropout(0.1), nn.Linear(EMBD, EMBD)
        self.register_buffer("mask", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))
        self.attn = nn.MultiheadAttention(embed_dim=EMBD, num_heads=2, dropout=0.1, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_size = x.size(1)
        return self.resid_drop(self.c_proj(self.attn(x, x, x, attn_mask=self.mask[0, 0, :seq_size, :seq_size])[0]))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2, self.attn = nn.LayerNorm(EMBD), nn.LayerNorm(EMBD), Attention()
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(V, EMBD), nn.Parameter(torch.zeros(1, BLOCK, EMBD))
        self.drop, self.blocks = nn.Dropout(0.1), nn.Sequential(Block())
        self.ln_f, self.head = nn.LayerNorm(EMBD), nn.Linear(EMBD, V, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.data.zero_()
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                p.data.normal_(mean=0.0, std=0.02 / math.sqrt(2))
        self.train_losses: list[float] = []
        self.eval_losses: list[float] = []

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :idx.size(1), :])
        logits = self.head(self.ln_f(self.blocks(x)))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def on_train_epoch_start(self) -> None:
        self.trainer.train_dataloader.sampler.set_epoch(self.current_epoch + 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        _, loss = self(*batch)
        self.train_losses.append(loss.item())
        return loss

    def on_validation_model_eval(self) -> None:
        pass  # the script evaluates in training mode

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.eval_losses.append(self(*batch)[1].item())

    def configure_optimizers(self) -> Any:
        decay, no_decay = set(), set()
        for mn, m in self.named_modules():
            for pn, _ in m.named_parameters():
                fpn = f"{mn}.{pn}" if mn else pn
                blacklisted = pn.endswith("weight") and isinstance(m, (nn.LayerNorm, nn.Embedding))
                if pn.endswith("bias") or pn.endswith("pos_emb") or blacklisted:
                    no_decay.add(fpn)
                elif pn.endswith("in_proj_weight") or (pn.endswith("weight") and isinstance(m, nn.Linear)):
                    decay.add(fpn)
        params = dict(self.named_parameters())
        assert not decay & no_decay and params.keys() == decay | no_decay
        groups = [{"params": [params[pn] for pn in sorted(decay)], "weight_decay": 0.1},
                  {"params": [params[pn] for pn in sorted(no_decay)], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95))


class GPTManual(GPT):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:  # _run_batch(train=True)
        opt = self.optimizers()
        _, loss = self(*batch)
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)  # scaled gradients under amp, as the script
        opt.step()
        self.train_losses.append(loss.item())


class CharDataset(Dataset):
    def __init__(self, data: str) -> None:
        self.stoi = {ch: i for i, ch in enumerate(sorted(set(data)))}
        self.data = data

    def __len__(self) -> int:
        return len(self.data) - BLOCK

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        dix = [self.stoi[s] for s in self.data[idx:idx + BLOCK + 1]]
        return torch.tensor(dix[:-1], dtype=torch.long), torch.tensor(dix[1:], dtype=torch.long)


def make_gpt(cls: type[GPT] = GPT) -> tuple[GPT, DataLoader, DataLoader]:
    text = "".join("abcdefgh"[i] for i in torch.randint(0, V, (62,), generator=torch.Generator().manual_seed(8)))
    torch.manual_seed(0)  # the script never seeds (random_split draws from torch's generator)
    dataset = CharDataset(text)
    train_set, test_set = random_split(dataset, [int(len(dataset) * 0.8), len(dataset) - int(len(dataset) * 0.8)])
    loaders = [DataLoader(d, batch_size=8, shuffle=False, sampler=DistributedSampler(d, num_replicas=1, rank=0))
               for d in (train_set, test_set)]
    return cls(), loaders[0], loaders[1]


def original_gpt(precision: str, epochs: int = 2) -> GPT:
    model, train_loader, test_loader = make_gpt()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = model.configure_optimizers()
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch + 1)
        for source, targets in train_loader:
            with torch.set_grad_enabled(True), autocast():
                _, loss = model(source, targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            model.train_losses.append(loss.item())
        for source, targets in test_loader:
            with torch.set_grad_enabled(False), autocast():
                model.eval_losses.append(model(source, targets)[1].item())
    return model
