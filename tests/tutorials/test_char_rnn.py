"""pytorch/tutorials' char-RNN classification and generation, ported to a `Module`.

The port trains to the weights of the tutorials' own loops (tests/helpers/tutorials/char_rnn.py),
prints the same lines, and what the tutorials do after training (a confusion matrix over more
random draws, sampling with dropout) comes out the same.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials import char_rnn_batches
from tests.helpers.tutorials.char_rnn import (
    N_CONFUSION, N_HIDDEN, N_ITERS, RNN, GenRNN, n_categories, n_gen_letters, n_letters, original_classification,
    original_generation, random_examples, randomGenerationExample)
from trainer import Trainer


def test_classification() -> None:
    """One random name per step, `max_steps=n_iters` on an endless loader: the loader is read
    exactly n_iters times, so the confusion matrix's draws (`trainer.test` on the same endless
    loader, `limit_test_batches`) continue Python's random stream where the tutorial's do."""
    random.seed(0)
    torch.manual_seed(0)
    rnn = RNN(n_letters, N_HIDDEN, n_categories)
    trainer = Trainer(max_steps=N_ITERS, limit_test_batches=N_CONFUSION, **QUIET)
    trainer.fit(rnn, random_examples())
    trainer.test(rnn, random_examples())
    reference = original_classification()
    assert_same_weights(rnn, reference)
    assert rnn.printed == reference.printed and len(rnn.printed) == N_ITERS // 10
    assert rnn.all_losses == reference.all_losses
    assert torch.equal(rnn.confusion, reference.confusion) and rnn.confusion.sum() == N_CONFUSION


def test_generation() -> None:
    """A loss summed over the letters, dropout in training; the tutorial samples names right
    after training, the model still in training mode (its dropout draws): the port samples the
    same names after `fit`."""
    random.seed(0)
    torch.manual_seed(0)
    rnn = GenRNN(n_gen_letters, N_HIDDEN, n_gen_letters)
    Trainer(max_steps=N_ITERS, **QUIET).fit(rnn, random_examples(randomGenerationExample))
    samples, training = rnn.samples("Czech"), rnn.training
    reference = original_generation()
    assert_same_weights(rnn, reference)
    assert rnn.printed == reference.printed and len(rnn.printed) == N_ITERS // 10
    assert rnn.all_losses == reference.all_losses
    assert training == reference.training
    assert samples == reference.samples("Czech")


def test_generation_from_a_dataloader_draws_a_seed_the_tutorial_does_not() -> None:
    """The same draws wrapped in `DataLoader(batch_size=None)`: iterating it takes a base seed
    from torch's generator, so every dropout mask after it moves (docs/data.md: pass such data
    as a plain iterable, or give the loader its own `generator`)."""
    for loader, same in [(random_examples(randomGenerationExample, loader=True), False),
                         (random_examples(randomGenerationExample, loader=True, generator=torch.Generator()), True)]:
        random.seed(0)
        torch.manual_seed(0)
        rnn = GenRNN(n_gen_letters, N_HIDDEN, n_gen_letters)
        Trainer(max_steps=N_ITERS, **QUIET).fit(rnn, loader)
        if same:
            assert_same_weights(rnn, original_generation())
        else:
            with pytest.raises(AssertionError, match="differs"):
                assert_same_weights(rnn, original_generation())


def test_generation_resumed_halfway_ends_on_the_tutorials_weights(tmp_path: Path) -> None:
    """A checkpoint after half the iterations, resumed in a process whose random streams are
    elsewhere: the checkpoint's Python and torch states make the resumed run draw the
    tutorial's names and dropout masks, and it ends on the uninterrupted loop's weights."""
    random.seed(0)
    torch.manual_seed(0)
    rnn = GenRNN(n_gen_letters, N_HIDDEN, n_gen_letters)
    first = Trainer(max_steps=N_ITERS // 2, **QUIET)
    first.fit(rnn, random_examples(randomGenerationExample))
    first.save_checkpoint(tmp_path / "half.ckpt")
    random.seed(123)
    torch.manual_seed(123)
    resumed = GenRNN(n_gen_letters, N_HIDDEN, n_gen_letters)
    Trainer(max_steps=N_ITERS, **QUIET).fit(resumed, random_examples(randomGenerationExample),
                                            ckpt_path=tmp_path / "half.ckpt")
    assert_same_weights(resumed, original_generation())


def test_classification_as_it_is_now() -> None:
    """The current tutorial: minibatches made by hand each epoch (Python's shuffle,
    `np.array_split`), a loss summed over each batch's names, clipping at 3, and the
    confusion matrix of the test split from `trainer.test`."""
    random.seed(0)
    torch.manual_seed(0)
    train_set, test_set = char_rnn_batches.splits()
    rnn = char_rnn_batches.CharRNN(n_letters, char_rnn_batches.N_HIDDEN, len(char_rnn_batches.classes))
    trainer = Trainer(max_epochs=char_rnn_batches.N_EPOCH, gradient_clip_val=3, **QUIET)
    trainer.fit(rnn, char_rnn_batches.HandMadeBatches(train_set))
    trainer.test(rnn, [test_set[i] for i in range(len(test_set))])
    reference = char_rnn_batches.original()
    assert_same_weights(rnn, reference)
    assert rnn.all_losses == reference.all_losses and len(rnn.all_losses) == char_rnn_batches.N_EPOCH
    assert torch.equal(rnn.confusion, reference.confusion) and rnn.confusion.sum() == len(test_set)


@pytest.mark.parametrize("stop", [2, 7], ids=["inside-epoch-0", "inside-epoch-1"])
def test_classification_as_it_is_now_resumes_inside_an_epoch(tmp_path: Path, stop: int) -> None:
    """Stopped inside an epoch and resumed in a process whose random streams are elsewhere:
    the epoch's batches were cut from a `random.shuffle` made when the epoch's iteration
    began, so the replay must shuffle from Python's state of that moment (not only torch's),
    and the run ends on the tutorial's weights and losses."""
    random.seed(0)
    torch.manual_seed(0)
    train_set, _ = char_rnn_batches.splits()
    rnn = char_rnn_batches.CharRNN(n_letters, char_rnn_batches.N_HIDDEN, len(char_rnn_batches.classes))
    first = Trainer(max_steps=stop, max_epochs=char_rnn_batches.N_EPOCH, gradient_clip_val=3, **QUIET)
    first.fit(rnn, char_rnn_batches.HandMadeBatches(train_set))
    first.save_checkpoint(tmp_path / "mid.ckpt")
    random.seed(5)
    torch.manual_seed(5)
    resumed = char_rnn_batches.CharRNN(n_letters, char_rnn_batches.N_HIDDEN, len(char_rnn_batches.classes))
    Trainer(max_epochs=char_rnn_batches.N_EPOCH, gradient_clip_val=3, **QUIET).fit(
        resumed, char_rnn_batches.HandMadeBatches(train_set), ckpt_path=tmp_path / "mid.ckpt")
    reference = char_rnn_batches.original()
    assert_same_weights(resumed, reference)
    assert rnn.all_losses + resumed.all_losses == reference.all_losses


def test_batches_shuffled_by_numpy_resume_inside_an_epoch(tmp_path: Path) -> None:
    """The same batches shuffled by NumPy's global generator: resumed inside the second
    epoch, the run ends on the uninterrupted run's weights."""
    def run(stop: int | None = None, ckpt_path: Path | None = None) -> Any:
        np.random.seed(0)
        torch.manual_seed(0)
        train_set, _ = char_rnn_batches.splits()
        rnn = char_rnn_batches.CharRNN(n_letters, char_rnn_batches.N_HIDDEN, len(char_rnn_batches.classes))
        trainer = Trainer(max_steps=stop or -1, max_epochs=char_rnn_batches.N_EPOCH, gradient_clip_val=3, **QUIET)
        if ckpt_path is not None:
            np.random.seed(5)
        trainer.fit(rnn, char_rnn_batches.HandMadeBatches(train_set, numpy=True), ckpt_path=ckpt_path)
        return rnn, trainer

    _, first = run(stop=7)
    first.save_checkpoint(tmp_path / "mid.ckpt")
    resumed, _ = run(ckpt_path=tmp_path / "mid.ckpt")
    uninterrupted, _ = run()
    assert_same_weights(resumed, uninterrupted)
