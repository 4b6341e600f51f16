"""`trainer check-resume exp.yaml`: the check on a YAML experiment, in-process through the
command's entry point; it prints the report, exits 0 (exact) or 1, and writes nothing."""

from __future__ import annotations

import os

from trainer.config.cli import main

EXPERIMENT = """\
seed: 7
model: {{class_path: tests.helpers.pipelines.Net}}
data: {{class_path: tests.helpers.pipelines.PipelineData, init_args: {{kind: {kind}}}}}
trainer: {{accumulate_grad_batches: 2, device: cpu, max_epochs: 50}}
callbacks: [{{class_path: callbacks.ModelCheckpoint, init_args: {{dirpath: ckpts}}}}]
"""


def test_check_resume_on_a_config_reports_exact_and_a_broken_one_with_exit_code_1(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for kind in ("correct", "own_random"):
        (tmp_path / f"{kind}.yaml").write_text(EXPERIMENT.format(kind=kind))
    assert main(["check-resume", "correct.yaml", "--steps", "6"]) == 0
    assert "exact (the same batches" in capsys.readouterr().out
    assert main(["check-resume", "own_random.yaml", "--steps", "6", "--trainer.accumulate_grad_batches", "1"]) == 1
    out = capsys.readouterr().out
    assert "NOT exact" in out and "Data.rng (the loader's dataset)" in out
    assert sorted(os.listdir(tmp_path)) == ["correct.yaml", "own_random.yaml"]  # no runs/, no ckpts/
    assert main(["check-resume", "correct.yaml", "--steps", "1"]) == 2
    assert "--steps" in capsys.readouterr().err
