"""beginner_source/transformer_tutorial.py (language modeling with `nn.TransformerEncoder`) at toy size.

The tutorial batchifies one long token stream per split into `[seq_len, batch]` columns and
reads them in `bptt`-long chunks (`get_batch`), in order, without a `DataLoader`. Each
training chunk: forward, `CrossEntropyLoss`, `zero_grad`, backward,
`clip_grad_norm_(model.parameters(), 0.5)`, SGD step at lr 5.0; it prints the mean loss,
perplexity and the scheduler's lr every `log_interval` batches. After each epoch it
evaluates (`model.eval()`, `no_grad`, each chunk's loss weighted by its length, divided by
`len(eval_data) - 1`), saves the weights when the validation loss is the best so far, and
steps `StepLR(optimizer, 1.0, gamma=0.95)`. After training it loads the best weights and
evaluates the test split. The port: the chunks as lists (`get_batch`'s pairs, in order),
`gradient_clip_val=0.5`, the scheduler from `configure_optimizers` (per epoch), the
validation loss logged from `on_validation_epoch_end`, and `ModelCheckpoint(monitor=...)` with
`trainer.test(..., ckpt_path="best")` for the best weights. Sizes: 20 tokens, width 16,
`bptt` 5, 6 training chunks of 4 columns per epoch.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer

from trainer import Module

NTOKENS, EMSIZE, D_HID, NLAYERS, NHEAD, DROPOUT = 20, 16, 16, 2, 2, 0.2
BPTT, BATCH_SIZE, EVAL_BATCH_SIZE, LOG_INTERVAL, EPOCHS = 5, 4, 2, 2, 3


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 64) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pe[:x.size(0)]  # type: ignore[index]
        return self.dropout(x)


class TransformerModel(Module):
    def __init__(self, ntoken: int = NTOKENS, d_model: int = EMSIZE, nhead: int = NHEAD, d_hid: int = D_HID,
                 nlayers: int = NLAYERS, dropout: float = DROPOUT) -> None:
        super().__init__()
        self.model_type = "Transformer"
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)
        self.init_weights()
        self.criterion = nn.CrossEntropyLoss()
        self.printed: list[str] = []

    def init_weights(self) -> None:
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        src = self.embedding(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask)
        return self.linear(output)

    def loss(self, data: Tensor, targets: Tensor) -> Tensor:
        return self.criterion(self(data).view(-1, NTOKENS), targets)

    def log_train(self, epoch: int, batch: int, num_batches: int, lr: float, loss: float) -> None:
        """The tutorial's running loss and its print every `LOG_INTERVAL` batches (no time)."""
        if batch == 0:
            self.total_loss = 0.0
        self.total_loss += loss
        if batch % LOG_INTERVAL == 0 and batch > 0:
            cur_loss = self.total_loss / LOG_INTERVAL
            self.printed.append(f"| epoch {epoch:3d} | {batch:5d}/{num_batches:5d} batches | "
                                f"lr {lr:02.2f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}")
            self.total_loss = 0

    def print_val(self, epoch: int, val_loss: float) -> None:
        self.printed.append(f"| end of epoch {epoch:3d} | valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")

    def print_test(self, test_loss: float) -> None:
        self.printed.append(f"| End of training | test loss {test_loss:5.2f} | test ppl {math.exp(test_loss):8.2f}")

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = self.loss(*batch)
        lr = self.lr_schedulers().get_last_lr()[0]  # type: ignore[union-attr]
        self.log_train(self.current_epoch + 1, batch_idx, len(self.trainer.train_dataloader), lr, loss.item())
        return loss

    def on_validation_epoch_start(self) -> None:
        self.eval_loss = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        data, targets = batch
        self.eval_loss += data.size(0) * self.loss(data, targets).item()

    def on_validation_epoch_end(self) -> None:
        val_loss = self.eval_loss / sum(len(data) for data, _ in self.trainer.val_dataloaders)
        self.print_val(self.current_epoch + 1, val_loss)
        self.log("val_loss", val_loss)

    on_test_epoch_start = on_validation_epoch_start
    test_step = validation_step

    def on_test_epoch_end(self) -> None:
        self.print_test(self.eval_loss / sum(len(data) for data, _ in self.trainer.test_dataloaders))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=5.0)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)  # type: ignore[arg-type]


def batchify(data: Tensor, bsz: int) -> Tensor:
    seq_len = data.size(0) // bsz
    data = data[:seq_len * bsz]
    return data.view(bsz, seq_len).t().contiguous()


def get_batch(source: Tensor, i: int) -> tuple[Tensor, Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].reshape(-1)
    return data, target


def splits() -> tuple[Tensor, Tensor, Tensor]:
    """Token streams standing in for WikiText-2's three splits, batchified."""
    g = torch.Generator().manual_seed(0)
    return (batchify(torch.randint(0, NTOKENS, (4 * 31 + 3,), generator=g), BATCH_SIZE),
            batchify(torch.randint(0, NTOKENS, (2 * 13,), generator=g), EVAL_BATCH_SIZE),
            batchify(torch.randint(0, NTOKENS, (2 * 9,), generator=g), EVAL_BATCH_SIZE))


def chunks(source: Tensor) -> list[tuple[Tensor, Tensor]]:
    """The port's loaders: `get_batch` over the split, in the tutorial's order."""
    return [get_batch(source, i) for i in range(0, source.size(0) - 1, BPTT)]


def original(tmp_path: Any) -> TransformerModel:
    torch.manual_seed(0)
    model = TransformerModel()
    train_data, val_data, test_data = splits()
    optimizer, scheduler = model.configure_optimizers()

    def train(epoch: int) -> None:
        model.train()
        num_batches = len(train_data) // BPTT
        for batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
            data, targets = get_batch(train_data, i)
            loss = model.loss(data, targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            model.log_train(epoch, batch, num_batches, scheduler.get_last_lr()[0], loss.item())

    def evaluate(eval_data: Tensor) -> float:
        model.eval()
        total_loss = 0.
        with torch.no_grad():
            for i in range(0, eval_data.size(0) - 1, BPTT):
                data, targets = get_batch(eval_data, i)
                total_loss += data.size(0) * model.loss(data, targets).item()
        return total_loss / (len(eval_data) - 1)

    best_val_loss, best_model_params_path = float("inf"), tmp_path / "best_model_params.pt"
    for epoch in range(1, EPOCHS + 1):
        train(epoch)
        val_loss = evaluate(val_data)
        model.print_val(epoch, val_loss)
        if val_loss < best_val_loss:
            best_val_loss = val_loss
            torch.save(model.state_dict(), best_model_params_path)
        scheduler.step()
    model.load_state_dict(torch.load(best_model_params_path))
    model.print_test(evaluate(test_data))
    return model
