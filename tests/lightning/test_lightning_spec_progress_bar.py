"""TQDMProgressBar as Lightning's own tests specify what a user sees of it
(tests_pytorch/callbacks/progress/test_tqdm_progress_bar.py), each scenario run under Lightning and
here, with only the imports changed, and compared: `refresh_rate` (given, default, Colab's and
`TQDM_MINITERS`), the values the bar prints and `trainer.progress_bar_metrics`, and that every
batch hook of a bar subclass runs.

Not compared: Lightning's own tqdm objects (`train_progress_bar.n_values`, descriptions,
`Tqdm.format_num`) and `get_metrics`/`init_*_tqdm` overrides: the Trainer here draws its bars
itself (a deliberate difference, docs/lightning.md); the step loss in `progress_bar_metrics`
(documented there too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import contextlib
import io
import os
import re
from unittest import mock
import torch
from trainer import Trainer
from callbacks import TQDMProgressBar
from trainer.demos.boring_classes import BoringModel


def refresh_rates(root):
    """Lightning: test_tqdm_progress_bar_default_value, ..._value_on_colab, ..._refresh_rate_via_env_variable."""
    out = [Trainer(default_root_dir=root, callbacks=TQDMProgressBar(), logger=False).progress_bar_callback.refresh_rate]
    with mock.patch.dict(os.environ, {"COLAB_GPU": "1"}):
        for bar in (TQDMProgressBar(), TQDMProgressBar(refresh_rate=19)):
            out.append(Trainer(default_root_dir=root, callbacks=bar, logger=False).progress_bar_callback.refresh_rate)
    for rate, env in ((0, 1), (1, 0), (1, 1), (2, 1), (1, 2)):
        with mock.patch.dict(os.environ, {"TQDM_MINITERS": str(env)}):
            out.append(TQDMProgressBar(refresh_rate=rate).refresh_rate)
    return out


def printed(root):
    """Lightning: test_tensor_to_float_conversion (what the bar prints, progress_bar_metrics)."""
    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("a", torch.tensor(0.123), prog_bar=True, on_epoch=False)
            self.log("b", torch.tensor([1]), prog_bar=True, on_epoch=False)
            self.log("c", 2, prog_bar=True, on_epoch=False)
            self.log("hidden", 5.0, on_epoch=False)
            return super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                      enable_checkpointing=False, enable_model_summary=False, callbacks=TQDMProgressBar())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        trainer.fit(Model())
    text = out.getvalue() + err.getvalue()
    shown = {name: bool(re.search(rf"\\b{name}=", text)) for name in ("a", "b", "c", "hidden")}
    values = [piece for piece in ("a=0.123", "b=1.000", "c=2.000") if piece in text]
    return shown, values, {k: float(v) for k, v in trainer.progress_bar_metrics.items() if k != "loss"}


def hooks_seen(root, refresh_rate=1):
    """Lightning: test_tqdm_progress_bar_progress_refresh (a subclass's batch hooks all run)."""
    class Counting(TQDMProgressBar):
        train = val = test = 0

        def on_train_batch_end(self, *args):
            super().on_train_batch_end(*args)
            self.train += 1

        def on_validation_batch_end(self, *args):
            super().on_validation_batch_end(*args)
            self.val += 1

        def on_test_batch_end(self, *args):
            super().on_test_batch_end(*args)
            self.test += 1

    bar = Counting(refresh_rate=refresh_rate)
    trainer = Trainer(default_root_dir=root, callbacks=[bar], limit_train_batches=3, limit_val_batches=2,
                      limit_test_batches=2, num_sanity_val_steps=2, max_epochs=2, logger=False,
                      enable_checkpointing=False, enable_model_summary=False)
    model = BoringModel()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(model)
        first = (bar.train, bar.val, bar.test)
        trainer.validate(model, verbose=False)
        trainer.test(model, verbose=False)
    return first, (bar.train, bar.val, bar.test), trainer.progress_bar_callback is bar
'''

SPEC = Spec(SOURCE, "spec_progress_bar")


@pytest.mark.parametrize("scenario", ["refresh_rates", "printed", "hooks_seen"])
def test_progress_bar(scenario: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare(scenario, tmp_path)
    assert ours == theirs
