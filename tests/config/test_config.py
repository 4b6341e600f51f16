"""trainer.config: schema, class_path checks, overrides, building and where the config goes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.nn import functional as F

from tests.helpers.cli_pkg.data import RandomData
from tests.helpers.cli_pkg.models import CountSteps, TinyClassifier
from trainer._args import TrainerArgs
from trainer._utils import seed_everything
from trainer.config import (
    TOP_LEVEL_ONLY,
    ConfigError,
    Experiment,
    apply_overrides,
    dump_yaml,
    load_experiment,
    parse_yaml,
    resolve_config,
)

PKG = "tests.helpers.cli_pkg"


def base(tmp_path: Path | None = None, **trainer: Any) -> dict[str, Any]:
    section = {"max_epochs": 1, "enable_progress_bar": False, "logger": None}
    section.pop("logger")
    section.update(trainer)
    if tmp_path is not None:
        section.setdefault("root_dir", str(tmp_path / "runs"))
    return {
        "seed": 0,
        "model": {"class_path": f"{PKG}.models.TinyClassifier", "init_args": {"hidden": 6}},
        "data": {"class_path": f"{PKG}.data.RandomData", "init_args": {"batch_size": 8}},
        "trainer": section,
        "logger": False,
    }


def problems_of(config: dict[str, Any], stage: Any = "fit") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        resolve_config(config, stage)
    return [str(p) for p in caught.value.problems]


# ------------------------------------------------------------------------------ values
def test_yaml_exponent_floats_become_floats_by_hint_and_by_resolver() -> None:
    text = "model: {class_path: tests.helpers.cli_pkg.models.TinyClassifier, init_args: {lr: 1e-4, scale: 2E-3}}"
    raw = parse_yaml(text)
    assert raw["model"]["init_args"] == {"lr": 1e-4, "scale": 2e-3}  # unannotated `scale` too
    assert yaml.safe_load("x: 1e-4")["x"] == "1e-4"  # what plain PyYAML does
    config = base()
    config["model"]["init_args"] = {"lr": "1e-4"}  # a string (e.g. quoted) is coerced by the hint
    resolved = resolve_config(config)
    assert resolved.model.kwargs["lr"] == 1e-4 and isinstance(resolved.model.kwargs["lr"], float)
    assert resolved.plain["model"]["init_args"]["lr"] == 1e-4


def test_resolved_config_fills_defaults_and_round_trips() -> None:
    resolved = resolve_config(base())
    plain = resolved.plain
    assert plain["model"]["init_args"] == {"hidden": 6, "lr": 0.1, "encoder": None, "scale": 1.0}
    assert list(plain["trainer"]) == [f for f in TrainerArgs.model_fields if f not in TOP_LEVEL_ONLY]
    assert plain["trainer"]["gradient_clip_algorithm"] == "norm"
    again = resolve_config(parse_yaml(dump_yaml(plain)))
    assert again.plain == plain


def test_every_mistake_reported_at_once_with_its_path() -> None:
    config = base()
    config["trainer"].update({"max_epocs": 3, "precision": "fp16"})
    config["model"]["init_args"] = {"hiden": 3, "lr": "fast"}
    config["data"]["class_path"] = f"{PKG}.data.RandomDta"
    config["extra"] = 1
    found = problems_of(config)
    assert len(found) == 6, found
    text = "\n".join(found)
    assert "trainer.max_epocs: unknown field. Did you mean 'max_epochs'?" in text
    assert "trainer.precision: Expected one of 'fp32', 'amp', 'bf16'" in text and "Received: 'fp16'" in text
    assert "model.init_args.hiden: unknown argument" in text and "Did you mean 'hidden'?" in text
    assert "model.init_args.lr: Input should be a valid number" in text and "'fast'" in text
    assert "data.class_path: cannot import" in text and "Did you mean 'RandomData'?" in text
    assert "extra: unknown field" in text


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c["model"].update(class_path="nopkg_xyz.models.Thing"), "no module named 'nopkg_xyz'"),
        (lambda c: c["model"].update(class_path=f"{PKG}.modles.TinyClassifier"), "Did you mean 'models'?"),
        (lambda c: c["model"].update(class_path=f"{PKG}.models.NotAModule"), "Expected a subclass of trainer.module.Module"),
        (lambda c: c["trainer"].update(max_epochs=-2), "trainer.max_epochs: Input should be greater than or equal to 0"),
        (lambda c: c["trainer"].update(seed=1), "trainer.seed: set `seed:` at the top level"),
        (lambda c: c.update(logger="tensorboard"), "logger: Expected true, false, {class_path: ..., init_args: {...}} or a list of them. Received: 'tensorboard'"),
        (lambda c: c.update(callbacks=[{"class_path": f"{PKG}.data.RandomData"}]), "callbacks[0].class_path: Expected a subclass of trainer.callback.Callback"),
        (lambda c: c["model"]["init_args"].update(encoder={"class_path": f"{PKG}.models.Encoder", "init_args": {"widht": 2}}),
         "model.init_args.encoder.init_args.widht: unknown argument"),
        (lambda c: c["model"]["init_args"].update(encoder={"class_path": f"{PKG}.data.RandomData"}),
         "model.init_args.encoder.class_path: Expected a subclass of Module"),
        (lambda c: c["trainer"].update(precision={"class_path": "trainer.precision.AMP", "init_args": {"init_scale": "big"}}),
         "trainer.precision.init_args.init_scale"),
        (lambda c: c["data"].update(class_path="collections.OrderedDict"), "has no train_dataloader()"),
        (lambda c: c.pop("model"), "model: required section is missing"),
    ],
)
def test_each_mistake_names_its_field(change: Any, expected: str) -> None:
    config = base()
    change(config)
    assert expected in "\n".join(problems_of(config))


def test_top_level_values_are_the_validated_ones_and_empty_sections_mean_defaults() -> None:
    config = base()
    config.update(seed="7", logger="false", callbacks=None, trainer=None)  # `callbacks:` with every item commented out
    config["model"]["init_args"] = None
    resolved = resolve_config(config)
    assert resolved.seed == 7 and resolved.plain["seed"] == 7  # an int, as seed_everything needs
    assert resolved.logger is False and resolved.plain["logger"] is False
    assert resolved.plain["callbacks"] == [] and resolved.plain["trainer"]["max_epochs"] is None
    assert resolved.plain["model"]["init_args"]["hidden"] == 8
    assert len(problems_of({**base(), "logger": "tensorboard"})) == 1  # one message for `bool | class spec`


def test_an_exception_from_a_constructor_is_a_config_error_naming_the_yaml_path() -> None:
    """The user's __init__ rejecting its init_args is one clean message (CLI exit 2)."""
    config = base()
    config["callbacks"] = [{"class_path": f"{PKG}.models.FailingCallback"}]
    with pytest.raises(ConfigError, match="bug in a callback's __init__") as caught:
        load_experiment(config)
    assert "callbacks.0.init_args" in str(caught.value) and "FailingCallback" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)  # the original stays attached for debugging
    config["callbacks"] = []
    config["trainer"]["strategy"] = "ddp"  # only Trainer(...) can tell: not under torchrun
    with pytest.raises(ConfigError, match="strategy='ddp'"):
        load_experiment(config)


def test_missing_required_argument_and_stage_loader() -> None:
    config = base()
    config["model"]["init_args"]["encoder"] = {"class_path": f"{PKG}.models.Encoder"}
    config["data"] = {"class_path": f"{PKG}.data.TrainOnly"}
    resolve_config(config, "fit")  # fine for fit
    assert "data.class_path: tests.helpers.cli_pkg.data.TrainOnly has no test_dataloader(), which `test` needs" in problems_of(config, "test")[0]
    config["model"] = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 2}}
    found = "\n".join(problems_of(config))
    assert "model.init_args.out_features: missing required argument" in found


def test_overrides_set_nested_values_lists_and_shorthand() -> None:
    config = base()
    config["callbacks"] = [{"class_path": f"{PKG}.models.CountSteps", "init_args": {"every": 1}}]
    problems = apply_overrides(config, {"trainer.max_epochs": 3, "model.init_args.hidden": 5, "callbacks.0.init_args.every": 4,
                                        "accumulate_grad_batches": 2, "seed": 7, "data.init_args.n": 16})
    assert problems == []
    assert config["trainer"]["max_epochs"] == 3 and config["trainer"]["accumulate_grad_batches"] == 2
    assert config["model"]["init_args"]["hidden"] == 5 and config["callbacks"][0]["init_args"]["every"] == 4
    assert config["seed"] == 7 and config["data"]["init_args"]["n"] == 16
    bad = apply_overrides(config, {"trainr.max_epochs": 1, "callbacks.3.init_args.every": 1})
    assert "Did you mean 'trainer'?" in str(bad[0]) and "callbacks.3" in str(bad[1])


# ----------------------------------------------------------------------------- running
def reference_weights(seed: int, epochs: int, hidden: int = 6) -> dict[str, torch.Tensor]:
    """The same run written by hand: seed, build data then model, SGD over shuffled batches."""
    seed_everything(seed)
    data = RandomData(batch_size=8)
    model = TinyClassifier(hidden=hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader, val_loader = data.train_dataloader(), data.val_dataloader()
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        # The epoch's evaluation, as the user's loop runs it: iterating its DataLoader draws
        # from torch's generator, and the Trainer's validation draws alike.
        model.eval()
        with torch.no_grad():
            for x, _ in val_loader:
                model(x)
    return model.state_dict()


def test_load_experiment_equals_hand_written_loop_and_seeds_before_building(tmp_path: Path) -> None:
    config = base(tmp_path, enable_checkpointing=False)
    experiment = load_experiment(config, {"max_epochs": 2})
    assert isinstance(experiment, Experiment)
    assert config["trainer"]["max_epochs"] == 1  # the caller's dict is not changed
    experiment.fit()
    assert experiment.trainer.global_step == 8
    expected = reference_weights(seed=0, epochs=2)
    for name, value in experiment.model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    assert not (tmp_path / "runs").exists()  # logger=False, no checkpoints: nothing written


def test_dry_run_takes_two_steps_and_writes_nothing(tmp_path: Path) -> None:
    config = base(tmp_path, max_epochs=5)
    config["logger"] = True
    config["callbacks"] = [{"class_path": "callbacks.ModelCheckpoint", "init_args": {"every_n_train_steps": 1}}]
    experiment = load_experiment(config, dry_run=True)
    experiment.fit()
    assert experiment.trainer.global_step == 2
    assert experiment.config["trainer"]["max_steps"] == 2 and experiment.config["logger"] is False
    assert experiment.trainer.callbacks[0].best_model_path  # the callback did save (into the scratch root_dir) ...
    assert not (tmp_path / "runs").exists()  # ... but nothing is left on disk
    assert not Path(experiment.trainer.args.root_dir).exists()


def test_config_saved_in_run_folder_checkpoint_and_hparams(tmp_path: Path) -> None:
    config = base(tmp_path)
    config["logger"] = True
    config["callbacks"] = [{"class_path": f"{PKG}.models.CountSteps"}]
    config["model"]["init_args"]["encoder"] = {"class_path": f"{PKG}.models.Encoder", "init_args": {"width": 5}}
    experiment = load_experiment(copy.deepcopy(config))
    assert experiment.model.encoder.width == 5 and isinstance(experiment.trainer.callbacks[0], CountSteps)
    experiment.fit()
    run = Path(experiment.trainer.log_dir)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved == experiment.config
    assert saved["model"]["init_args"]["encoder"] == {"class_path": f"{PKG}.models.Encoder", "init_args": {"width": 5}}
    checkpoint = torch.load(run / "last.ckpt", weights_only=True)
    assert checkpoint["experiment"] == experiment.config
    events = b"".join(p.read_bytes() for p in run.rglob("events.out.tfevents*"))
    assert b"experiment/model/init_args/hidden" in events
    metrics = load_experiment(config, stage="validate").validate(ckpt_path=run / "last.ckpt")
    assert set(metrics) == {"val/loss"}
    before = sorted((tmp_path / "runs").rglob("*"))
    dry = load_experiment(config, {"trainer.max_steps": 9}, dry_run=True)
    dry.fit(ckpt_path="last")  # `last` is looked up under the config's root_dir, not the scratch one
    assert dry.trainer.global_step == 4 and sorted((tmp_path / "runs").rglob("*")) == before


def test_precision_from_class_path_and_logger_off() -> None:
    config = base(precision={"class_path": "trainer.precision.AMP", "init_args": {}})
    experiment = load_experiment(config)
    assert experiment.trainer.precision.name == "amp"
    assert experiment.config["trainer"]["precision"]["class_path"] == "trainer.precision.AMP"


def test_callable_data_and_model_are_checked_after_the_call() -> None:
    config = base()
    config["model"] = {"class_path": f"{PKG}.models.make_model", "init_args": {"hidden": "4"}}
    config["data"] = {"class_path": f"{PKG}.data.make_data", "init_args": {"batch_size": 4}}
    experiment = load_experiment(config)
    assert isinstance(experiment.model, TinyClassifier) and experiment.data.batch_size == 4
    config["model"] = {"class_path": "torch.nn.modules.linear.Identity"}
    with pytest.raises(ConfigError, match="Expected a subclass of trainer.module.Module"):
        load_experiment(config)


EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_example_experiments_are_valid_and_dry_run(precision: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    experiment = load_experiment(EXAMPLES / f"digits_{precision}.yaml", {"trainer.root_dir": str(tmp_path / "r")}, dry_run=True)
    assert experiment.trainer.precision.name == precision
    experiment.fit()
    assert experiment.trainer.global_step == 2 and not (tmp_path / "r").exists()


def test_load_experiment_stage_asks_only_for_that_stage_s_loader(tmp_path: Path) -> None:
    config = base(tmp_path, enable_checkpointing=False)
    config["data"]["class_path"] = f"{PKG}.data.TestOnly"
    with pytest.raises(ConfigError, match="train_dataloader"):
        load_experiment(config)  # fit (the default) needs a train loader
    experiment = load_experiment(config, stage="test")
    results = experiment.test()
    assert set(results) == {"test/loss"} and results["test/loss"] > 0


def test_a_class_path_from_the_users_folder_is_named_once_from_rank_zero_and_never_above_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trainer.config import classpath

    for name in ("userfile_bad", "userfile_rank1", "userfile_good"):
        (tmp_path / f"{name}.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(classpath, "USER_FOLDERS", [str(tmp_path)])
    monkeypatch.setattr(classpath, "_REPORTED", set())
    for variable in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(variable, raising=False)
    caplog.set_level("INFO", logger="trainer")

    target, problems = classpath.import_target("userfile_bad.Thng", "model")  # the module imports; the class does not exist
    assert target is None and "Did you mean 'Thing'?" in problems[0].message
    assert "imported from" not in caplog.text

    from trainer.utilities import rank_zero_only
    monkeypatch.setenv("RANK", "1")  # another process of the same torchrun job reads the same config
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # as set at import in that process (Lightning's rule)
    assert classpath.import_target("userfile_rank1.Thing", "model")[0] is not None
    assert "imported from" not in caplog.text
    monkeypatch.delenv("RANK")
    monkeypatch.setattr(rank_zero_only, "rank", 0)

    for _ in range(2):
        assert classpath.import_target("userfile_good.Thing", "model")[0] is not None
    assert caplog.text.count("imported from") == 1
    assert f"class_path userfile_good.Thing: imported from {tmp_path / 'userfile_good.py'}" in caplog.text


def test_a_dry_run_keeps_two_batches_of_each_of_several_evaluation_loaders() -> None:
    """`--dry_run` evaluates 2 batches: with a DataModule's dict (or list) of loaders, 2 of each,
    in the shape it gave (the loaders still run one after the other)."""
    from torch.utils.data import DataLoader

    from trainer import Trainer
    from trainer.config.experiment import Experiment

    class Data:
        def val_dataloader(self):
            return {"a": DataLoader(range(10), batch_size=2), "b": DataLoader(range(9), batch_size=3)}

        def test_dataloader(self):
            return [DataLoader(range(10), batch_size=2), DataLoader(range(9), batch_size=3)]

    experiment = Experiment({}, None, Data(), Trainer(logger=False, enable_checkpointing=False), dry_run=True)
    val = experiment.loader("val_dataloader", "validate")
    assert list(val) == ["a", "b"] and [len(one) for one in val.values()] == [2, 2]
    assert [[b.tolist() for b in one] for one in experiment.loader("test_dataloader", "test")] == [[[0, 1], [2, 3]], [[0, 1, 2], [3, 4, 5]]]
