"""pytorch/tutorials' transformer language model, ported to a `Module`.

Clipping, a per-epoch StepLR, the validation loss per epoch, the best weights kept and the
test split evaluated with them: the port trains, keeps and tests the weights of the
tutorial's own loop (tests/helpers/tutorials/transformer.py) and prints the same lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import callbacks
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.transformer import EPOCHS, TransformerModel, chunks, original, splits
from trainer import Trainer


def test_transformer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TransformerModel()
    train_data, val_data, test_data = splits()
    checkpoint = callbacks.ModelCheckpoint(dirpath=tmp_path / "port", monitor="val_loss", mode="min")
    trainer = Trainer(max_epochs=EPOCHS, gradient_clip_val=0.5, root_dir=tmp_path / "port",
                      **{**QUIET, "enable_checkpointing": True, "callbacks": [checkpoint]})
    trainer.fit(model, chunks(train_data), chunks(val_data))
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.test(model, chunks(test_data), ckpt_path="best")
    (tmp_path / "original").mkdir()
    reference = original(tmp_path / "original")
    assert_same_weights(model, reference)  # the best epoch's weights, loaded for the test
    assert model.printed == reference.printed and len(model.printed) == EPOCHS * 3 + 1
    torch.manual_seed(0)
    last = TransformerModel()
    last.load_state_dict(trained)
    assert Path(checkpoint.best_model_path).name.startswith("epoch=0-")  # the first epoch is the best here,
    with pytest.raises(AssertionError, match="differs"):                  # so the test ran on other weights
        assert_same_weights(last, reference)
