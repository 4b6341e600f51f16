"""validate/test/predict with ckpt_path='last' or 'best' say which file's weights they evaluate
(once, from rank 0, shown in a plain script too): the name alone does not tell which run it was."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.helpers.reference import TinyNet, loader, make_data, make_model
from trainer import Trainer


class Tested(TinyNet):
    test_step = TinyNet.validation_step  # test() needs a test_step


def tested_model() -> Tested:
    model = Tested()
    model.load_state_dict(make_model().state_dict())
    return model


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "the weights of" in r.getMessage()]


def test_test_with_last_names_the_file_it_evaluates(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for _ in range(2):  # version_0, then version_1: the newest
        Trainer(max_epochs=2, root_dir=str(tmp_path), enable_progress_bar=False).fit(tested_model(), loader(make_data(8)))
    newest = tmp_path / "default" / "version_1" / "last.ckpt"
    assert newest.is_file()
    evaluator = Trainer(root_dir=str(tmp_path), enable_progress_bar=False, logger=False)
    with caplog.at_level(logging.INFO):  # through note(): a warning in a script with no logging configured
        evaluator.test(tested_model(), loader(make_data(8), shuffle=False), ckpt_path="last", verbose=False)
    said = _said(caplog)
    assert len(said) == 1 and str(newest) in said[0] and "optimizer step 4" in said[0], said

    caplog.clear()
    with caplog.at_level(logging.INFO):  # a path the user wrote is not repeated back
        evaluator.test(tested_model(), loader(make_data(8), shuffle=False), ckpt_path=str(newest), verbose=False)
    assert _said(caplog) == []
