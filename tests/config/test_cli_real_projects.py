"""LightningCLI scripts as real projects write them, with only their imports changed.

The projects in tests/helpers/cli_projects/ use what public LightningCLI projects put in
`add_arguments_to_parser` (`link_arguments` applied on parse and on instantiation,
`set_defaults`, `add_argument`, `add_lightning_class_args`, `add_optimizer_args`) and the
hooks of a LightningCLI subclass. Each runs as written and as its Lightning twin (import lines
rewritten) in one process, from the same YAML and command line: the weights are `torch.equal`,
the resolved config, the saved config and the callbacks are Lightning's. What is not taken
fails before anything is built, naming the call and what to write instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.helpers.lightning_projects import assert_same_weights, load_file

pytest.importorskip("lightning")
pytest.importorskip("jsonargparse")

PROJECTS = Path(__file__).resolve().parents[1] / "helpers" / "cli_projects"
QUIET = """\
trainer:
  accelerator: cpu
  enable_progress_bar: false
  enable_model_summary: false
  logger: false
"""


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])  # Lightning warns when both sys.argv and args are given
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def both(project: str, argv: list[str], **kwargs: Any) -> dict[str, Any]:
    """The project's CLI built by this package and by Lightning, each in its own root folder."""
    out = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / f"{project}.py", framework)
        out[framework] = module.main([*argv, "--trainer.default_root_dir", f"runs_{framework}"], **kwargs)
    return out


def config_of(cli: Any, framework: str) -> dict[str, Any]:
    """The resolved config as plain data, in Lightning's flat form for the model and data."""
    config = cli.config
    if framework == "lightning":
        config = config.get(cli.subcommand, config) if cli.subcommand else config
        return config.as_dict()
    plain = {key: value for key, value in config.items()}
    for section in ("model", "data"):
        if isinstance(plain.get(section), dict) and "init_args" in plain[section]:
            plain[section] = plain[section]["init_args"]
    return plain


def hparams(cli: Any) -> dict[str, Any]:
    return {k: v for k, v in dict(cli.model.hparams).items() if k != "_instantiator"}


def saved_config(cli: Any) -> dict[str, Any]:
    found = sorted(Path(cli.trainer.log_dir).glob("config.yaml"))
    assert found, f"no config.yaml in {cli.trainer.log_dir}"
    return yaml.safe_load(found[0].read_text())


# --------------------------------------------------------------------------------- links
LINKED = """\
seed_everything: 7
data:
  batch_size: 6
model:
  lr: 0.05
notes: first try
""" + QUIET + "  enable_checkpointing: false\n"


@pytest.mark.parametrize("run", [True, False])
def test_links_defaults_and_options_give_lightnings_run(tmp_path: Path, run: bool) -> None:
    config = write(tmp_path, "exp.yaml", LINKED)
    argv = ["fit"] if run else []
    clis = both("linked_classifier", [*argv, "--config", config, "--tags", "a", "b"], run=run)
    ours, theirs = clis["ours"], clis["lightning"]
    assert_same_weights(ours.model, theirs.model)
    assert ours.trainer.global_step == theirs.trainer.global_step == 16  # set_defaults: max_epochs 2, 8 batches each
    # the parse link took data.batch_size, the instantiate link the built data's num_classes
    assert hparams(ours) == hparams(theirs) == {"num_classes": 3, "batch_size": 6, "hidden": 6, "lr": 0.05}
    mine, lightning = config_of(ours, "ours"), config_of(theirs, "lightning")
    for key in ("model", "data", "notes", "tags", "seed_everything"):
        assert mine.get(key, mine.get("seed") if key == "seed_everything" else None) == lightning[key], key
    assert mine["model"]["batch_size"] == 6 and "num_classes" not in mine["model"]
    assert ours.config.notes == "first try" and ours.config["tags"] == ["a", "b"]


def test_saved_config_leaves_link_targets_out_and_runs_again(tmp_path: Path) -> None:
    config = write(tmp_path, "exp.yaml", LINKED.replace("logger: false", "logger: true"))
    clis = both("linked_classifier", ["fit", "--config", config])
    ours, theirs = saved_config(clis["ours"]), saved_config(clis["lightning"])
    assert "batch_size" not in ours["model"]["init_args"] and "batch_size" not in theirs["model"]
    assert ours["model"]["init_args"]["hidden"] == theirs["model"]["hidden"] == 6
    assert ours["notes"] == theirs["notes"] == "first try"
    # ours given back with another batch size: the link follows it (a target in the file would refuse it)
    saved = str(next(Path(clis["ours"].trainer.log_dir).glob("config.yaml")))
    module = sys.modules[type(clis["ours"]).__module__]  # the classes the saved config names
    again = module.main(["fit", "--config", saved, "--data.batch_size", "12", "--trainer.max_epochs", "1"])
    assert again.model.hparams.batch_size == 12 and again.trainer.global_step == 4


def test_a_config_lightning_saved_gives_the_same_weights(tmp_path: Path) -> None:
    config = write(tmp_path, "exp.yaml", LINKED.replace("logger: false", "logger: true"))
    theirs = load_file(PROJECTS / "linked_classifier.py", "lightning").main(
        ["fit", "--config", config, "--trainer.default_root_dir", "runs_lightning"])
    saved = Path(theirs.trainer.log_dir) / "config.yaml"
    text = saved.read_text()
    assert "num_nodes: 1" in text and "ckpt_path: null" in text and "plugins: null" in text  # every Lightning argument
    ours = load_file(PROJECTS / "linked_classifier.py", "ours").main(
        ["fit", "--config", str(saved), "--trainer.default_root_dir", "runs_ours"])
    assert_same_weights(ours.model, theirs.model)
    assert hparams(ours) == hparams(theirs)


# ------------------------------------------------------------ class-args callbacks, hooks
CALLBACKS = """\
seed_everything: 3
model:
  width: 5
data:
  batch_size: 4
model_checkpoint:
  save_last: true
""" + QUIET + "  max_epochs: 4\n"


@pytest.mark.parametrize("run", [True, False])
def test_callbacks_under_their_own_keys_and_hooks_as_lightning(tmp_path: Path, run: bool) -> None:
    config = write(tmp_path, "exp.yaml", CALLBACKS)
    argv = ["fit"] if run else []
    clis = both("callback_args", [*argv, "--config", config, "--num_classes", "2", "--early_stopping.patience", "1"], run=run)
    ours, theirs = clis["ours"], clis["lightning"]
    assert_same_weights(ours.model, theirs.model)
    assert ours.trainer.global_step == theirs.trainer.global_step
    assert ours.called == theirs.called
    assert ours.called[-1:] == ([f"after_fit:{theirs.trainer.global_step}"] if run else ["after_instantiate_classes"])
    # linked from the script's --num_classes, and from two sources through compute_fn
    assert hparams(ours) == hparams(theirs) == {"num_classes": 2, "width": 5, "steps_hint": 32}

    def described(cli: Any) -> list[tuple[str, Any, Any, Any]]:
        return [(type(c).__name__, c.monitor, getattr(c, "patience", None), getattr(c, "mode", None))
                for c in cli.trainer.callbacks if type(c).__name__ in ("EarlyStopping", "ModelCheckpoint")]

    assert described(ours) == described(theirs) == [("EarlyStopping", "val_loss", 1, "min"),
                                                    ("ModelCheckpoint", "val_loss", None, "min")]
    ours_files = sorted(p.name for p in Path(ours.trainer.checkpoint_callback.dirpath).glob("best-*.ckpt"))
    theirs_files = sorted(p.name for p in Path(theirs.trainer.checkpoint_callback.dirpath).glob("best-*.ckpt"))
    assert ours_files == theirs_files and ours_files
    mine, lightning = config_of(ours, "ours"), config_of(theirs, "lightning")
    for key in ("model", "data", "num_classes"):
        assert mine[key] == lightning[key], key
    for key in ("early_stopping", "model_checkpoint"):
        assert {k: v for k, v in mine[key].items() if k in lightning[key]} == lightning[key], key


def test_a_change_in_before_instantiate_classes_is_built(tmp_path: Path) -> None:
    config = write(tmp_path, "exp.yaml", CALLBACKS)
    results = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / "callback_args.py", framework)

        class Wider(module.CallbackCLI):  # type: ignore[name-defined,misc]
            def before_instantiate_classes(self) -> None:  # a LitCLI's form: self.config[self.subcommand]
                config = self.config[self.subcommand]
                config.model.width = config.model.width + 2

        results[framework] = Wider(module.Regressor, module.Points, args=["fit", "--config", config, "--trainer.max_epochs", "1",
                                   "--trainer.default_root_dir", f"runs_{framework}"], save_config_kwargs={"overwrite": True})
    assert results["ours"].model.hparams.width == results["lightning"].model.hparams.width == 7
    assert_same_weights(results["ours"].model, results["lightning"].model)


# ----------------------------------------------------------------------------- optimizers
OPTIMIZERS = """\
seed_everything: 5
optimizer:
  lr: 0.02
lr_scheduler:
  gamma: 0.5
""" + QUIET + "  max_epochs: 3\n  enable_checkpointing: false\n"


def test_fixed_optimizer_and_scheduler_as_lightning(tmp_path: Path) -> None:
    config = write(tmp_path, "exp.yaml", OPTIMIZERS)
    clis = both("optimizer_args", ["fit", "--config", config, "--lr_scheduler.gamma=0.8"])
    ours, theirs = clis["ours"], clis["lightning"]
    assert_same_weights(ours.model, theirs.model)
    for cli in (ours, theirs):
        assert type(cli.trainer.optimizers[0]) is torch.optim.Adam
        assert [type(c.scheduler) for c in cli.trainer.lr_scheduler_configs] == [torch.optim.lr_scheduler.ExponentialLR]
    assert ours.trainer.optimizers[0].param_groups[0]["lr"] == theirs.trainer.optimizers[0].param_groups[0]["lr"]
    mine, lightning = config_of(ours, "ours"), config_of(theirs, "lightning")
    assert mine["lr_scheduler"] == lightning["lr_scheduler"] == {"gamma": 0.8, "last_epoch": -1}
    assert mine["optimizer"]["lr"] == lightning["optimizer"]["lr"] == 0.02


def test_a_choice_of_optimizers_as_lightning(tmp_path: Path) -> None:
    config = write(tmp_path, "exp.yaml", OPTIMIZERS.replace("optimizer:\n  lr: 0.02\nlr_scheduler:\n  gamma: 0.5\n",
                                                            "optimizer:\n  class_path: torch.optim.SGD\n  init_args: {lr: 0.05}\n"))
    clis = both("optimizer_args", ["fit", "--config", config], choice=True)
    assert_same_weights(clis["ours"].model, clis["lightning"].model)
    assert type(clis["ours"].trainer.optimizers[0]) is torch.optim.SGD
    bad = write(tmp_path, "bad.yaml", OPTIMIZERS.replace("optimizer:\n  lr: 0.02\nlr_scheduler:\n  gamma: 0.5\n",
                                                         "optimizer: RMSprop\n"))
    module = load_file(PROJECTS / "optimizer_args.py", "ours")
    with pytest.raises(SystemExit) as caught:
        module.main(["fit", "--config", bad], choice=True)
    assert caught.value.code == 2


# --------------------------------------------------------------------- refused, before work
def _linked_module() -> Any:
    return load_file(PROJECTS / "linked_classifier.py", "ours")


def _cli_with(module: Any, add: Any, **methods: Any) -> type:
    def add_arguments_to_parser(self: Any, parser: Any) -> None:
        add(parser)

    return type("ProjectCLI", (module.LinkedCLI,), {"add_arguments_to_parser": add_arguments_to_parser, **methods})


@pytest.mark.parametrize(("call", "named", "instead"), [
    (lambda p: p.add_class_arguments(dict, "extra"), "add_class_arguments", "add_lightning_class_args"),
    (lambda p: p.add_subclass_arguments(dict, "extra"), "add_subclass_arguments", "type"),
    (lambda p: p.add_method_arguments(dict, "get"), "add_method_arguments", "add_argument"),
    (lambda p: p.add_argument_group("mine"), "add_argument_group", "add_argument"),
])
def test_a_parser_call_not_taken_names_itself(tmp_path: Path, call: Any, named: str, instead: str) -> None:
    module = _linked_module()
    cli = _cli_with(module, call)
    with pytest.raises(AttributeError, match=rf"parser\.{named}\(\.\.\.\) is not taken.*{instead}"):
        cli(module.Classifier, module.Blobs, args=["fit", "--trainer.max_epochs", "1"])
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("config.yaml"))


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: p.link_arguments("model.hidden", "data.batch_size", apply_on="instantiate"),
     "Expected a 'data.<attribute>' source and a 'model.<argument>' target"),
    (lambda p: p.link_arguments("data.batch_size", "model.lr", apply_on="later"), "apply_on expects 'parse' or 'instantiate'"),
    (lambda p: p.link_arguments(("data.batch_size", "data.n"), "model.lr"), "several sources need a compute_fn"),
    (lambda p: p.add_optimizer_args(torch.optim.SGD, nested_key="opt2", link_to="model.opt"), "only the automatic `optimizer:`"),
    (lambda p: p.add_lightning_class_args(torch.nn.Linear, "layer"), "only a Callback class is taken here"),
    (lambda p: p.add_argument("--model"), "'model' is a section this CLI already has"),
    (lambda p: p.set_defaults({"model.net": torch.nn.Linear(1, 1)}), "an object is only taken as the default of a Trainer"),
])
def test_a_call_with_no_meaning_here_is_refused(call: Any, message: str) -> None:
    module = _linked_module()
    cli = _cli_with(module, call)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cli(module.Classifier, module.Blobs, args=["fit"])


@pytest.mark.parametrize("method", ["instantiate_trainer", "setup_parser", "parse_arguments", "subcommands"])
def test_an_override_this_cli_never_calls_is_refused(method: str) -> None:
    module = _linked_module()
    cli = type("ProjectCLI", (module.LinkedCLI,), {method: lambda self, *a, **k: None})
    with pytest.raises(ValueError, match=rf"ProjectCLI\.{method} is overridden, but this CLI does not call {method}"):
        cli(module.Classifier, module.Blobs, args=["fit"])


def test_a_link_target_set_to_another_value_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = _linked_module()
    config = write(tmp_path, "exp.yaml", LINKED)
    with pytest.raises(SystemExit) as caught:
        module.main(["fit", "--config", config, "--model.batch_size", "3"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "model.batch_size: set by link_arguments('data.batch_size', 'model.batch_size', apply_on='parse'), which " \
           "gives 6; the config also sets 3" in err
    assert not list(tmp_path.rglob("*.ckpt"))
    run = module.main(["fit", "--config", config, "--model.batch_size", "6", "--trainer.max_epochs", "1"])  # the same value
    assert run.model.hparams.batch_size == 6


def test_an_instantiate_link_to_a_missing_attribute_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = _linked_module()
    cli = _cli_with(module, lambda p: p.link_arguments("data.classes", "model.num_classes", apply_on="instantiate"))
    with pytest.raises(SystemExit):
        cli(module.Classifier, module.Blobs, args=["fit", "--trainer.max_epochs", "1"])
    assert "the built Blobs has no attribute 'classes'" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_required_option_and_a_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = _linked_module()

    def add(parser: Any) -> None:
        parser.add_argument("--runs", type=int, required=True)
        parser.add_argument("--scale", type=float, default=1.0)
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")

    cli = _cli_with(module, add)
    with pytest.raises(SystemExit):
        cli(module.Classifier, module.Blobs, args=["fit", "--scale", "big"])
    err = capsys.readouterr().err
    assert "--runs: required option of this script" in err and "--scale:" in err and "'big'" in err
    built = cli(module.Classifier, module.Blobs, args=["fit", "--runs", "2", "--scale", "0.5", "--trainer.max_epochs", "1",
                                                       "--trainer.logger", "false"])
    assert built.config.runs == 2 and built.config.scale == 0.5


def test_links_into_the_logger_and_from_the_seed_and_overridden_steps(tmp_path: Path) -> None:
    """A script option linked into `trainer.logger.init_args.save_dir` (a VAE project's
    `--save_dir`), `seed_everything` linked into the model (a graph project's GraphIDSCLI), and
    `instantiate_classes` / `fit` overridden in the subclass, as Lightning calls them."""
    config = write(tmp_path, "exp.yaml", LINKED.replace("logger: false", "logger: {class_path: CSVLogger, init_args: {name: csv}}")
                   .replace("model:\n  lr: 0.05\n", ""))
    results = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / "linked_classifier.py", framework)

        class Extra(module.LinkedCLI):  # type: ignore[name-defined,misc]
            def add_arguments_to_parser(self, parser: Any) -> None:
                super().add_arguments_to_parser(parser)
                parser.add_argument("--save_dir", type=str, default="logs")
                parser.link_arguments("save_dir", "trainer.logger.init_args.save_dir")
                parser.link_arguments("seed_everything", "model.lr", compute_fn=lambda seed: seed / 100)

            def instantiate_classes(self) -> None:
                super().instantiate_classes()
                self.built = type(self.model).__name__

            def fit(self, model: Any, **kwargs: Any) -> None:
                self.fit_arguments = set(kwargs)
                self.trainer.fit(model, **kwargs)

        results[framework] = Extra(module.Classifier, module.Blobs, args=[
            "fit", "--config", config, "--save_dir", f"logs_{framework}", "--trainer.max_epochs", "1"])
    ours, theirs = results["ours"], results["lightning"]
    assert_same_weights(ours.model, theirs.model)
    assert ours.model.hparams.lr == theirs.model.hparams.lr == 0.07
    assert ours.built == theirs.built == "Classifier"
    assert {"datamodule", "ckpt_path"} <= ours.fit_arguments and {"datamodule", "ckpt_path"} <= theirs.fit_arguments
    for framework, cli in results.items():
        assert Path(cli.trainer.logger.save_dir) == Path(f"logs_{framework}") and cli.trainer.logger.name == "csv"
        assert list(Path(f"logs_{framework}").rglob("metrics.csv"))


def test_a_default_of_a_link_target_is_not_a_conflict(tmp_path: Path) -> None:
    module = _linked_module()

    def add(parser: Any) -> None:
        module.LinkedCLI.add_arguments_to_parser(None, parser)
        parser.set_defaults({"model.batch_size": 99})

    cli = _cli_with(module, add)
    built = cli(module.Classifier, module.Blobs, args=["fit", "--data.batch_size", "5", "--trainer.max_epochs", "1",
                                                       "--trainer.logger", "false"])
    assert built.model.hparams.batch_size == 5


def test_print_config_gives_the_script_its_own_config_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dotted and flag options (a GAN project's `--onnx.path`, a training project's `-f/--force`),
    class-args callbacks and links: the printed config, given back, builds the same objects."""
    module = load_file(PROJECTS / "callback_args.py", "ours")

    class Options(module.CallbackCLI):  # type: ignore[name-defined,misc]
        def add_arguments_to_parser(self, parser: Any) -> None:
            super().add_arguments_to_parser(parser)
            parser.add_argument("-f", "--force", action="store_true")
            parser.add_argument("--onnx.path", default="export/model.onnx")

    config = write(tmp_path, "exp.yaml", CALLBACKS)
    with pytest.raises(SystemExit) as caught:
        Options(module.Regressor, module.Points, args=["--config", config, "-f", "--onnx.path", "y.onnx", "--num_classes", "2",
                                                       "--print_config"], run=False)
    assert caught.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["force"] is True and printed["onnx"] == {"path": "y.onnx"} and printed["num_classes"] == 2
    assert "num_classes" not in printed["model"]["init_args"]  # a link's target, as Lightning prints it
    again = Options(module.Regressor, module.Points, args=["--config", write(tmp_path, "printed.yaml", yaml.safe_dump(printed))],
                    run=False)
    assert again.config.force is True and again.config.onnx.path == "y.onnx"
    assert again.model.hparams.num_classes == 2 and again.datamodule.classes == 2
    assert [type(c).__name__ for c in again.trainer.callbacks if type(c).__name__ in ("EarlyStopping", "ModelCheckpoint")] \
        == ["EarlyStopping", "ModelCheckpoint"]
    flagless = Options(module.Regressor, module.Points, args=["--config", config], run=False)
    assert flagless.config.force is False and flagless.config.onnx.path == "export/model.onnx"


def test_links_in_subclass_mode_as_lightning(tmp_path: Path) -> None:
    """Lightning's `test_lightning_cli_link_arguments` in subclass mode, and the `data.init_args.*`
    sources of MMVAE's and a segmentation project's CLIs, with the classes named on the command line."""
    results = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / "linked_classifier.py", framework)

        class Subclasses(module.LightningCLI):  # type: ignore[name-defined,misc]
            def add_arguments_to_parser(self, parser: Any) -> None:
                parser.link_arguments("data.init_args.batch_size", "model.init_args.batch_size")
                parser.link_arguments("data.init_args.num_classes", "model.init_args.num_classes", apply_on="instantiate")

        cli = Subclasses(module.Classifier, module.Blobs, subclass_mode_model=True, subclass_mode_data=True, run=False, args=[
            "--model", f"{module.__name__}.Classifier", "--data", f"{module.__name__}.Blobs", "--data.batch_size", "5",
            "--seed_everything", "1", "--trainer.max_epochs", "1", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", f"runs_{framework}"])
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        results[framework] = cli
    assert_same_weights(results["ours"].model, results["lightning"].model)
    assert hparams(results["ours"]) == {k: v for k, v in hparams(results["lightning"]).items() if not k.startswith("_")} \
        == {"num_classes": 3, "batch_size": 5, "hidden": 8, "lr": 0.1}


def test_an_instantiate_link_target_given_otherwise_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = _linked_module()
    with pytest.raises(SystemExit) as caught:
        module.main(["fit", "--model.num_classes", "4", "--trainer.max_epochs", "1", "--trainer.logger", "false"])
    assert caught.value.code == 2
    assert "model.num_classes: set by link_arguments('data.num_classes', 'model.num_classes', apply_on='instantiate'), " \
           "which gives 3; the config also sets 4" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.ckpt"))
    same = module.main(["fit", "--model.num_classes", "3", "--trainer.max_epochs", "1", "--trainer.logger", "false"])
    assert same.model.hparams.num_classes == 3


def test_a_lazy_instance_logger_default(tmp_path: Path) -> None:
    """A classification project's `parser.set_defaults({"trainer.logger": lazy_instance(CSVLogger, ...)})`."""
    from jsonargparse import lazy_instance

    results = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / "linked_classifier.py", framework)
        csv_logger = __import__("trainer.loggers" if framework == "ours" else "lightning.pytorch.loggers",
                                fromlist=["CSVLogger"]).CSVLogger

        # called from the project's module, as the script calls it (jsonargparse keeps the lazy class there)
        logger = eval("lazy_instance(CSVLogger, save_dir=save_dir, name='run_logs')",  # noqa: S307
                      {"__name__": module.__name__, "lazy_instance": lazy_instance, "CSVLogger": csv_logger,
                       "save_dir": f"out_{framework}"})

        class Logged(module.LinkedCLI):  # type: ignore[name-defined,misc]
            def add_arguments_to_parser(self, parser: Any, logger: Any = logger) -> None:
                super().add_arguments_to_parser(parser)
                parser.set_defaults({"trainer.logger": logger})

        results[framework] = Logged(module.Classifier, module.Blobs, args=[
            "fit", "--seed_everything", "2", "--trainer.max_epochs", "1", "--trainer.default_root_dir", f"runs_{framework}",
            "--trainer.enable_progress_bar", "false"], save_config_callback=None)
    assert_same_weights(results["ours"].model, results["lightning"].model)
    for framework, cli in results.items():
        assert isinstance(cli.trainer.logger, __import__("trainer.loggers" if framework == "ours" else
                                                         "lightning.pytorch.loggers", fromlist=["CSVLogger"]).CSVLogger)
        assert Path(cli.trainer.logger.log_dir) == Path(f"out_{framework}/run_logs/version_0")
        assert (Path(cli.trainer.logger.log_dir) / "metrics.csv").is_file()


def test_a_save_config_callback_subclass_logs_the_config(tmp_path: Path) -> None:
    results = {}
    for framework in ("ours", "lightning"):
        module = load_file(PROJECTS / "logged_config.py", framework)
        module.LoggerSaveConfigCallback.calls = []
        cli = module.main(["fit", "--seed_everything", "4", "--model.width", "3", "--trainer.max_epochs", "2",
                           "--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", f"out_{framework}",
                           "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", f"runs_{framework}"])
        results[framework] = cli
        assert module.LoggerSaveConfigCallback.calls == ["fit"]  # once, at the first setup
        logged = yaml.safe_load((Path(cli.trainer.logger.log_dir) / "hparams.yaml").read_text())
        assert logged["width"] == 3
        dumped = yaml.safe_load(logged["config"])
        assert (dumped["model"].get("init_args") or dumped["model"])["width"] == 3
        assert (Path(cli.trainer.log_dir) / "config.yaml").is_file()  # the file is written too
    assert_same_weights(results["ours"].model, results["lightning"].model)


@pytest.mark.parametrize("section", ["trainer.logger", "logger"])
def test_the_logger_class_and_its_arguments_on_the_command_line(tmp_path: Path, section: str) -> None:
    """LightningCLI's `--trainer.logger CSVLogger --trainer.logger.save_dir DIR` (Lightning's CLI docs),
    in a script and in `trainer fit`'s overrides."""
    from trainer.config import prepare_config
    from trainer.config.cli import split_overrides

    rest, overrides, problems = split_overrides([f"--{section}", "CSVLogger", f"--{section}.save_dir", "logs", f"--{section}.name", "x"])
    assert not rest and not problems
    config: dict[str, Any] = {"model": {"class_path": "trainer.demos.BoringModel"},
                              "data": {"class_path": "trainer.demos.BoringDataModule"}}
    if section == "logger":
        config["logger"] = False
    else:
        config["trainer"] = {"logger": False}
    resolved = prepare_config(config, overrides)
    assert resolved.plain["logger"]["class_path"] == "trainer.loggers.CSVLogger"
    assert resolved.plain["logger"]["init_args"]["save_dir"] == "logs" and resolved.plain["logger"]["init_args"]["name"] == "x"


def test_a_link_into_a_class_args_callback_given_otherwise_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A project's `link_arguments("best_checkpoint_callback.dirpath", "last_checkpoint_callback.dirpath")`."""
    module = load_file(PROJECTS / "callback_args.py", "ours")

    class Two(module.CallbackCLI):  # type: ignore[name-defined,misc]
        def add_arguments_to_parser(self, parser: Any) -> None:
            super().add_arguments_to_parser(parser)
            parser.add_lightning_class_args(module.ModelCheckpoint, "last_checkpoint")
            parser.link_arguments("model_checkpoint.dirpath", "last_checkpoint.dirpath")

    config = write(tmp_path, "exp.yaml", CALLBACKS)
    with pytest.raises(SystemExit):
        Two(module.Regressor, module.Points, args=["fit", "--config", config, "--model_checkpoint.dirpath", "a",
                                                   "--last_checkpoint.dirpath", "b"])
    assert "last_checkpoint.dirpath: set by link_arguments('model_checkpoint.dirpath'" in capsys.readouterr().err
    built = Two(module.Regressor, module.Points, args=["fit", "--config", config, "--model_checkpoint.dirpath", "ckpts",
                                                       "--trainer.max_epochs", "1"])
    assert [c.dirpath for c in built.trainer.callbacks if isinstance(c, module.ModelCheckpoint)] == [
        str(Path("ckpts").resolve())] * 2 or [Path(c.dirpath).name for c in built.trainer.callbacks
                                              if isinstance(c, module.ModelCheckpoint)] == ["ckpts", "ckpts"]
