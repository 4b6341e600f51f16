"""pytorch/examples' distributed/FSDP2 (example.py, model.py) at toy size: its Transformer, the
script's own loop, and a port to a `Module` under `strategy=FSDP(shard_modules=[...])`.
tests/helpers/scripts/distributed_examples_worker.py runs both under torchrun; tests/examples/test_distributed_examples.py
reads the results.

The script as written: `torch.manual_seed(0)` on every rank, the Transformer built on the meta
device (dropout_p=0), `fully_shard` on each block and then on the whole model, `to_empty` on the
rank's device, `reset_parameters()` (see below), Adam(lr=1e-2), and per step a batch of token ids drawn from
the global generator (the same on every rank), `model(x).sum()` as the loss, backward,
`clip_grad_norm_(max_norm=1.0)`, step, zero_grad. Shrunk: 2 layers, dim 16, vocabulary 16,
batch 4 of 8 tokens, 4 steps. Its checkpointing (a full state dict saved after the steps, loaded
by the next run, which draws the same batches again from seed 0) and the bf16
`MixedPrecisionPolicy` option (no autocast) are not compared.

The script's initialization is not followed. It calls `model.reset_parameters()` on the
sharded Transformer alone, whose method resets the embeddings, the final norm and the output
layer: every block's parameters keep the uninitialized memory `to_empty` left there. And on a
CPU mesh, `reset_parameters()` run on the shards draws the same values on every rank (DTensor
has no random-number support there: the ranks' rows of each weight repeat each other). The
loop here initializes as one process does, `reset_parameters()` on every module holding
parameters, outermost first, and loads that into the sharded model the way the script's
Checkpointer loads a full state dict. The Trainer, for a model built on the meta device, gives
the same weights.

The port builds the Transformer in `configure_model` under `torch.device("meta")` and draws
each batch in `training_step`; its loader only counts steps, with a generator of its own, so the
global generator's draws are the script's (a loader without one draws each epoch's base seed
from it), and `use_distributed_sampler=False` (every rank steps through all of them, as the
script's ranks do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

from trainer import Module

STEPS, BATCH, SEQ = 4, 4, 8


@dataclass
class ModelArgs:
    n_layers: int = 2
    vocab_size: int = 16
    max_seq_len: int = SEQ
    dim: int = 16
    n_heads: int = 4
    dropout_p: float = 0.0


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.head_dim, self.n_heads, self.dropout_p = args.dim // args.n_heads, args.n_heads, args.dropout_p
        self.resid_dropout = nn.Dropout(args.dropout_p)
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seq_len, _ = x.size()
        queries = self.wq(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        keys = self.wk(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        values = self.wv(x).view(bsz, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        output = F.scaled_dot_product_attention(queries, keys, values, None, self.dropout_p if self.training else 0)
        return self.resid_dropout(self.wo(output.transpose(1, 2).contiguous().view(bsz, seq_len, -1)))

    def reset_parameters(self) -> None:
        for linear in (self.wq, self.wk, self.wv, self.wo):
            linear.reset_parameters()


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, dropout_p: float) -> None:
        super().__init__()
        self.w1, self.gelu, self.w2 = nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim)
        self.resid_dropout = nn.Dropout(dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resid_dropout(self.w2(self.gelu(self.w1(x))))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm, self.attention = nn.LayerNorm(args.dim), Attention(args)
        self.ffn_norm = nn.LayerNorm(args.dim)
        self.feed_forward = FeedForward(args.dim, hidden_dim=4 * args.dim, dropout_p=args.dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.max_seq_len = args.max_seq_len
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        self.dropout = nn.Dropout(args.dropout_p)
        self.layers = nn.ModuleList([TransformerBlock(args) for _ in range(args.n_layers)])
        self.norm = nn.LayerNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _bsz, seq_len = tokens.size()
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(0, seq_len, device=tokens.device))
        h = self.dropout(h)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


def reset_every_module(model: nn.Module) -> None:
    """`reset_parameters()` on each module holding parameters of its own, outermost first."""
    with torch.no_grad():
        for module in model.modules():
            if any(True for _ in module.parameters(recurse=False)):
                module.reset_parameters()  # type: ignore[operator]


def original(steps: int = STEPS) -> dict[str, torch.Tensor]:
    """The script's main after init_process_group, on CPU; the whole weights at the end."""
    from torch.distributed.fsdp import fully_shard

    from torch.distributed.tensor import distribute_tensor

    torch.manual_seed(0)
    args = ModelArgs()
    with torch.device("meta"):
        model = Transformer(args)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    # The initial weights of one process, loaded as the script's Checkpointer.load_model loads a
    # full state dict (its DTensor API); see the module's docstring.
    with torch.device("meta"):
        whole = Transformer(args)
    whole.to_empty(device="cpu")
    reset_every_module(whole)
    meta_sharded_sd = model.state_dict()
    sharded_sd = {}
    for param_name, full_tensor in whole.state_dict().items():
        sharded_meta_param = meta_sharded_sd[param_name]
        sharded_tensor = distribute_tensor(full_tensor, sharded_meta_param.device_mesh, sharded_meta_param.placements)
        sharded_sd[param_name] = nn.Parameter(sharded_tensor)
    model.load_state_dict(sharded_sd, strict=False, assign=True)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        x = torch.randint(0, args.vocab_size, (BATCH, SEQ))
        loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()
    return {k: v.full_tensor() for k, v in model.state_dict().items()}


class FSDP2Example(Module):
    def configure_model(self) -> None:
        with torch.device("meta"):
            self.model = Transformer(ModelArgs())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = torch.randint(0, ModelArgs.vocab_size, (BATCH, SEQ), device=self.device)
        return self.model(x).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class FSDP2ExampleEmptyInit(FSDP2Example):
    """The same port as Lightning writes it: `self.trainer.init_module(empty_init=True)`."""

    def configure_model(self) -> None:
        with self.trainer.init_module(empty_init=True):
            self.model = Transformer(ModelArgs())
        self.built_on_meta = all(p.is_meta for p in self.model.parameters())


def steps_loader(steps: int = STEPS) -> DataLoader:
    return DataLoader(range(steps), batch_size=None, generator=torch.Generator())
