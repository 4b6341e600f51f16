"""Accumulation weighted by items: `training_step` returns {"loss": summed, "num_items": n}
and the window's gradient is that of sum(summed) / sum(n), bit-exact with a hand-written loop
that divides each micro-batch's summed loss by the window's count before its backward.

33 padded sequences, batch 3: 11 micro-batches per epoch, so accumulation 4 leaves a short
last window of 3. The 2-process DDP and FSDP cases run tests/helpers/scripts/items_worker.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.items import ItemNet, iterable_loader, make_item_model, make_token_data, reference_item_fit
from tests.helpers.reference import assert_same_weights
from trainer import Callback, Trainer
from trainer.precision import AMP

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "items_worker.py"
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu", num_sanity_val_steps=0)
SCALER = {"init_scale": 2.0**10}


def shuffled(batch_size: int = 3) -> DataLoader:
    return DataLoader(make_token_data(), batch_size=batch_size, shuffle=True)


class LoggedLoss(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.state.batches_done == batch_idx + 1:  # the window's last micro-batch: after its step
            self.losses.append(trainer.callback_metrics["train/loss"])


def fit(model: ItemNet, loader: Any, precision: str = "fp32", epochs: int = 2, accumulate: int = 4, **kwargs: Any) -> Trainer:
    strategy = AMP(**SCALER) if precision == "amp" else precision
    trainer = Trainer(precision=strategy, max_epochs=epochs, accumulate_grad_batches=accumulate, log_every_n_steps=1,
                      **QUIET, **kwargs)
    torch.manual_seed(1)
    trainer.fit(model, loader)
    return trainer


def max_dw(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize("accumulate", [1, 4])
def test_weights_equal_the_hand_written_item_weighted_loop(precision, accumulate):
    ref = make_item_model()
    torch.manual_seed(1)
    info = reference_item_fit(ref, shuffled(), precision=precision, epochs=2, accumulate=accumulate, scaler_kwargs=SCALER)
    ours, logged = make_item_model(), LoggedLoss()
    trainer = fit(ours, shuffled(), precision, accumulate=accumulate, callbacks=[logged])
    assert_same_weights(ref, ours)
    assert trainer.global_step == info["steps"] == 2 * -(-11 // accumulate)
    assert logged.losses == info["losses"]  # train/loss: the window's per-item mean, exactly
    if precision == "amp":
        assert trainer.precision.loss_scale() == info["scale"]


def test_the_per_micro_batch_mean_rule_gives_other_weights():
    """The same data under today's rule (each micro-batch's mean / window length) weighs a
    batch of 3 valid items like one of 24: the weights differ from the item-weighted loop."""
    item_rule, mean_rule = make_item_model(), make_item_model(mean_rule=True)
    fit(item_rule, shuffled())
    fit(mean_rule, shuffled())
    ref = make_item_model()
    torch.manual_seed(1)
    reference_item_fit(ref, shuffled(), epochs=2, accumulate=4)
    assert max_dw(item_rule, ref) == 0.0
    difference = max_dw(mean_rule, ref)
    print(f"max |dw|: item rule vs hand-written {max_dw(item_rule, ref):.3g}, mean rule vs hand-written {difference:.3g}")
    assert difference > 1e-3


def test_iterable_loader_without_len():
    ref = make_item_model()
    torch.manual_seed(1)
    info = reference_item_fit(ref, iterable_loader(make_token_data()), epochs=2, accumulate=4)
    ours, logged = make_item_model(), LoggedLoss()
    trainer = fit(ours, iterable_loader(make_token_data()), callbacks=[logged])
    assert_same_weights(ref, ours)
    assert trainer.global_step == info["steps"] == 6
    assert logged.losses == info["losses"]


class Hooks(ItemNet):
    """Records the backward hooks; returns None for some batches and a chosen count."""

    def __init__(self, skip: tuple[int, ...] = (), counts: dict[int, Any] | None = None, plain: tuple[int, ...] = ()) -> None:
        super().__init__(dropout=0.0)
        self.skip, self.counts, self.plain = set(skip), counts or {}, set(plain)
        self.events: list[tuple[str, Any]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.events.append(("step", batch_idx))
        if batch_idx in self.skip:
            return None
        summed, count = self.summed_loss(batch)
        if batch_idx in self.plain:
            return summed / count
        return {"loss": summed, "num_items": self.counts.get(batch_idx, count)}

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.events.append(("before_backward", float(loss.detach())))

    def on_after_backward(self) -> None:
        self.events.append(("after_backward", None))


def hooks(**kwargs: Any) -> Hooks:
    torch.manual_seed(0)  # the weights of make_item_model(dropout=0.0)
    return Hooks(**kwargs)


def plain_loader() -> DataLoader:
    return DataLoader(make_token_data(), batch_size=3)


def test_backward_hooks_run_around_each_held_backward_at_the_window_end():
    model = hooks(skip=(1,))
    data = make_token_data()
    with torch.no_grad():
        first = model.summed_loss(tuple(t[0:3] for t in data.tensors))[0]
    fit(model, plain_loader(), epochs=1)
    kinds = [kind for kind, _ in model.events[:10]]
    # window 0..3 (batch 1 skipped): four forwards, then three backward passes in order
    assert kinds == ["step"] * 4 + ["before_backward", "after_backward"] * 3
    total = sum(data.tensors[2][i:i + 3].sum() for i in (0, 6, 9))
    # each backward's loss is that micro-batch's summed loss over the window's total
    assert model.events[4][1] == float(first / total)


def test_int_counts_work():
    counts = {i: int(make_token_data().tensors[2][3 * i:3 * i + 3].sum()) for i in range(11)}
    model = hooks(counts=counts)
    ref = make_item_model(dropout=0.0)
    torch.manual_seed(1)
    reference_item_fit(ref, plain_loader(), epochs=1, accumulate=4)
    fit(model, plain_loader(), epochs=1)
    assert_same_weights(ref, model)


def test_mixing_plain_and_item_returns_in_a_window_names_the_batch():
    with pytest.raises(ValueError, match=r"batch 2 returned a plain loss, but batch 0 of the same accumulation window"):
        fit(hooks(plain=(2,)), plain_loader(), epochs=1)
    with pytest.raises(ValueError, match=r"batch 5 returned \{'loss': ..., 'num_items': ...\}, but an earlier micro-batch"):
        fit(hooks(plain=(4,)), plain_loader(), epochs=1)


def test_a_window_without_items_raises_before_any_backward():
    model = hooks(counts={4: 0, 5: 0, 6: torch.tensor(0), 7: 0})
    trainer = Trainer(max_epochs=1, accumulate_grad_batches=4, **QUIET)
    with pytest.raises(ValueError, match=r"num_items adding up to 0 over the accumulation window of batches 4\.\.7"):
        trainer.fit(model, plain_loader())
    assert trainer.global_step == 1  # the first window stepped, the second raised
    assert ("before_backward" not in [kind for kind, _ in model.events[model.events.index(("step", 4)):]])


@pytest.mark.parametrize("bad", [1.5, "3", torch.ones(2), True, -1])
def test_a_malformed_num_items_is_refused(bad):
    with pytest.raises(ValueError, match=r"training_step \(batch 0\) returned num_items"):
        fit(hooks(counts={0: bad}), plain_loader(), epochs=1)


def test_a_non_finite_item_loss_is_caught_by_the_guard():
    class Blows(ItemNet):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            out = super().training_step(batch, batch_idx)
            if batch_idx == 5:
                out["loss"] = out["loss"] * float("inf")
            return out

    model = Blows()
    with pytest.raises(FloatingPointError, match=r"optimizer step 2 \(epoch 0, batches 4\.\.7\)"):
        fit(model, shuffled(), epochs=1)
    trainer = fit(Blows(), shuffled(), epochs=1, nonfinite_loss="skip")
    assert trainer.global_step == 3 and trainer.state.skipped_steps == 1


# ------------------------------------------------------------------ two processes (Gloo)
@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("items_ddp")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(out / f"items_rank{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
@pytest.mark.parametrize("case", ["ddp/fp32/4", "ddp/amp/4", "ddp/fp32/1", "fsdp/fp32/4"])
def test_ddp_and_fsdp_equal_the_hand_written_ddp_loop_that_all_reduces_the_count(ranks, case):
    for result in ranks:
        run = result[case]
        for key, value in run["trainer"].items():
            assert torch.equal(value, run["hand"][key]), f"{case}: {key} max |d| {(value - run['hand'][key]).abs().max()}"
        assert run["global_step"] == run["hand_steps"]
    first, second = (r[case]["trainer"] for r in ranks)
    assert all(torch.equal(first[k], second[k]) for k in first)
    # the logged loss: the per-item mean over both ranks' items, the same on each rank
    assert ranks[0][case]["logged"] == ranks[1][case]["logged"]
    assert ranks[0][case]["logged"] == pytest.approx(ranks[0][case]["global_mean"], rel=1e-6)


@pytest.mark.parametrize("bad,shown", [(torch.tensor(-2), "-2"), (torch.tensor(-1.0), "-1"), (torch.tensor(2.5), "2.5"),
                                       (torch.tensor(float("nan")), "nan"), (torch.tensor(float("inf")), "inf")])
def test_a_negative_or_fractional_count_as_a_tensor_names_the_batch(bad, shown):
    # batch 5 in the second window: the window's total stays positive, so only the count's own check finds it
    model = hooks(counts={5: bad})
    trainer = Trainer(max_epochs=1, accumulate_grad_batches=4, **QUIET)
    with pytest.raises(ValueError, match=rf"training_step \(batch 5\) returned num_items={shown} \(as a tensor\)\. "
                                         r"Expected .* a whole number, at least 0"):
        trainer.fit(model, plain_loader())
    assert trainer.global_step == 1  # the first window stepped; the second raised before its backward
    assert "before_backward" not in [kind for kind, _ in model.events[model.events.index(("step", 4)):]]


def test_the_counts_are_checked_in_the_windows_one_host_read(monkeypatch):
    from trainer.loops import items

    reads: list[int] = []
    inside = [False]
    close = items.HeldWindow.close

    def counted_close(self: Any, batches_done: int) -> Any:
        inside[0] = True
        reads.append(0)
        try:
            return close(self, batches_done)
        finally:
            inside[0] = False

    for name in ("tolist", "item", "__bool__", "__float__", "__int__", "__index__"):
        original = getattr(torch.Tensor, name)

        def reading(tensor: torch.Tensor, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if inside[0]:
                reads[-1] += 1
            return _original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, reading)
    monkeypatch.setattr(items.HeldWindow, "close", counted_close)
    class Counts(ItemNet):  # Hooks' backward hooks read the loss themselves
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            summed, count = self.summed_loss(batch)
            return {"loss": summed, "num_items": count.float() if batch_idx % 2 else count}

    fit(Counts(dropout=0.0), plain_loader(), epochs=1)
    assert reads == [1, 1, 1]  # three windows of 4, 4 and 3 micro-batches: one host read each


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_a_bad_count_on_one_rank_stops_every_rank_naming_it(tmp_path):
    from tests.strategies.test_ddp_failures import torchrun

    done, seconds = torchrun("bad-count", 1, tmp_path)
    assert done.returncode != 0 and seconds < 60, done.stderr[-3000:]
    assert "training_step (batch 2) returned num_items=-2 (as a tensor)" in done.stderr, done.stderr[-3000:]
    assert "malformed num_items on another rank" in done.stderr  # rank 0 says where to look
    assert not list(tmp_path.glob("rank*.pt"))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.bfloat16, torch.float16])
def test_counts_of_a_narrow_dtype_add_up_without_wrapping_or_rounding(dtype):
    # each count is exact in its dtype, but a window's total would wrap around (uint8, int16) or
    # round (bfloat16: 130+132+134+138 = 534 is not a multiple of 4; float16: 2049 is not exact)
    values = {torch.uint8: [130, 132, 134, 138], torch.int16: [20000, 20002, 20004, 20008],
              torch.bfloat16: [130, 132, 134, 138], torch.float16: [1000, 1001, 24, 24]}[dtype]
    exact = {i: values[i % 4] for i in range(11)}
    narrow = {i: torch.tensor(v, dtype=dtype) for i, v in exact.items()}
    assert all(float(narrow[i]) == v for i, v in exact.items())
    expected, model = hooks(counts=exact), hooks(counts=narrow)
    fit(expected, plain_loader(), epochs=1)
    fit(model, plain_loader(), epochs=1)
    assert_same_weights(expected, model)
