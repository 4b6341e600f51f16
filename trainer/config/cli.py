"""The `trainer` command: the composition root where a YAML file becomes a run.

    trainer fit CONFIG [--trainer.max_epochs 3] [--model.init_args.hidden 256] [--seed 1]
    trainer validate|test|predict CONFIG --ckpt_path PATH
    trainer fit CONFIG --print_config      # the resolved config, defaults filled in
    trainer fit CONFIG --dry_run           # build everything, run 2 steps, write nothing

A user mistake (a bad file, a bad value, an unknown override, a missing checkpoint) is
reported as one message listing every problem, with exit code 2 and no traceback. An
exception raised by the user's code while it runs keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from trainer._args import TrainerArgs
from trainer.config.classpath import ConfigError, Problem, suggest
from trainer.config.optim import OPTIMIZER_SECTIONS, add_optimizer_options, set_section
from trainer.config.schema import SECTIONS, TOP_LEVEL_ONLY, load_experiment, prepare_config
from trainer.config.yaml_io import dump_yaml, parse_yaml

__all__ = ["main", "build_parser", "add_trainer_options", "split_overrides", "class_arguments"]

log = logging.getLogger("trainer")

COMMANDS = {
    "fit": "train the model (resume with --ckpt_path PATH or --ckpt_path last)",
    "validate": "run validation_step over the data's val_dataloader()",
    "test": "run test_step over the data's test_dataloader()",
    "predict": "run predict_step over the data's predict_dataloader()",
}

OVERRIDES_HELP = """\
Any value of the config can be overridden with a dotted path, applied in order
after the file is read and before it is validated:
  --trainer.max_epochs 3   --trainer.precision bf16   --seed 1
  --model.init_args.hidden 256   --data.init_args.batch_size 32
  --callbacks.0.init_args.patience 5   --logger false
  --optimizer Adam --optimizer.lr 0.01   --lr_scheduler StepLR --lr_scheduler.step_size 1
Values are read as YAML: 3 is an int, 1e-4 a float, null None, [1, 2] a list.
LightningCLI's --model.hidden 256 means --model.init_args.hidden 256; --model.help
(and --data.help) lists the arguments of the config's model (data) class.
Modules named by class_path are imported from the installed packages, the current
folder and the config file's folder.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `trainer` (overrides are taken out before it runs)."""
    root = argparse.ArgumentParser(
        prog="trainer",
        description="Run a YAML-configured experiment: every section is validated before any work starts.",
        epilog="Run `trainer COMMAND --help` for a command's options.\n\n" + OVERRIDES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, text in COMMANDS.items():
        parser = commands.add_parser(
            name, help=text, description=f"trainer {name}: {text}.", epilog=OVERRIDES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
        )
        parser.add_argument("config", metavar="CONFIG", nargs="+",
                            help="the experiment's YAML file(s); later files override earlier ones, key by key")
        parser.add_argument("--ckpt_path", metavar="PATH", help="checkpoint to resume from / evaluate ('last': the run's newest complete one; fit starts fresh when there is none)")
        parser.add_argument("--print_config", action="store_true", help="print the resolved config (defaults filled in) and exit")
        parser.add_argument("--dry_run", action="store_true", help="build everything and run 2 steps (2 batches to evaluate); write nothing")
        if name == "predict":
            parser.add_argument("--output", metavar="PATH", help="save the list of predict_step outputs with torch.save")
        add_trainer_options(parser)
        add_optimizer_options(parser)
    check = commands.add_parser(
        "check-resume", help="check that the experiment resumes exactly: train straight and with interruptions, compare",
        description="trainer check-resume: train the experiment's model and data for a few steps straight, then again "
        "with interruptions and resumes, and compare the batches, weights and optimizer state. Writes nothing into "
        "root_dir. Exit code 0: exact; 1: not exact (the report names the first difference and its likely cause).",
        epilog=OVERRIDES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
    )
    check.add_argument("config", metavar="CONFIG", nargs="+", help="the experiment's YAML file(s)")
    check.add_argument("--steps", type=int, default=8, help="optimizer steps of each comparison (default: 8)")
    check.add_argument("--interrupt_at", type=int, nargs="+", metavar="N",
                       help="micro-batch counts after which to interrupt (default: twice inside one epoch)")
    add_trainer_options(check)
    export = commands.add_parser(
        "export", help="write a checkpoint's model weights as one plain file (from an FSDP folder too)",
        description="trainer export: write the model weights of CHECKPOINT (a file, or the folder of shards an FSDP "
        "run writes) as one file of {name: tensor}, for model.load_state_dict(torch.load(OUTPUT, weights_only=True)).",
    )
    export.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint file or sharded checkpoint folder")
    export.add_argument("output", metavar="OUTPUT", help="the weights file to write")
    return root


def add_trainer_options(parser: argparse.ArgumentParser) -> None:
    """List `--seed` and every `--trainer.<argument>` in the help (overrides are parsed apart)."""
    group = parser.add_argument_group("overrides of the trainer section (defaults shown; any dotted path works)")
    group.add_argument("--seed", metavar="INT", help="seed everything once, before anything is built")
    for field, info in TrainerArgs.model_fields.items():
        if field not in TOP_LEVEL_ONLY:
            default = info.default if not isinstance(info.default, Path) else str(info.default)
            group.add_argument(f"--trainer.{field}", metavar="VALUE", help=f"{info.description or ''} (default: {default!r})".lstrip())


def split_overrides(argv: Sequence[str], sections: Sequence[str] = SECTIONS,
                    keep: Collection[str] = ()) -> tuple[list[str], dict[str, Any], list[Problem]]:
    """Take `--section[.path] VALUE` / `--section.path=VALUE` pairs out of `argv` (`sections`:
    the config's top-level keys; the options named in `keep` stay for argparse)."""
    rest: list[str] = []
    overrides: dict[str, Any] = {}
    problems: list[Problem] = []
    tokens = list(argv)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in ("--model.help", "--data.help"):  # LightningCLI: list the class's arguments
            overrides[token[2:]] = True
            index += 1
            continue
        name = token[2:].split("=", 1)[0] if token.startswith("--") else ""
        if not name or f"--{name}" in keep or ("." not in name and name not in sections):
            rest.append(token)
            index += 1
            continue
        if "=" in token:
            text, index = token.split("=", 1)[1], index + 1
        elif index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
            text, index = tokens[index + 1], index + 2
        else:
            problems.append(Problem(f"--{name}", f"Expected a value after it (`--{name}=VALUE` if it starts "
                                    f"with --). Received: {'nothing' if index + 1 >= len(tokens) else tokens[index + 1]!r}."))
            index += 1
            continue
        if name.split(".")[0] not in sections:
            problems.append(Problem(f"--{name}", f"unknown override.{suggest(name.split('.')[0], sections)} "
                                    f"Expected a dotted path starting with one of: {', '.join(sections)}."))
            continue
        overrides[name] = _parse_value(text)
    return rest, overrides, problems


def _parse_value(text: str) -> Any:
    try:
        return parse_yaml(text) if text.strip() else text
    except Exception:  # not YAML (e.g. "a: b: c"): keep the text
        return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trainer` console script and `python -m trainer`; returns the exit code."""
    from trainer.callback import MonitorError
    from trainer.checkpoint import CheckpointError

    _setup_logging()
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except (ConfigError, CheckpointError) as error:
        sys.stderr.write(f"trainer: error: {error}\n")
        return 2
    except MonitorError as error:  # found during fit; last.ckpt was written first
        sys.stderr.write(f"trainer: error: {error}\nThe finished steps are in last.ckpt: fix the config, then resume "
                         "with --ckpt_path last.\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("trainer: interrupted. last.ckpt keeps the finished steps (with enable_checkpointing): "
                         "continue with `trainer fit CONFIG --ckpt_path last`.\n")
        return 130


def _run(argv: list[str]) -> int:
    if argv[:1] == ["export"]:  # no config: checkpoint in, weights file out
        return _export(build_parser().parse_args(argv))
    rest, overrides, problems = split_overrides(argv)
    args = build_parser().parse_args(rest)
    if problems:
        raise ConfigError(problems, "the command line")
    _our_packages_first()
    for path in args.config:
        _extend_import_path(Path(path))
    helps = [key.split(".")[0] for key in ("model.help", "data.help") if overrides.pop(key, None)]
    config: Any = args.config[0] if len(args.config) == 1 else _merge_files(args.config)
    if helps:
        return _print_help(config, overrides, helps)
    if args.command == "check-resume":
        from trainer.config.check import check_resume_command

        if args.steps < 2:
            raise ConfigError([Problem("--steps", f"Expected at least 2 optimizer steps. Received: {args.steps}.")])
        return check_resume_command(config, overrides, args.steps, args.interrupt_at)
    args.config = config
    stage = args.command
    if args.ckpt_path not in (None, "last") and not Path(args.ckpt_path).exists():
        raise ConfigError([Problem("--ckpt_path", f"{args.ckpt_path!r} does not exist. Expected a checkpoint file "
                                   "(or an FSDP run's folder) written by the trainer, or 'last' for the run's newest.")])
    output = getattr(args, "output", None)
    if output is not None and (Path(output).is_dir() or not Path(output).resolve().parent.is_dir()):
        what = "is a folder" if Path(output).is_dir() else "is in a folder that does not exist"
        raise ConfigError([Problem("--output", f"{output!r} {what}. Expected a file path in an existing folder.")])
    if args.print_config:
        resolved = prepare_config(args.config, overrides, stage=stage, dry_run=args.dry_run)
        sys.stdout.write(dump_yaml(resolved.plain))
        return 0
    experiment = load_experiment(args.config, overrides, stage=stage, dry_run=args.dry_run)
    strategy = experiment.trainer.strategy
    if stage == "predict":
        predictions = experiment.predict(ckpt_path=args.ckpt_path)
        saved = None if output is None or args.dry_run else prediction_path(output, strategy.rank, strategy.world_size)
        if saved is not None:
            import torch

            torch.save(predictions, saved)
        log.info("predict: %d outputs%s.", len(predictions), f" saved to {saved}" if saved else "")
        return 0
    if stage in ("validate", "test") and args.ckpt_path is None and not args.dry_run:
        log.warning("trainer %s without --ckpt_path scores the model's initial, untrained weights. Pass "
                    "--ckpt_path last (the newest run under root_dir) or a checkpoint's path.", stage)
    if stage == "fit":
        experiment.fit(ckpt_path=args.ckpt_path)
        metrics = experiment.trainer.callback_metrics
    else:
        metrics = getattr(experiment, stage)(ckpt_path=args.ckpt_path)
    if strategy.is_global_zero:  # under torchrun: one report, from rank 0 (epoch metrics are averaged over ranks)
        if stage == "fit":
            log.info("fit finished after %d optimizer steps (%d epochs).", experiment.trainer.global_step,
                     experiment.trainer.current_epoch)
        sys.stdout.write(json.dumps(metrics, sort_keys=True) + "\n")
    return 0


def _export(args: argparse.Namespace) -> int:
    from trainer.checkpoint import export_weights, is_remote, location

    if not location(args.checkpoint).exists():
        raise ConfigError([Problem("CHECKPOINT", f"{args.checkpoint!r} does not exist. Expected a checkpoint file or an "
                                   f"FSDP run's checkpoint folder; {_a_run_checkpoint(args.output)}")], "the command line")
    output = Path(args.output)
    if not is_remote(args.output) and (output.is_dir() or not output.resolve().parent.is_dir()):
        what = "is a folder" if output.is_dir() else "is in a folder that does not exist"
        raise ConfigError([Problem("OUTPUT", f"{args.output!r} {what}. Expected a file path in an existing folder.")],
                          "the command line")
    written = export_weights(args.checkpoint, args.output if is_remote(args.output) else output)
    log.info("export: the weights of %s are in %s.", args.checkpoint, written)
    return 0


def _a_run_checkpoint(output: str) -> str:
    """The export command for the newest `last.ckpt` under ./runs (the default root_dir), or
    where a run writes it."""
    found = sorted(Path("runs").glob("**/last.ckpt"), key=lambda path: path.stat().st_mtime) if Path("runs").is_dir() else []
    if not found:
        return "a run writes it as <root_dir>/<name>/version_<n>/last.ckpt (runs/default/version_0/last.ckpt by default)."
    return f"the newest run checkpoint here: trainer export {found[-1]} {output}"


def _merge_files(paths: list[str]) -> dict[str, Any]:
    """Several config files, later ones overriding earlier ones key by key (lists replace)."""
    from trainer.config.schema import read_yaml

    merged: dict[str, Any] = {}
    for path in paths:
        _deep_merge(merged, read_yaml(path))
    return merged


def _deep_merge(into: dict[str, Any], update: dict[str, Any], top: bool = True) -> None:
    for key, value in update.items():
        if top and key in OPTIMIZER_SECTIONS:  # `optimizer: Adam` over a spec keeps the init_args Adam accepts
            set_section(into, key, value)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value, top=False)
        else:
            into[key] = value


def _print_help(config: Any, overrides: dict[str, Any], sections: list[str]) -> int:
    """`--model.help`: the arguments the config's model (or data) class takes, with defaults."""
    from trainer.config.classpath import import_target
    from trainer.config.schema import apply_overrides, read_yaml

    plain = read_yaml(config) if not isinstance(config, dict) else dict(config)
    problems = apply_overrides(plain, overrides)
    for section in sections:
        spec = plain.get(section) or {}
        target, found = import_target(spec.get("class_path"), section)
        problems += found
        if target is None:
            continue
        sys.stdout.write(f"{section}: {spec['class_path']}\n")
        for name, text in class_arguments(target):
            sys.stdout.write(f"  --{section}.init_args.{name}{text}\n")
    if problems:
        raise ConfigError(problems, None)
    return 0


def class_arguments(target: Any) -> list[tuple[str, str]]:
    """Each keyword argument of `target` with `: type = default` (or `(required)`)."""
    import inspect

    arguments = []
    for name, parameter in inspect.signature(target).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = "" if parameter.annotation is parameter.empty else f": {getattr(parameter.annotation, '__name__', parameter.annotation)}"
        default = " (required)" if parameter.default is parameter.empty else f" = {parameter.default!r}"
        arguments.append((name, hint + default))
    return arguments


def prediction_path(output: str, rank: int, world_size: int) -> Path:
    """Where this rank saves its predictions: `output`, or `name.rankN.pt` for each of several ranks."""
    path = Path(output)
    return path if world_size == 1 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def _our_packages_first() -> None:
    """`python -m trainer` puts the working folder first on sys.path, where a user's own
    `callbacks.py` (or `trainer/`) would shadow this package's: it goes behind the installed
    packages instead (class_path still finds the user's modules there, see classpath.py)."""
    here = {"", ".", os.getcwd()}
    if any(entry in here for entry in sys.path):
        sys.path[:] = [entry for entry in sys.path if entry not in here] + [os.getcwd()]


def _extend_import_path(config: Path) -> None:
    """Let class_path find modules in the current folder and beside the config file."""
    from trainer.config import classpath

    for folder in (os.getcwd(), str(config.resolve().parent)):
        if folder not in sys.path:
            sys.path.append(folder)
        if folder not in classpath.USER_FOLDERS:
            classpath.USER_FOLDERS.append(folder)


def _setup_logging() -> None:
    logger = logging.getLogger("trainer")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
