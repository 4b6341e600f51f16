"""A precision object answers Lightning's string checks (`trainer.precision == "16-mixed"`,
`"32" in trainer.precision`, `trainer.precision_plugin.precision`) as Lightning's Trainer does
for the same argument, while an instance passed to the Trainer is kept exactly as given."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from trainer.precision import AMP, BF16, FP32


def checks(precision: Any) -> dict[str, Any]:
    names = ("32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "64-true", "mixed", "true")
    return {"equal": [n for n in names if precision == n], "contains": [n for n in names if n in precision],
            "int": [n for n in (16, 32, 64) if precision == n]}


@pytest.mark.parametrize("argument", ["32-true", "bf16-mixed", "16-mixed", 32, 16])
def test_string_checks_give_lightnings_answers(argument: Any) -> None:
    pytest.importorskip("lightning")
    import lightning.pytorch as lightning

    import trainer

    theirs = lightning.Trainer(precision=argument, accelerator="cpu", logger=False, enable_checkpointing=False)
    with pytest.warns(UserWarning) if argument == "16-mixed" else contextlib.nullcontext():
        ours = trainer.Trainer(precision=argument, accelerator="cpu", logger=False, enable_checkpointing=False)
    assert checks(ours.precision) == checks(theirs.precision)
    assert ours.precision_plugin.precision == theirs.precision_plugin.precision == theirs.precision


def test_an_instance_is_kept_as_given_and_compares_by_identity() -> None:
    import trainer

    amp = AMP(init_scale=8.0)
    cached = BF16()
    assert trainer.Trainer(precision=amp, logger=False).precision is amp  # equal to "16-mixed", still kept
    assert trainer.Trainer(precision=cached, logger=False).precision is cached
    assert cached != BF16() and cached == cached and FP32() == "32-true" and AMP().name == "amp"
    assert len({amp, cached, amp}) == 2 and AMP() != True  # noqa: E712 - a bool is not a precision name
