"""Bad Trainer arguments fail at construction, naming the argument, before any work (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)


def test_gradient_clip_val_zero_means_no_clipping():
    """Lightning treats 0 as "no clipping"; multiplying every gradient by 0 never trains."""
    torch.manual_seed(0)
    clipped_zero, plain = TinyNet(), TinyNet()
    plain.load_state_dict(clipped_zero.state_dict())
    torch.manual_seed(1)
    Trainer(max_epochs=1, gradient_clip_val=0, **QUIET).fit(clipped_zero, loader(make_data(), shuffle=False))
    torch.manual_seed(1)
    Trainer(max_epochs=1, **QUIET).fit(plain, loader(make_data(), shuffle=False))
    assert all(torch.equal(a, b) for a, b in zip(clipped_zero.state_dict().values(), plain.state_dict().values()))
    assert Trainer(gradient_clip_val=0).args.gradient_clip_val is None


@pytest.mark.parametrize("seed", [2**70, -1, 2**32])
def test_seed_out_of_range(seed):
    with pytest.raises(ValueError, match="seed") as caught:
        Trainer(seed=seed)
    assert str(seed) in str(caught.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_unavailable_devices(device):
    if device == "mps" and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ValueError, match=f"device=") as caught:
        Trainer(device=device)
    assert "Expected one of: auto, cpu" in str(caught.value) and repr(device) in str(caught.value)


def test_root_dir_under_a_file_fails_before_any_epoch(tmp_path: Path):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="root_dir") as caught:
        Trainer(root_dir=blocker / "runs", logger=False)
    assert "is a file" in str(caught.value) and str(blocker) in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


class _Evaluated(TinyNet):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))


def test_a_list_of_one_evaluation_loader_is_that_loader():
    """Lightning runs `dataloaders=[loader]` (or a dict of one) as the loader itself."""
    data = make_data()
    trainer = Trainer(max_epochs=1, **QUIET)
    alone = trainer.test(_Evaluated(), loader(data, shuffle=False), verbose=False)
    model = _Evaluated()
    model.load_state_dict(trainer.lightning_module.state_dict())
    assert trainer.test(model, [loader(data, shuffle=False)], verbose=False) == alone
    assert trainer.validate(model, {"only": loader(data, shuffle=False)}, verbose=False)["val_loss"] > 0
    trainer.fit(model, loader(data), [loader(data, shuffle=False)])
    assert "val_loss" in trainer.callback_metrics


@pytest.mark.parametrize("stage", ["fit-train", "fit-val", "validate", "test", "predict"])
def test_several_loaders_in_one_stage_are_refused_with_what_to_do(stage):
    """Lightning's several loaders per stage are not run here: a ValueError says so and what to do,
    before a batch reaches user code (which would fail on a DataLoader as its batch)."""
    data = make_data()
    several = [loader(data), loader(data)]
    trainer = Trainer(max_epochs=1, **QUIET)
    model = _Evaluated()
    call = {"fit-train": lambda: trainer.fit(model, {"a": several[0], "b": several[1]}),
            "fit-val": lambda: trainer.fit(model, loader(data), several),
            "validate": lambda: trainer.validate(model, several),
            "test": lambda: trainer.test(model, several),
            "predict": lambda: trainer.predict(model, several)}[stage]
    with pytest.raises(ValueError, match="expected one loader. Received: a (list|dict) of 2 DataLoaders.*ConcatDataset"):
        call()
    assert trainer.global_step == 0
