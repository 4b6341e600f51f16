"""The plain configuration's step (one process, fp32, no hook around backward or the step)
runs in fewer frames (`PlainSteps.plain_run`, which the fit loop calls directly): it must
train, count and log exactly as the general path does. A callback that only listens to
`on_before_zero_grad` sends the same run down the general path; everything the run produces
is compared."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import torch

from tests.helpers.reference import TinyNet, loader, make_data
from trainer import Callback, Trainer
from trainer.checkpoint import load_checkpoint


class Variant(TinyNet):
    """TinyNet with the step's less common outputs: None (skipped), a dict, item counts."""

    def __init__(self, output: str = "tensor", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output = output

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        if self.output == "none" and batch_idx % 4 == 2:
            return None
        if self.output == "dict":
            return {"loss": loss, "extra": batch_idx}
        if self.output == "items":
            return {"loss": loss * len(batch[0]), "num_items": len(batch[0])}
        return loss


class General(Callback):
    """Listening to this hook takes the general path; it changes nothing."""

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        pass


class Seen(Callback):
    """Records which path the run took."""

    plain: bool | None = None

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.plain = trainer._run.optimization.plain


CASES = {
    "plain": ({}, {}),
    "accumulate, short last window": ({}, {"accumulate_grad_batches": 3}),
    "clip by norm": ({}, {"gradient_clip_val": 0.05}),
    "clip by value": ({}, {"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"}),
    "step scheduler": ({"scheduler": "step"}, {}),
    "skipped batches": ({"output": "none"}, {"accumulate_grad_batches": 2}),
    "dict output": ({"output": "dict"}, {}),
    "item-weighted": ({"output": "items"}, {"accumulate_grad_batches": 2}),
    "non-finite skipped": ({"blow_up_at": (3, 7)}, {"nonfinite_loss": "skip"}),
}


def _fit(tmp_path: Any, model_args: dict[str, Any], trainer_args: dict[str, Any], general: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Variant(**model_args)
    seen = Seen()
    callbacks = [seen, General()] if general else [seen]
    trainer = Trainer(max_epochs=2, log_every_n_steps=3, root_dir=tmp_path / ("general" if general else "plain"),
                      enable_progress_bar=False, enable_checkpointing=False, device="cpu", callbacks=callbacks,
                      **trainer_args)
    torch.manual_seed(1)
    trainer.fit(model, loader(make_data(37)))
    return {
        "plain": seen.plain,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "global_step": trainer.global_step,
        "skipped": trainer.state.skipped_steps,
        "metrics": _timeless(trainer.callback_metrics),
        "logged": _timeless(trainer.logged_metrics),
    }


def _timeless(metrics: dict[str, Any]) -> dict[str, float]:
    """The values, without the clock and memory readings (throughput, the process's peak memory)."""
    return {k: float(v) for k, v in metrics.items() if "per_sec" not in k and "memory" not in k}


@pytest.mark.parametrize("case", list(CASES))
def test_the_plain_path_trains_as_the_general_one(tmp_path, case):
    model_args, trainer_args = CASES[case]
    plain = _fit(tmp_path, model_args, trainer_args, general=False)
    general = _fit(tmp_path, model_args, trainer_args, general=True)
    assert plain.pop("plain") is True and general.pop("plain") is False
    plain_weights, general_weights = plain.pop("weights"), general.pop("weights")
    assert plain_weights.keys() == general_weights.keys()
    for name, value in plain_weights.items():
        assert torch.equal(value, general_weights[name]), name
    assert plain == general
    if case == "non-finite skipped":
        assert plain["skipped"] == 2


class InterruptedInStep(Variant):
    """Ctrl-C arrives inside the optimizer step of step 3."""

    def configure_optimizers(self) -> Any:
        module = self

        class SGD(torch.optim.SGD):
            def step(self, closure: Any = None) -> Any:
                out = super().step(closure)
                if module.trainer.global_step == 2:  # inside step 3, before it is counted
                    signal.raise_signal(signal.SIGINT)
                return out

        return SGD(self.parameters(), lr=self.lr)


@pytest.mark.parametrize("general", [False, True])
def test_ctrl_c_inside_the_step_waits_until_it_is_counted(tmp_path, general):
    run = Trainer(max_epochs=2, root_dir=tmp_path, enable_progress_bar=False, device="cpu",
                  callbacks=[General()] if general else [])
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        run.fit(InterruptedInStep(), loader(make_data(37)))
    assert run._run.optimization.plain is not general
    saved = load_checkpoint(run.log_dir / "last.ckpt")
    assert saved["loop"]["global_step"] == run.global_step == 3 and saved["cut"]["clean"] is True
