"""Bad Trainer arguments fail at construction, naming the argument, before any work."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from tests.helpers.reference import TinyNet, loader, make_data, make_model
from trainer import Trainer
from trainer._args import TrainerArgs
from trainer.precision import AMP, BF16, FP32, Precision

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


def test_several_training_loaders_are_combined_and_sequential_is_refused():
    """A dict of training loaders is combined as Lightning combines it (`max_size_cycle`: the
    step gets a dict batch); a `sequential` CombinedLoader is refused before any step."""
    from trainer.utilities import CombinedLoader

    data = make_data()
    trainer = Trainer(max_epochs=1, **QUIET)
    seen = []

    class DictBatches(_Evaluated):
        def training_step(self, batch, batch_idx):
            seen.append(sorted(batch))
            return torch.nn.functional.mse_loss(self(batch["a"][0]), batch["a"][1])

    trainer.fit(DictBatches(), {"a": loader(data), "b": loader(data)})
    assert seen and all(keys == ["a", "b"] for keys in seen)
    trainer = Trainer(max_epochs=1, **QUIET)
    with pytest.raises(ValueError, match="Received: mode='sequential', which training does not support"):
        trainer.fit(_Evaluated(), CombinedLoader([loader(data), loader(data)], "sequential"))
    assert trainer.global_step == 0


@pytest.mark.parametrize("stage", ["fit-val", "validate", "test", "predict"])
def test_several_evaluation_loaders_need_dataloader_idx_in_the_step(stage):
    """Several evaluation loaders run one after the other, and the step must say which one a batch
    came from (Lightning's rule): a step without `dataloader_idx` is refused before any batch."""
    data = make_data()
    several = [loader(data), loader(data)]
    trainer = Trainer(max_epochs=1, **QUIET)

    class NoIndex(_Evaluated):
        def predict_step(self, batch, batch_idx):
            return self(batch[0])

    model = NoIndex()
    call = {"fit-val": lambda: trainer.fit(model, loader(data), several),
            "validate": lambda: trainer.validate(model, several),
            "test": lambda: trainer.test(model, several),
            "predict": lambda: trainer.predict(model, several)}[stage]
    with pytest.raises(ValueError, match=r"expected a `dataloader_idx` argument.*Add `dataloader_idx=0`"):
        call()
    assert trainer.global_step == 0


@pytest.mark.parametrize(
    "kwargs,names",
    [
        ({"precision": "fp64"}, ["precision", "'fp64'", "'amp'", "'bf16'"]),
        ({"accumulate_grad_batches": 0}, ["accumulate_grad_batches", "greater than or equal to 1", "0"]),
        ({"max_epochs": -2}, ["max_epochs", "-2"]),  # -1 is Lightning's "no limit"
        ({"gradient_clip_val": -0.5}, ["gradient_clip_val", "-0.5"]),
        ({"gradient_clip_algorithm": "l2"}, ["gradient_clip_algorithm", "'norm'", "'value'", "'l2'"]),
        ({"log_every_n_steps": 0}, ["log_every_n_steps"]),
        ({"device": "gpu7"}, ["device", "'gpu7'"]),
        ({"callbacks": [object()]}, ["callbacks", "Callback"]),
        ({"logger": "tensorboard"}, ["logger", "'tensorboard'"]),
        ({"strategy": "zero3"}, ["strategy", "'ddp'", "'fsdp'", "zero3"]),
        ({"nonfinite_loss": "ignore"}, ["nonfinite_loss", "'skip'"]),
    ],
)
def test_invalid_arguments_name_argument_value_and_accepted(kwargs, names):
    with pytest.raises(ValueError) as error:
        Trainer(**kwargs)
    for name in names:
        assert name in str(error.value)


def test_all_problems_reported_at_once():
    with pytest.raises(ValueError) as error:
        Trainer(max_epochs=-2, accumulate_grad_batches=0)
    assert "max_epochs" in str(error.value) and "accumulate_grad_batches" in str(error.value)


def test_trainer_signature_and_args_model_cannot_drift():
    params = inspect.signature(Trainer.__init__).parameters
    fields = TrainerArgs.model_fields
    assert [p for p in params if p not in ("self", "lightning_arguments")] == list(fields)
    assert params["lightning_arguments"].kind is inspect.Parameter.VAR_KEYWORD  # Lightning's spellings
    for name, field in fields.items():
        default = params[name].default
        assert str(field.default) == str(default), name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name,cls", [("fp32", FP32), ("amp", AMP), ("bf16", BF16)])
def test_precision_names_and_instances(name, cls):
    assert type(Trainer(precision=name).precision) is cls
    custom = cls()
    assert Trainer(precision=custom).precision is custom


def test_custom_precision_strategy_is_used():
    class Halved(Precision):
        name = "halved"
        calls = 0

        def backward(self, loss):
            Halved.calls += 1
            (loss * 0.5).backward()

    trainer = Trainer(precision=Halved(), device="cpu", **QUIET)
    trainer.fit(make_model(), loader(make_data()))
    assert Halved.calls == 10
