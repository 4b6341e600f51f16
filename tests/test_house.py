"""The house rules of the layout: imports point one way and never in a circle.

Every import statement of every module in `trainer/` and `callbacks/` counts, the ones inside
functions and inside `if TYPE_CHECKING:` blocks too (a typing-only import is still a
dependency a reader has to follow). `from package import name` counts as importing
`package.name` when that is a module, else `package`.

The layers, top to bottom: `callbacks/` (optional behaviours, public API only) and
`trainer/config/` (YAML experiments and the `trainer` command) compose the core; the core is
`trainer.Trainer` over `trainer/loops/`, which use `trainer/checkpoint/` and
`trainer/logging/`, which use `trainer/strategies/` and the base modules (`module.py`,
`precision.py`, `_utils.py`, ...). `trainer/lightning/` (Lightning's spellings, translated)
is called by the argument check, the YAML schema and the checkpoint files, and uses only
`trainer/strategies/`, `precision.py` and `_utils.py`.
"""

from __future__ import annotations

import ast
import collections
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainer", "callbacks")
# The composition roots: `python -m trainer` runs the YAML layer's command; `trainer.cli` is
# LightningCLI's import path for the YAML layer's script CLI.
ENTRY_POINTS = {"trainer.__main__", "trainer.cli"}
# Lightning's import path of the callbacks (`lightning.pytorch.callbacks`): `trainer/callbacks.py`
# re-exports the `callbacks` package for a user's `from trainer.callbacks import ...`. It is a leaf
# nothing of ours imports (the package's `__getattr__` loads it by name when a user reads
# `trainer.callbacks`), so the core still never depends on the callbacks; both are checked below.
CALLBACKS_PATH = "trainer.callbacks"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _nearest(target: str, modules: set[str] | dict[str, Path]) -> str | None:
    """The nearest enclosing module of ours (`trainer.loops.fit.FitLoop` -> `trainer.loops.fit`)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def imports_of(name: str, source: str, modules: set[str] | dict[str, Path], is_package: bool = False) -> Iterator[tuple[str, int]]:
    """(module of ours, line) for every import statement in `source`, at any depth of the file."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package upwards
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for candidate in candidates:
            target = _nearest(candidate, modules)
            if target is not None and target != name:
                yield target, node.lineno


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, dict[str, list[str]]]:
    """module -> {module of ours it imports -> ["path:line", ...]}."""
    files = _files()
    graph: dict[str, dict[str, list[str]]] = {name: {} for name in files}
    for name, path in files.items():
        for target, line in imports_of(name, path.read_text(encoding="utf-8"), files, path.name == "__init__.py"):
            where = f"{path.relative_to(ROOT)}:{line}"
            if where not in graph[name].setdefault(target, []):
                graph[name][target].append(where)
    return graph


def find_cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """One concrete cycle (a list of modules, first == last) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_shortest_cycle(graph, set(component)) for component in components]


def _shortest_cycle(graph: dict[str, dict[str, list[str]]], members: set[str]) -> list[str]:
    """The shortest cycle inside a strongly connected component (breadth-first from each member)."""
    best: list[str] = []
    for start in sorted(members):
        parents: dict[str, str] = {}
        queue, closing = collections.deque([start]), None
        while queue and closing is None:
            node = queue.popleft()
            for target in sorted(graph[node]):
                if target == start:
                    closing = node
                    break
                if target in members and target not in parents:
                    parents[target] = node
                    queue.append(target)
        if closing is not None:
            path = [closing]
            while path[-1] != start:
                path.append(parents[path[-1]])
            cycle = [*reversed(path), start]
            if not best or len(cycle) < len(best):
                best = cycle
    return best


def _describe(graph: dict[str, dict[str, list[str]]], cycle: list[str]) -> str:
    steps = [f"{a} -> {b} ({', '.join(graph[a][b])})" for a, b in zip(cycle, cycle[1:])]
    return "import cycle:\n    " + "\n    ".join(steps)


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _violations(rule: str, sources: list[str], forbidden: tuple[str, ...]) -> list[str]:
    graph = import_graph()
    found = []
    for source in sources:
        for target, where in graph[source].items():
            if _under(target, *forbidden):
                found.append(f"{rule}: {source} imports {target} ({', '.join(where)})")
    return found


def _modules(*prefixes: str) -> list[str]:
    return [name for name in import_graph() if _under(name, *prefixes)]


# ------------------------------------------------------------------------------ tests
def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks():
    graph = import_graph()
    assert "trainer.loops.fit" in graph["trainer.trainer"]
    assert "trainer._args" in graph["trainer.trainer"]  # imported inside Trainer.__init__
    assert "trainer.checkpoint.format" in graph["trainer.checkpoint"]  # a package's own re-exports
    probe = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainer.trainer import Trainer\n"
    assert list(imports_of("trainer.probe", probe, graph)) == [("trainer.trainer", 3)]
    assert list(imports_of("trainer.checkpoint.state", "from . import format\n", graph)) == [("trainer.checkpoint.format", 1)]


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(_describe(graph, c) for c in cycles)


def folder_of(module: str) -> str:
    """The layer a module belongs to: a folder of `trainer/` (`trainer.loops`), a module directly
    in `trainer/` (`trainer.precision`), or the `callbacks` package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "trainer" and len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    """The import graph with each folder collapsed to one node. The package face (`trainer`'s
    `__init__`, which re-exports every layer for users) is left out: nothing inside imports it."""
    folders: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        source = folder_of(module)
        if source == "trainer":
            continue
        edges = folders.setdefault(source, {})
        for target, where in targets.items():
            if folder_of(target) not in (source, "trainer"):
                edges.setdefault(folder_of(target), []).extend(f"{module} -> {target} at {w}" for w in where)
    for edges in list(folders.values()):
        for target in edges:
            folders.setdefault(target, {})
    return folders


def test_folders_import_one_way():
    """A folder is one layer: if any module of `loops/` imports `checkpoint/`, no module of
    `checkpoint/` may import `loops/` (the module-level check cannot see such circles)."""
    folders = folder_graph(import_graph())
    cycles = find_cycles(folders)
    assert not cycles, "\n".join(_describe(folders, c) for c in cycles)


def test_the_folder_check_sees_a_circle_between_folders():
    graph = {"trainer.loops.fit": {"trainer.checkpoint.state": ["x.py:1"]},
             "trainer.checkpoint.state": {"trainer.loops.data_order": ["y.py:2"]}, "trainer.loops.data_order": {}}
    assert find_cycles(folder_graph(graph)) == [["trainer.checkpoint", "trainer.loops", "trainer.checkpoint"]]


def test_only_the_trainer_and_the_layers_above_it_use_its_own_pieces():
    """`trainer/core/` holds the Trainer's own pieces (its properties, loaders, evaluation entry
    points, run flags, compile): the Trainer and what sits above it may import them, nothing below."""
    above = ("trainer.core", "trainer.trainer", "trainer.config", "trainer.tuner", "trainer.cli", "trainer.__main__", "callbacks")
    below = [m for m in import_graph() if m != "trainer" and not _under(m, *above)]
    found = _violations("the layers below the Trainer import its own pieces", below, ("trainer.core",))
    assert found == [], "\n".join(found)


def private_reaches() -> dict[str, list[str]]:
    """`obj._name` where `obj` is neither `self`/`cls` nor an imported module: one object reading
    another's private state, by file ("line: expression")."""
    found: dict[str, list[str]] = {}
    for name, path in _files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported | {"torch", "os", "sys"}:
                continue
            found.setdefault(str(path.relative_to(ROOT)), []).append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_loops_read_no_private_attribute_of_the_trainer_and_objects_rarely_read_each_others():
    """The loops get what they work with from the run context's public fields; elsewhere a reach
    into another object's private state is rare (torch's own protocols, mostly) and stays so."""
    found = private_reaches()
    loops = [f"{file}:{where}" for file, reaches in found.items() if file.startswith("trainer/loops/")
             for where in reaches if "trainer" in where.split(":", 1)[1]]
    assert loops == []
    total = sum(len(reaches) for reaches in found.values())
    assert total <= 40, f"{total} private reaches (at most 40):\n" + "\n".join(
        f"{file}:{where}" for file, reaches in sorted(found.items()) for where in reaches)


def test_the_core_never_imports_the_yaml_layer():
    core = [m for m in _modules("trainer") if not _under(m, "trainer.config") and m not in ENTRY_POINTS]
    assert _violations("the core imports trainer.config", core, ("trainer.config",)) == []


def test_trainer_never_imports_callbacks():
    core = [m for m in _modules("trainer") if m != CALLBACKS_PATH]
    assert _violations("trainer imports callbacks", core, ("callbacks", CALLBACKS_PATH)) == []
    assert _violations("callbacks import their Lightning path", _modules("callbacks"), (CALLBACKS_PATH,)) == []


def test_import_trainer_loads_no_callback_until_a_user_asks_for_trainer_callbacks():
    import subprocess
    import sys

    probe = (
        "import sys, trainer, trainer.loops.fit, trainer.config\n"
        "assert not any(m == 'callbacks' or m.startswith('callbacks.') for m in sys.modules), 'loaded early'\n"
        "import callbacks\n"
        "assert trainer.callbacks.EarlyStopping is callbacks.EarlyStopping\n"
        "from trainer.callbacks import ModelCheckpoint\n"
        "assert ModelCheckpoint is callbacks.ModelCheckpoint\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr


def test_callbacks_use_the_public_api_only():
    graph = import_graph()
    private = [
        f"{source} imports {target}"
        for source in _modules("callbacks")
        for target in graph[source]
        if _under(target, "trainer") and any(part.startswith("_") for part in target.split(".")[1:])
    ]
    assert private == []


def test_strategies_sit_below_the_loop():
    found = _violations("strategies import the loop", _modules("trainer.strategies"), ("trainer.trainer", "trainer.loops"))
    assert found == []


def test_checkpoint_and_logging_sit_below_the_loop():
    sources = _modules("trainer.checkpoint", "trainer.logging")
    found = _violations("checkpoint/logging import the Trainer or the loop", sources, ("trainer.trainer", "trainer.loops"))
    assert found == []


def test_what_users_subclass_and_the_strategy_objects_never_import_the_trainer():
    sources = ["trainer.module", "trainer.datamodule", "trainer.precision", "trainer.loggers"]
    found = _violations("imports the Trainer", sources, ("trainer.trainer", "trainer.loops"))
    assert found == []


def test_every_folder_of_trainer_is_a_package_with_a_docstring():
    for folder in sorted(p for p in (ROOT / "trainer").iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder} has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} does not say what the folder holds"


# Lightning's spellings, as string values: translated in trainer/lightning/ only (docs/design.md,
# "Where Lightning's spellings are read").
LIGHTNING_SPELLINGS = {
    "16-mixed", "bf16-mixed", "32-true", "16-true", "bf16-true", "64-true", "transformer-engine",
    "ddp_spawn", "ddp_fork", "ddp_notebook", "deepspeed", "ddp_find_unused_parameters_true",
    "ddp_find_unused_parameters_false", "fsdp_cpu_offload", "single_device", "default_root_dir", "accelerator",
    "num_nodes", "gpus", "plugins", "resume_from_checkpoint", "pytorch-lightning_version", "optimizer_states",
    "hyper_parameters", "lr_schedulers",
}
# Where such a string is not a translation: an object's own API, or one of our keys that shares the name.
LIGHTNING_SPELLINGS_ELSEWHERE = {
    "trainer/strategies/lightning.py": {"accelerator"},  # DDPStrategy(accelerator=...) refused by the class itself
    "trainer/module/tools.py": {"hyper_parameters"},  # LightningModule.CHECKPOINT_HYPER_PARAMS_KEY, read by users
    "trainer/module/load.py": {"hyper_parameters"},  # load_from_checkpoint's fallback to Lightning's key
    "trainer/checkpoint/layout.py": {"lr_schedulers"},  # our own format version 2's key
    "callbacks/stochastic_weight_avg.py": {"lr_schedulers"},  # the hook's checkpoint dict, as Lightning's SWA edits it
    "trainer/__init__.py": {"plugins"},  # the name of the subpackage `trainer.plugins`, loaded on first use as `pl.plugins`
}


def test_lightnings_spellings_are_translated_in_trainer_lightning_only():
    found = []
    for name, path in _files().items():
        if _under(name, "trainer.lightning"):
            continue
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Constant) and node.value in LIGHTNING_SPELLINGS
                    and node.value not in LIGHTNING_SPELLINGS_ELSEWHERE.get(where, set())):
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == [], "Lightning's spellings outside trainer/lightning/: " + ", ".join(found)


def test_trainer_lightning_sits_above_the_strategies_and_below_its_callers():
    below = ("trainer.lightning", "trainer.strategies", "trainer.precision", "trainer._utils")
    graph = import_graph()
    found = [f"{source} imports {target}" for source in _modules("trainer.lightning") for target in graph[source]
             if not _under(target, *below)]
    assert found == []
    lower = _modules("trainer.strategies", "trainer.precision", "trainer._utils")
    assert _violations("a layer below trainer.lightning imports it", lower, ("trainer.lightning",)) == []
