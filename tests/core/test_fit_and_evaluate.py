"""`fit`'s contract with training_step (its return values, empty and unsized loaders, non-finite
losses, the forms of configure_optimizers), and what validate/test/predict return and restore."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data, make_model, reference_fit
from trainer import Callback, Module, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


# ---------------------------------------------------------------------- training_step
class Returns(TinyNet):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.kind == "dict":
            return {"loss": loss, "extra": 1}
        if self.kind == "none-odd":
            return None if batch_idx % 2 else loss
        if self.kind == "vector":
            return loss.repeat(3)
        if self.kind == "string":
            return "loss"
        if self.kind == "detached":
            return loss.detach()
        return loss


def test_dict_with_loss_equals_plain_loss():
    torch.manual_seed(1)
    a = Returns("dict")
    torch.manual_seed(1)
    b = Returns("plain")
    for model in (a, b):
        torch.manual_seed(2)
        Trainer(**QUIET).fit(model, loader(make_data()))
    assert_same_weights(a, b)


def test_none_skips_the_batch():
    """A batch whose training_step returns None teaches nothing (no gradient, so no weight
    moves), and its window still counts as an optimizer step, as in Lightning: global_step and
    the step-interval schedulers advance (tests/lightning/test_parity_optimization.py)."""
    torch.manual_seed(0)
    model = Returns("none-odd")
    model.net[2].p = 0.0  # no dropout: a skipped batch's forward draws nothing either
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(**QUIET)
    trainer.fit(model, loader(make_data(), shuffle=False))
    assert trainer.global_step == 10  # 10 batches, the odd ones skipped but counted
    torch.manual_seed(0)
    evens = Returns("plain")
    evens.net[2].p = 0.0
    data = make_data()
    kept = torch.utils.data.Subset(data, [i for i in range(len(data)) if (i // 4) % 2 == 0])  # batches 0, 2, 4, ...
    Trainer(**QUIET).fit(evens, DataLoader(kept, batch_size=4))
    assert_same_weights(model, evens)  # the skipped batches changed nothing
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("kind,text", [("vector", "shape (3,)"), ("string", "'loss' of type str"), ("detached", "does not require grad")])
def test_bad_training_step_return_is_explained(kind, text):
    with pytest.raises(ValueError, match="training_step") as error:
        Trainer(**QUIET).fit(Returns(kind), loader(make_data()))
    assert text in str(error.value)


def test_empty_loader_is_explained_before_work():
    empty = DataLoader(make_data(3), batch_size=4, drop_last=True)
    with pytest.raises(ValueError, match="yields no batches") as error:
        Trainer(**QUIET).fit(make_model(), empty)
    assert "drop_last=True" in str(error.value)


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        data = make_data(self.n)
        return iter([data[i] for i in range(self.n)])


def test_empty_unsized_loader_is_explained():
    with pytest.raises(ValueError, match="yields no batches"):
        Trainer(**QUIET).fit(make_model(), DataLoader(Stream(0), batch_size=4))


def test_unsized_loader_with_short_last_window_matches_reference():
    torch.manual_seed(0)
    ours = make_model()
    trainer = Trainer(accumulate_grad_batches=3, **QUIET)
    trainer.fit(ours, DataLoader(Stream(37), batch_size=4))
    ref = make_model()
    reference_fit(ref, loader(make_data(37), shuffle=False), accumulate=3)
    assert_same_weights(ref, ours)
    assert trainer.global_step == 4


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_nonfinite_loss_stops_with_the_step_and_keeps_weights(precision):
    model = make_model(blow_up_at=(5,))
    trainer = Trainer(precision=precision, accumulate_grad_batches=2, **QUIET)
    with pytest.raises(FloatingPointError, match="optimizer step 3") as error:
        trainer.fit(model, loader(make_data()))
    assert "nonfinite_loss='skip'" in str(error.value)
    assert trainer.global_step == 2
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nonfinite_loss_skip_option():
    model = make_model(blow_up_at=(5,))
    trainer = Trainer(nonfinite_loss="skip", **QUIET)
    trainer.fit(model, loader(make_data()))
    assert trainer.global_step == 10 and trainer.state.skipped_steps == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_configure_optimizers_forms():
    class Form(TinyNet):
        def __init__(self, form):
            super().__init__()
            self.form = form

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {
                "tuple": (opt, sched),
                "dict": {"optimizer": opt, "lr_scheduler": sched},
                "bad": [opt, "adam"],
                "interval": {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "batch"}},
            }[self.form]

    for form in ("tuple", "dict"):
        trainer = Trainer(max_steps=3, **QUIET)  # 3 steps of a 10-batch epoch: no epoch finished
        trainer.fit(Form(form), loader(make_data()))
        assert trainer.optimizer.param_groups[0]["lr"] == 0.1  # a bare scheduler steps per epoch (PyTorch, Lightning)
        trainer = Trainer(max_epochs=3, **QUIET)
        trainer.fit(Form(form), loader(make_data()))
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)
    for form, text in (("bad", "a list of (SGD, str)"), ("interval", "'batch'")):
        with pytest.raises(ValueError, match="configure_optimizers") as error:
            Trainer(**QUIET).fit(Form(form), loader(make_data()))
        assert text in str(error.value)


def test_fit_rejects_non_module():
    with pytest.raises(TypeError, match="Subclass trainer.Module"):
        Trainer(**QUIET).fit(torch.nn.Linear(2, 2), loader(make_data()))


# ------------------------------------------------------------------------- evaluation
def test_validate_test_predict_return_values_and_restore_modes():
    model = make_model()
    model.net[2].eval()  # a submodule the user froze in eval mode
    data = loader(make_data(10), batch_size=4, shuffle=False)
    trainer = Trainer(**QUIET)

    class Tested(type(model)):
        def test_step(self, batch, batch_idx):
            self.log("test/n", float(len(batch[0])), reduce="sum")

    model.__class__ = Tested
    results = trainer.validate(model, data)
    x, y = make_data(10).tensors
    with torch.no_grad():
        model.eval()
        expected = torch.nn.functional.mse_loss(model(x), y).item()
        model.train()
        model.net[2].eval()
    assert results["val/loss"] == pytest.approx(expected, rel=1e-6)  # weighted by batch_size
    assert trainer.test(model, data) == {"test/n": 10.0}
    assert trainer.callback_metrics == {"test/n": 10.0}  # Lightning's: test() starts from empty callback_metrics
    predictions = trainer.predict(model, [x[:4], x[4:]])
    assert [p.shape for p in predictions] == [torch.Size([4, 1]), torch.Size([6, 1])]
    assert model.training and not model.net[2].training
    assert trainer.callback_metrics == {}  # and so does predict(), which logs nothing


def test_neither_limit_means_one_epoch_and_fit_again_continues():
    trainer = Trainer(**QUIET)
    model = make_model()
    trainer.fit(model, loader(make_data()))
    assert (trainer.global_step, trainer.current_epoch) == (10, 1)
    trainer.fit(model, loader(make_data()))  # already finished: nothing more to do
    assert (trainer.global_step, trainer.current_epoch) == (10, 1)


def test_seed_makes_runs_repeatable():
    # seed= seeds when fit starts, so the shuffle order and dropout masks repeat.
    results = []
    for seed in (123, 123, 124):
        model = make_model()
        torch.manual_seed(seed * 7)  # whatever the global state was before fit
        Trainer(seed=seed, **QUIET).fit(model, loader(make_data()))
        results.append(model)
    assert_same_weights(results[0], results[1])
    assert any(not torch.equal(a, b) for a, b in zip(results[0].state_dict().values(), results[2].state_dict().values()))


def test_module_log_rejects_non_scalars():
    class Logs(TinyNet):
        def training_step(self, batch, batch_idx):
            self.log("bad", torch.ones(3))
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="'bad'.*shape \\(3,\\)"):
        Trainer(**QUIET).fit(Logs(), loader(make_data()))


def test_module_log_outside_trainer_is_a_no_op():
    model = make_model()
    model.log("x", 1.0)
    with pytest.raises(RuntimeError, match="not attached"):
        _ = model.trainer


def test_module_without_steps_explains():
    class Bare(Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

    with pytest.raises(NotImplementedError, match="configure_optimizers"):
        Trainer(**QUIET).fit(Bare(), loader(make_data()))


class WrongLength(Stream):
    def __init__(self, n, claimed):
        super().__init__(n)
        self.claimed = claimed

    def __len__(self):
        return self.claimed


@pytest.mark.parametrize("actual,claimed,steps", [(37, 12, 5), (37, 4, 2), (20, 9, 3)])
def test_loader_whose_len_is_wrong(actual, claimed, steps):
    # len() = claimed batches of 4 (rounded up). Too long: the last window is stepped when the
    # data runs out. Too short: the epoch ends at len(), like a hand-written range(len()).
    trainer = Trainer(accumulate_grad_batches=2, max_epochs=1, **QUIET)
    trainer.fit(make_model(), DataLoader(WrongLength(actual, claimed * 4), batch_size=4))
    assert trainer.global_step == steps
    assert trainer.state.batches_done == 0 and trainer.current_epoch == 1


def test_evaluating_another_model_then_fitting_it_uses_its_own_optimizer():
    trainer = Trainer(**QUIET)
    first, second = make_model(seed=0), make_model(seed=1)
    trainer.fit(first, loader(make_data()))
    after_first = {k: v.clone() for k, v in first.state_dict().items()}
    before_second = {k: v.clone() for k, v in second.state_dict().items()}
    trainer.validate(second, loader(make_data(8)))
    trainer.fit(second, loader(make_data()))
    assert all(torch.equal(v, first.state_dict()[k]) for k, v in after_first.items())  # untouched
    assert any(not torch.equal(v, second.state_dict()[k]) for k, v in before_second.items())  # trained
    assert trainer.global_step == 10  # a fresh run for the second model


def test_metrics_logged_in_epoch_end_hooks_belong_to_their_epoch():
    seen_by_callback = []

    class EpochLogs(TinyNet):
        def on_validation_epoch_end(self):
            self.log("val/computed", 7.0)  # e.g. a metric computed over the whole epoch

        def on_train_epoch_end(self):
            self.log("train/epoch_marker", float(self.trainer.current_epoch))

    class Reader(Callback):
        def on_validation_epoch_end(self, trainer, module):
            seen_by_callback.append(trainer.callback_metrics.get("val/computed"))

    torch.manual_seed(0)
    trainer = Trainer(max_epochs=2, num_sanity_val_steps=0, callbacks=[Reader()], **QUIET)
    model = EpochLogs()
    trainer.fit(model, loader(make_data()), val_loader=loader(make_data(8)))
    assert seen_by_callback == [7.0, 7.0]  # callbacks run after the epoch closed, with its values
    assert [row.get("train/epoch_marker") for row in trainer.history] == [0.0, 1.0]
    assert trainer.validate(model, loader(make_data(8)))["val/computed"] == 7.0


def test_a_custom_logger_is_checked_and_used(tmp_path):
    class Partial:
        def log_metrics(self, metrics, step):
            pass

    with pytest.raises(ValueError, match="logger.*missing: log_hyperparams, flush, close"):
        Trainer(logger=Partial())

    class Recording(Partial):
        def __init__(self):
            self.steps, self.closed, self.log_dir = [], False, tmp_path

        def log_metrics(self, metrics, step):
            self.steps.append((step, sorted(metrics)))

        def log_hyperparams(self, params, metrics=None):
            self.params = params

        def flush(self):
            pass

        def close(self):
            self.closed = True

    logger = Recording()
    trainer = Trainer(logger=logger, log_every_n_steps=5, enable_progress_bar=False, device="cpu", root_dir=tmp_path)
    trainer.fit(make_model(), loader(make_data()))
    assert [step for step, _ in logger.steps] == [5, 10]
    assert "train/loss" in logger.steps[0][1] and logger.closed and "trainer" in logger.params
    assert (tmp_path / "last.ckpt").is_file()  # the run folder is the logger's log_dir
