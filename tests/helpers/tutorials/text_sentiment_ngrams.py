"""beginner_source/text_sentiment_ngrams_tutorial.py ("Text classification with the torchtext
library"), at toy size: the tutorial's loop (`original`) and its port to a LightningModule
(`main`), written with this package's imports so that `load_file` runs it under Lightning too.

The tutorial: an `nn.EmbeddingBag` (mean of a bag of token embeddings, no padding: the texts are
concatenated and `offsets` marks where each starts) and a linear layer; `collate_batch` builds
`(label, text, offsets)` from `(label, text)` pairs; SGD at 5.0 with `clip_grad_norm_(..., 0.1)`;
after each epoch the accuracy on a validation split (`random_split`, a shuffled loader), and a
`StepLR(gamma=0.1)` stepped only when that accuracy fell below the best so far; finally the
accuracy on the test set.

The port: `training_step` and the tutorial's accuracy lines every `LOG_INTERVAL` batches,
`gradient_clip_val=0.1`, `validation_step` counting the correct labels, and the conditional
scheduler step in `on_validation_epoch_end` through `self.lr_schedulers()`: the scheduler is
returned from `configure_optimizers` (so checkpoints hold it) and `lr_scheduler_step` is
overridden to do nothing, so only the validation decides when it steps. Written that way it
runs the same under Lightning, which steps an epoch-interval scheduler before the epoch's
validation, and here, where it is stepped after it.

Differences from the tutorial, with no download: AG_NEWS (torchtext) is replaced by short
random "sentences" over a 16-word vocabulary whose label (1-4) is told by its first word; the
tokenizer is `str.split` and the vocabulary a dict; sizes, epochs and the logging interval are
smaller; `time` is not printed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.dataset import random_split

import trainer as L

EPOCHS = 4
LR = 5  # learning rate
BATCH_SIZE = 8
LOG_INTERVAL = 2
EMSIZE = 8
WORDS = [f"w{i}" for i in range(15)]
vocab = {"<unk>": 0} | {word: i + 1 for i, word in enumerate(WORDS)}
tokenizer = str.split
text_pipeline = lambda x: [vocab.get(token, 0) for token in tokenizer(x)]  # noqa: E731  (the tutorial's)
label_pipeline = lambda x: int(x) - 1  # noqa: E731


def ag_news_like(n: int, seed: int) -> list[tuple[int, str]]:
    """`n` (label, text) pairs: 3 to 9 words, the first of them telling the label."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        label = int(torch.randint(1, 5, (), generator=g))
        length = int(torch.randint(3, 10, (), generator=g))
        words = [WORDS[label - 1]] + [WORDS[int(i)] for i in torch.randint(0, 15, (length - 1,), generator=g)]
        items.append((label, " ".join(words)))
    return items


def collate_batch(batch: list[tuple[int, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(label_pipeline(_label))
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    labels = torch.tensor(label_list, dtype=torch.int64)
    starts = torch.tensor(offsets[:-1]).cumsum(dim=0)
    return labels, torch.cat(text_list), starts


def loaders() -> tuple[DataLoader, DataLoader, DataLoader]:
    """The tutorial's split and loaders (the split draws from torch's generator, as there)."""
    train_dataset, test_dataset = ag_news_like(60, seed=1), ag_news_like(16, seed=2)
    num_train = int(len(train_dataset) * 0.8)
    split_train_, split_valid_ = random_split(train_dataset, [num_train, len(train_dataset) - num_train])  # type: ignore[arg-type]
    return (DataLoader(split_train_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch),
            DataLoader(split_valid_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch),
            DataLoader(test_dataset, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch))  # type: ignore[arg-type]


class TextClassificationModel(L.LightningModule):
    def __init__(self, vocab_size: int, embed_dim: int, num_class: int) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()
        self.criterion = torch.nn.CrossEntropyLoss()
        self.printed: list[str] = []
        self.total_accu: float | None = None
        self.lrs: list[float] = []
        self.decide_when_stepped = False

    def init_weights(self) -> None:
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)

    # the tutorial's counting and printing, shared by both runs
    def reset_counts(self) -> None:
        self.total_acc, self.total_count = 0, 0

    def count(self, predicted_label: torch.Tensor, label: torch.Tensor) -> None:
        self.total_acc += (predicted_label.argmax(1) == label).sum().item()
        self.total_count += label.size(0)

    def print_progress(self, epoch: int, idx: int, batches: int) -> None:
        if idx % LOG_INTERVAL == 0 and idx > 0:
            self.printed.append(f"| epoch {epoch:3d} | {idx:5d}/{batches:5d} batches | accuracy {self.total_acc / self.total_count:8.3f}")
            self.reset_counts()

    def decide(self, accu_val: float, scheduler: Any, epoch: int) -> None:
        """The tutorial's rule: step the scheduler when the accuracy fell below the best."""
        if self.total_accu is not None and self.total_accu > accu_val:
            scheduler.step()
        else:
            self.total_accu = accu_val
        self.printed.append(f"| end of epoch {epoch:3d} | valid accuracy {accu_val:8.3f} ")
        self.lrs.append(scheduler.get_last_lr()[0])

    # the port
    def on_train_epoch_start(self) -> None:
        self.reset_counts()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        label, text, offsets = batch
        predicted_label = self(text, offsets)
        loss = self.criterion(predicted_label, label)
        self.count(predicted_label, label)
        self.print_progress(self.current_epoch + 1, batch_idx, self.trainer.num_training_batches)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.reset_counts()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        label, text, offsets = batch
        self.count(self(text, offsets), label)

    def on_validation_epoch_end(self) -> None:
        self.accu_val = self.total_acc / self.total_count
        self.log("valid_accuracy", self.accu_val)
        if not self.decide_when_stepped:
            self.decide(self.accu_val, self.lr_schedulers(), self.current_epoch + 1)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        if self.decide_when_stepped:  # the other way to write it: at the Trainer's epoch step
            self.decide(getattr(self, "accu_val", float("nan")), scheduler, self.current_epoch + 1)
        # else: stepped by the validation's decision (on_validation_epoch_end)

    def on_test_epoch_start(self) -> None:
        self.reset_counts()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        label, text, offsets = batch
        self.count(self(text, offsets), label)

    def on_test_epoch_end(self) -> None:
        self.log("test_accuracy", self.total_acc / self.total_count)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=LR)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)  # type: ignore[arg-type]
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def new_model(seed: int = 0) -> TextClassificationModel:
    torch.manual_seed(seed)
    return TextClassificationModel(len(vocab), EMSIZE, 4)


def main(epochs: int = EPOCHS, decide_when_stepped: bool = False, **options: Any) -> dict[str, Any]:
    """The port: fit with the validation split, then test. `decide_when_stepped` moves the
    decision into `lr_scheduler_step`, which both packages call right after the epoch's last
    optimizer step, before its validation (so it decides on the previous epoch's accuracy)."""
    model = new_model()
    model.decide_when_stepped = decide_when_stepped
    train_dataloader, valid_dataloader, test_dataloader = loaders()
    trainer = L.Trainer(max_epochs=epochs, gradient_clip_val=0.1, num_sanity_val_steps=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", **options)
    trainer.fit(model, train_dataloader, valid_dataloader)
    valid = float(trainer.callback_metrics["valid_accuracy"])
    test = trainer.test(model, test_dataloader, verbose=False)
    return {"model": model, "trainer": trainer, "valid": valid, "test": test[0]["test_accuracy"]}


def original(epochs: int = EPOCHS) -> tuple[TextClassificationModel, float]:
    """The tutorial's loop (its `train` and `evaluate`, with `model`, `optimizer`,
    `criterion`, `scheduler` and `epoch` passed instead of read as globals)."""
    model = new_model()
    train_dataloader, valid_dataloader, test_dataloader = loaders()
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)  # type: ignore[arg-type]

    def train(dataloader: DataLoader, epoch: int) -> None:
        model.train()
        model.reset_counts()
        for idx, (label, text, offsets) in enumerate(dataloader):
            optimizer.zero_grad()
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            model.count(predicted_label, label)
            model.print_progress(epoch, idx, len(dataloader))

    def evaluate(dataloader: DataLoader) -> float:
        model.eval()
        model.reset_counts()
        with torch.no_grad():
            for idx, (label, text, offsets) in enumerate(dataloader):
                predicted_label = model(text, offsets)
                criterion(predicted_label, label)
                model.count(predicted_label, label)
        return model.total_acc / model.total_count

    for epoch in range(1, epochs + 1):
        train(train_dataloader, epoch)
        accu_val = evaluate(valid_dataloader)
        model.decide(accu_val, scheduler, epoch)
    return model, evaluate(test_dataloader)
