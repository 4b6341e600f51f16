"""`save_hyperparameters` over a chain of `__init__` calls, against Lightning in this process.

Lightning collects the arguments of every `__init__` frame of the hierarchy (a child's
`super().__init__(lr=lr)` included, the outermost values winning), a second call adds to the
first, `ignore=` removes names saved earlier too. Many class shapes are generated from one seed,
each written once on Lightning's base class and once on ours; `hparams` (items in order) and
`hparams_initial` must be equal, and `load_from_checkpoint` must rebuild the same module.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import random
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer

pl = pytest.importorskip("lightning.pytorch")

POOL = ("lr", "hidden", "depth", "drop", "name", "width")


def _level(rng: random.Random, index: int, parent: dict[str, Any] | None) -> dict[str, Any]:
    """One class of the hierarchy: its parameters, how it calls its parent, what it saves."""
    names = rng.sample(POOL, rng.randint(0, 3))
    if parent is not None and parent["params"] and rng.random() < 0.6:  # re-declare a parent's name (lr=lr)
        shared = rng.choice(parent["params"])
        if shared not in names:
            names.append(shared)
    level: dict[str, Any] = {
        "index": index,
        "params": names,
        "defaults": {n: (index * 10 + k) if n != "name" else f"n{index}{k}" for k, n in enumerate(names)},
        "kwonly": rng.random() < 0.25 and len(names) > 1,
        "star": rng.random() < 0.2,
        "kwargs": rng.random() < 0.3,
        "explicit": parent is not None and rng.random() < 0.15,  # Parent.__init__(self, ...): no __class__ cell
        "reassign": rng.choice(names) if names and rng.random() < 0.2 else None,
    }
    save = rng.random()
    if save < 0.35:
        level["save"] = ""
    elif save < 0.5 and names:
        level["save"] = ", ".join(repr(n) for n in rng.sample(names, rng.randint(1, len(names))))
    elif save < 0.65:
        known = names + (parent["all"] if parent else [])
        if known:
            level["save"] = f"ignore={rng.sample(known, rng.randint(1, min(2, len(known))))!r}"
    level["all"] = sorted(set(names) | set(parent["all"] if parent else []))
    return level


def _source(levels: list[dict[str, Any]]) -> str:
    lines = []
    for level in levels:
        i, params = level["index"], level["params"]
        parent = levels[i - 1] if i else None
        signature = ["self"]
        for k, name in enumerate(params):
            if level["kwonly"] and k == len(params) - 1:
                signature.append("*args" if level["star"] else "*")
            signature.append(f"{name}={level['defaults'][name]!r}")
        if level["star"] and not level["kwonly"]:
            signature.append("*args")
        if level["kwargs"]:
            signature.append("**kwargs")
        body = []
        if level["reassign"]:
            body.append(f"{level['reassign']} = {level['reassign']}")  # placeholder, changed below
        if parent is None:
            call = "super().__init__()"
        else:
            passed = [f"{n}={n}" if n in params else f"{n}={parent['defaults'][n]!r}"
                      for n in parent["params"] if n in params or (i + len(n)) % 2]
            if parent["kwargs"] and level["kwargs"]:
                passed.append("**kwargs")
            call = (f"Level{i - 1}.__init__(self, {', '.join(passed)})" if level["explicit"]
                    else f"super().__init__({', '.join(passed)})")
        body.append(call)
        if level["reassign"]:
            body[0] = f"{level['reassign']} = {level['defaults'][level['reassign']]!r} * 2"
        if "save" in level:
            body.append(f"self.save_hyperparameters({level['save']})")
        base = "Base" if parent is None else f"Level{i - 1}"
        lines.append(f"class Level{i}({base}):\n    def __init__({', '.join(signature)}):\n"
                     + "".join(f"        {line}\n" for line in body))
    return "\n".join(lines)


def _build(source: str, base: type) -> dict[str, Any]:
    namespace: dict[str, Any] = {"Base": base}
    exec(compile(source, "<hierarchy>", "exec"), namespace)
    return namespace


def _call(rng: random.Random, leaf: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    args: list[Any] = []
    kwargs = {n: f"v{n}" for n in leaf["params"] if rng.random() < 0.5}
    if leaf["star"] and rng.random() < 0.5:  # positional values for the positional names, then extras
        positional = leaf["params"][:-1] if leaf["kwonly"] else leaf["params"]
        args = [kwargs.pop(n, f"p{n}") for n in positional] + ["extra"]
    if leaf["kwargs"]:
        kwargs["free"] = rng.randint(0, 9)
    return args, kwargs


def _hierarchies(count: int, seed: int = 0) -> list[tuple[str, list[Any], dict[str, Any], bool]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        levels: list[dict[str, Any]] = []
        for index in range(rng.randint(1, 4)):
            levels.append(_level(rng, index, levels[-1] if levels else None))
        args, kwargs = _call(rng, levels[-1])
        cases.append((_source(levels), args, kwargs, any("save" in level for level in levels)))
    return cases


def _construct(source: str, base: type, args: list[Any], kwargs: dict[str, Any]) -> Any:
    classes = _build(source, base)
    leaf = max((k for k in classes if k.startswith("Level")), key=lambda k: int(k[5:]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return classes[leaf](*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - both frameworks must fail alike
            return error


@pytest.mark.parametrize("chunk", range(4))
def test_generated_hierarchies_save_lightnings_hparams(chunk: int) -> None:
    """150 hierarchies of 1-4 levels: keyword and keyword-only arguments, *args, **kwargs passed
    through, a parent called by name, a local reassigned before the call, names and `ignore=`."""
    compared = 0
    for source, args, kwargs, saves in _hierarchies(150)[chunk::4]:
        theirs = _construct(source, pl.LightningModule, args, kwargs)
        ours = _construct(source, trainer.LightningModule, args, kwargs)
        if isinstance(theirs, Exception):
            assert isinstance(ours, Exception), f"{source}\nLightning: {theirs!r}; ours built"
            continue
        assert not isinstance(ours, Exception), f"{source}\n{ours!r}"
        if not saves:  # no call: Lightning keeps {}, ours captures the outermost __init__ (docs/lightning.md)
            assert dict(theirs.hparams) == {}
            continue
        compared += 1
        assert list(ours.hparams.items()) == list(theirs.hparams.items()), source
        assert dict(ours.hparams_initial) == dict(theirs.hparams_initial), source
    assert compared > 10


def _pair(source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _build(textwrap.dedent(source), pl.LightningModule), _build(textwrap.dedent(source), trainer.LightningModule)


def test_child_of_a_base_that_saves(tmp_path: Path) -> None:
    """The issue's example: Base saves, Child passes lr up; Child saves again (adds)."""
    theirs, ours = _pair("""
        class Parent(Base):
            def __init__(self, lr=0.05):
                super().__init__()
                self.save_hyperparameters()
                self.layer = torch.nn.Linear(2, 2)

        class Child(Parent):
            def __init__(self, hidden=8, lr=0.01):
                super().__init__(lr=lr)

        class Again(Parent):
            def __init__(self, hidden=8, lr=0.01, tag="a"):
                super().__init__(lr=lr)
                self.save_hyperparameters("tag")
        """.replace("torch.nn", "__import__('torch').nn"))
    for name, kwargs in (("Child", {"hidden": 4}), ("Again", {"tag": "b"})):
        expected = theirs[name](**kwargs).hparams
        assert list(ours[name](**kwargs).hparams.items()) == list(expected.items())
    assert dict(ours["Child"](hidden=4).hparams) == {"lr": 0.01, "hidden": 4}


def test_a_module_given_another_module_saves_it_as_lightning() -> None:
    """The SWA shape: a subclass taking a trained model calls save_hyperparameters("lr") after
    its parent's save_hyperparameters(): Lightning keeps the model as a hyperparameter too."""
    theirs, ours = _pair("""
        class Resnet(Base):
            def __init__(self, lr=0.05):
                super().__init__()
                self.save_hyperparameters()

        class SWA(Resnet):
            def __init__(self, trained_model, lr=0.01):
                super().__init__()
                self.save_hyperparameters("lr")
                self.model = trained_model
        """)
    model = torch.nn.Linear(2, 2)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        expected = theirs["SWA"](model, lr=0.01).hparams
    with pytest.warns(UserWarning, match="trained_model"):
        got = ours["SWA"](model, lr=0.01).hparams
    assert list(got) == list(expected) == ["lr", "trained_model"]
    assert got["trained_model"] is expected["trained_model"] is model and got["lr"] == expected["lr"] == 0.01


def test_ignore_drops_what_a_parent_saved_and_a_module_built_inside_another() -> None:
    theirs, ours = _pair("""
        class Parent(Base):
            def __init__(self, net=None, lr=0.05):
                super().__init__()
                self.save_hyperparameters()

        class Child(Parent):
            def __init__(self, net=None, lr=0.01, depth=2):
                super().__init__(net, lr)
                self.save_hyperparameters(ignore=["net"])

        class Inner(Base):
            def __init__(self, width=3):
                super().__init__()
                self.save_hyperparameters()

        class Outer(Base):
            def __init__(self, depth=4, **kwargs):
                super().__init__()
                self.inner = Inner(width=5)
        """)
    assert list(ours["Child"](net="x").hparams.items()) == list(theirs["Child"](net="x").hparams.items())
    assert "net" not in ours["Child"](net="x").hparams
    inner_theirs, inner_ours = theirs["Outer"](extra=1).inner, ours["Outer"](extra=1).inner
    assert list(inner_ours.hparams.items()) == list(inner_theirs.hparams.items())  # Lightning adds the outer's


def test_dict_namespace_dataclass_and_frame() -> None:
    theirs, ours = _pair("""
        import argparse, dataclasses, inspect

        class FromDict(Base):
            def __init__(self, config, seed=1):
                super().__init__()
                self.save_hyperparameters(config)

        class FromNamespace(FromDict):
            def __init__(self, config, seed=2):
                super().__init__(config, seed)
                self.save_hyperparameters(argparse.Namespace(extra=3))

        @dataclasses.dataclass(eq=False)
        class Fields(Base):
            lr: float = 0.1
            depth: int = 2
            def __post_init__(self):
                super().__init__()
                self.save_hyperparameters()

        def helper(module):
            module.save_hyperparameters(frame=inspect.currentframe().f_back)

        class ByFrame(Base):
            def __init__(self, lr=0.3, name="f"):
                super().__init__()
                helper(self)
        """)
    cases = [("FromDict", ({"a": 1, "b": [2]},), {}), ("FromNamespace", ({"a": 1},), {}),
             ("Fields", (), {"lr": 0.5}), ("ByFrame", (), {"name": "g"})]
    for name, args, kwargs in cases:
        expected = theirs[name](*args, **kwargs)
        got = ours[name](*args, **kwargs)
        assert list(got.hparams.items()) == list(expected.hparams.items()), name
        assert getattr(got, "_hparams_name", None) == getattr(expected, "_hparams_name", None), name


def test_datamodule_chain() -> None:
    source = """
        class Data(Base):
            def __init__(self, batch_size=4, root="x"):
                super().__init__()
                self.save_hyperparameters()

        class Folds(Data):
            def __init__(self, fold=0, batch_size=8):
                super().__init__(batch_size=batch_size)
        """
    theirs = _build(textwrap.dedent(source), pl.LightningDataModule)
    ours = _build(textwrap.dedent(source), trainer.LightningDataModule)
    assert list(ours["Folds"](fold=3).hparams.items()) == list(theirs["Folds"](fold=3).hparams.items())
    assert dict(ours["Folds"](fold=3).hparams) == {"batch_size": 8, "root": "x", "fold": 3}


class _Parent(trainer.LightningModule):
    def __init__(self, lr: float = 0.05, width: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, width)


class _Child(_Parent):
    def __init__(self, depth: int = 1, lr: float = 0.01, width: int = 3) -> None:
        super().__init__(lr=lr, width=width)  # no save_hyperparameters of its own: the parent's collects depth
        self.extra = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))


def test_load_from_checkpoint_rebuilds_the_child(tmp_path: Path) -> None:
    model = _Child(depth=3, width=5)
    assert dict(model.hparams) == {"lr": 0.01, "width": 5, "depth": 3}
    fit = trainer.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    model.training_step = lambda batch, i: model.extra[-1](model.layer(batch[0])).sum()  # type: ignore[method-assign]
    model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.1)  # type: ignore[method-assign]
    fit.fit(model, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2))
    fit.save_checkpoint(tmp_path / "child.ckpt")
    loaded = _Child.load_from_checkpoint(tmp_path / "child.ckpt")
    assert dict(loaded.hparams) == dict(model.hparams) and len(loaded.extra) == 3
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True))


def test_the_generator_covers_the_forms() -> None:
    """The generated shapes include every form the test claims (so a change to the generator
    that drops one shows here)."""
    sources = "\n".join(source for source, *_ in _hierarchies(150))
    for form in ("**kwargs", "*args", ", *, ", "ignore=", "Level0.__init__(self", "* 2", "self.save_hyperparameters('"):
        assert form in sources, form
    assert inspect and argparse and dataclasses  # imported for the sources above
