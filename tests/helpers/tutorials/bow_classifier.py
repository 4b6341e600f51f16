"""beginner_source/nlp/deep_learning_tutorial.py's bag-of-words classifier: the tutorial's loop
(`original`) and its port to a LightningModule (`main`), written with this package's imports so
that `load_file` runs it under Lightning too.

The tutorial: a linear map of a sentence's word counts and a log-softmax, `nn.NLLLoss`, SGD at
0.1, one sentence per step from a list of (words, language) pairs with `model.zero_grad()`
first; the log-probabilities of the two test sentences and the weight column of "creo" are
printed before and after training.

The port: `training_step` builds the bag-of-words vector and target from the pair it gets;
`predict_step` gives the test sentences' log-probabilities. Differences from the tutorial: 20
epochs instead of 100.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader

import trainer as L

EPOCHS = 20
data = [("me gusta comer en la cafeteria".split(), "SPANISH"),
        ("Give it to me".split(), "ENGLISH"),
        ("No creo que sea una buena idea".split(), "SPANISH"),
        ("No it is not a good idea to get lost at sea".split(), "ENGLISH")]
test_data = [("Yo creo que si".split(), "SPANISH"),
             ("it is lost on me".split(), "ENGLISH")]
word_to_ix: dict[str, int] = {}
for sent, _ in data + test_data:
    for word in sent:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
VOCAB_SIZE = len(word_to_ix)
NUM_LABELS = 2
label_to_ix = {"SPANISH": 0, "ENGLISH": 1}


def make_bow_vector(sentence: list[str], word_to_ix: dict[str, int]) -> torch.Tensor:
    vec = torch.zeros(len(word_to_ix))
    for word in sentence:
        vec[word_to_ix[word]] += 1
    return vec.view(1, -1)


def make_target(label: str, label_to_ix: dict[str, int]) -> torch.Tensor:
    return torch.LongTensor([label_to_ix[label]])


class BoWClassifier(L.LightningModule):
    def __init__(self, num_labels: int, vocab_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(vocab_size, num_labels)
        self.loss_function = nn.NLLLoss()

    def forward(self, bow_vec: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.linear(bow_vec), dim=1)

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        instance, label = batch
        log_probs = self(make_bow_vector(instance, word_to_ix))
        return self.loss_function(log_probs, make_target(label, label_to_ix))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        instance, label = batch
        return self(make_bow_vector(instance, word_to_ix))

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.1)


def printed_state(model: BoWClassifier) -> list[torch.Tensor]:
    """What the tutorial prints: the test sentences' log-probabilities, the column of "creo"."""
    with torch.no_grad():
        return [model(make_bow_vector(instance, word_to_ix)) for instance, _ in test_data] + \
            [next(model.parameters())[:, word_to_ix["creo"]].detach().clone()]


def original(epochs: int = EPOCHS) -> tuple[BoWClassifier, list[torch.Tensor]]:
    torch.manual_seed(1)
    model = BoWClassifier(NUM_LABELS, VOCAB_SIZE)
    printed = printed_state(model)
    loss_function = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(epochs):
        for instance, label in data:
            model.zero_grad()
            bow_vec = make_bow_vector(instance, word_to_ix)
            target = make_target(label, label_to_ix)
            log_probs = model(bow_vec)
            loss = loss_function(log_probs, target)
            loss.backward()
            optimizer.step()
    return model, printed + printed_state(model)


def main(epochs: int = EPOCHS, as_list: bool = False) -> dict[str, Any]:
    """The port; `as_list` gives the lists of pairs themselves (read as lists of examples here;
    Lightning reads a list as several loaders), else a `DataLoader(..., batch_size=None)` over them."""
    torch.manual_seed(1)
    model = BoWClassifier(NUM_LABELS, VOCAB_SIZE)
    printed = printed_state(model)
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(model, data if as_list else DataLoader(data, batch_size=None))  # type: ignore[arg-type]
    predictions = trainer.predict(model, test_data if as_list else DataLoader(test_data, batch_size=None))  # type: ignore[arg-type]
    printed += list(predictions) + [next(model.parameters())[:, word_to_ix["creo"]].detach().clone()]  # type: ignore[arg-type]
    return {"model": model, "trainer": trainer, "printed": printed}
