"""LearningRateFinder: a sweep like Lightning's callback's, everything restored afterwards (the weights
of a fit without it, as in Lightning), and the suggestion applied with `update_attr`."""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch

from callbacks import LearningRateFinder

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import LearningRateFinder


class Net(L.LightningModule):
    def __init__(self, lr=0.01):
        super().__init__()
        self.lr = lr
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def run(finder_options=None, lr=0.01, epochs=2):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 4), torch.randn(96, 1))
    model = Net(lr)
    callbacks = [LearningRateFinder(**finder_options)] if finder_options is not None else []
    trainer = L.Trainer(max_epochs=epochs, callbacks=callbacks, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    result = callbacks[0].optimal_lr.results if callbacks else None
    return model.state_dict(), result, model.lr, trainer.optimizers[0].param_groups[0]["lr"], trainer.global_step
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from callbacks import LearningRateFinder": "from lightning.pytorch.callbacks import LearningRateFinder"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _first_batch_loss() -> float:
    module = _load(PROJECT, "lrf_first")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(96, 4), torch.randn(96, 1))
    net = module.Net()
    x, y = next(iter(torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)))
    return float(torch.nn.functional.mse_loss(net.layer(x), y))


SWEEP = {"min_lr": 1e-4, "max_lr": 1.0, "num_training_steps": 20}


@pytest.mark.filterwarnings("ignore")
def test_sweep_as_lightning_and_training_unchanged(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("lightning")
    monkeypatch.chdir(tmp_path)  # Lightning writes its temporary checkpoint in the working folder
    options = {**SWEEP, "update_attr": False}
    ours = _load(PROJECT, "lrf_ours").run(options)
    theirs = _load(_twin(), "lrf_theirs").run(options)
    plain = _load(PROJECT, "lrf_plain").run(None)
    lightning_plain = _load(_twin(), "lrf_theirs_plain").run(None)
    # 20 learning rates from min_lr to max_lr in both (Lightning's schedule skips its second point: the
    # Tuner's spacing is docs/tuning.md's); our first loss is the fit's first batch's
    assert len(ours[1]["lr"]) == len(theirs[1]["lr"]) == 20
    assert ours[1]["lr"][0] == theirs[1]["lr"][0] == 1e-4 and math.isclose(ours[1]["lr"][-1], theirs[1]["lr"][-1])
    assert math.isclose(ours[1]["loss"][0], _first_batch_loss(), rel_tol=1e-6)
    # the sweep leaves no trace: the weights of a fit without it, which are Lightning's without it
    # (Lightning's own sweep changes the training that follows, so its weights differ)
    _same_weights(ours[0], plain[0])
    _same_weights(ours[0], lightning_plain[0])
    assert ours[2:] == theirs[2:] == plain[2:]


@pytest.mark.filterwarnings("ignore")
def test_update_attr_trains_with_the_suggestion() -> None:
    module = _load(PROJECT, "lrf_update")
    weights, results, lr, group_lr, steps = module.run(SWEEP)
    finder = LearningRateFinder(**SWEEP)
    assert finder.optimal_lr is None
    assert lr == group_lr != 0.01 and lr in results["lr"]
    _same_weights(weights, module.run(None, lr=lr)[0])  # as if the module had been given that lr
    assert steps == 48


def test_arguments_checked() -> None:
    with pytest.raises(ValueError, match="mode"):
        LearningRateFinder(mode="cosine")
    with pytest.raises(ValueError, match="min_lr < max_lr"):
        LearningRateFinder(min_lr=1.0, max_lr=0.1)
