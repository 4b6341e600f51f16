"""Loaders as Lightning's own tests specify them (tests_pytorch/trainer/test_dataloaders.py), each
scenario run under Lightning and here, with only the imports changed, and compared: several
validation and test loaders (their batch counts under int and fraction limits, what `validate`/
`test` return for each, with `ckpt_path="best"` or a path), loaders without a length, several
training loaders in a `CombinedLoader`, the `dataloader_idx` each hook and step receives,
loaders that are not `DataLoader`s, and the limits refused. When the loader hooks are called:
test_lightning_spec_dataloader_reload.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
from trainer import Callback, Trainer
from trainer.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset, RandomIterableDatasetWithLen
from trainer.utilities.combined_loader import CombinedLoader

QUIET = dict(enable_progress_bar=False, enable_model_summary=False)


from tests.helpers.lightning_spec import weights, plain


class MultiEval(BoringModel):
    def val_dataloader(self):
        return [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 16), batch_size=4)]

    def test_dataloader(self):
        return [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 16), batch_size=4)]

    def validation_step(self, batch, batch_idx, dataloader_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("val_x", out["x"])
        return out

    def test_step(self, batch, batch_idx, dataloader_idx):
        out = super().test_step(batch, batch_idx)
        self.log("test_y", out["y"])
        return out


def multi_eval(root, ckpt_path):
    """Lightning: test_multiple_eval_dataloader, test_dataloaders_with_limit_percent_batches."""
    torch.manual_seed(0)
    model = MultiEval()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=0.5,
                      limit_test_batches=0.3, logger=False, **QUIET)
    trainer.fit(model)
    out = {"num_training_batches": trainer.num_training_batches, "num_val_batches": list(trainer.num_val_batches),
           "n_val_loaders": len(trainer.val_dataloaders), "weights": weights(model)}
    path = trainer.checkpoint_callback.best_model_path if ckpt_path == "specific" else ckpt_path
    out["validate"] = plain(trainer.validate(ckpt_path=path, verbose=False))
    out["num_val_batches_validate"] = list(trainer.num_val_batches)
    out["test"] = plain(trainer.test(ckpt_path=path, verbose=False))
    out["num_test_batches"] = list(trainer.num_test_batches)
    out["n_test_loaders"] = len(trainer.test_dataloaders)
    return out


def passed_to_fn(root, n):
    """Lightning: test_dataloaders_passed_to_fn, test_mixing_of_dataloader_options."""
    torch.manual_seed(0)
    train = DataLoader(RandomDataset(32, 16), batch_size=2)
    if n == 1:
        model = BoringModel()
        evals = DataLoader(RandomDataset(32, 12), batch_size=3)
    else:
        model = MultiEval()
        evals = [DataLoader(RandomDataset(32, 12), batch_size=3), DataLoader(RandomDataset(32, 8), batch_size=4)]
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_val_batches=0.5, limit_train_batches=0.5,
                      logger=False, **QUIET)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=evals)
    out = {"val_is_given": trainer.val_dataloaders is evals, "train_is_given": trainer.train_dataloader is train,
           "num_training_batches": trainer.num_training_batches, "num_val_batches": list(trainer.num_val_batches)}
    out["test"] = plain(trainer.test(dataloaders=evals, ckpt_path="best", verbose=False))
    out["test_is_given"] = trainer.test_dataloaders is evals
    out["validate"] = plain(trainer.validate(dataloaders=evals, ckpt_path="best", verbose=False))
    out["num_val_batches_validate"] = list(trainer.num_val_batches)
    return out


class Counter(Callback):
    def __init__(self):
        self.counts = {}

    def _count(self, name):
        self.counts[name] = self.counts.get(name, 0) + 1

    def on_train_batch_start(self, *_):
        self._count("train_batch")

    def on_train_epoch_start(self, *_):
        self._count("train_epoch")

    def on_validation_batch_start(self, *_):
        self._count("val_batch")

    def on_validation_epoch_start(self, *_):
        self._count("val_epoch")

    def on_test_batch_start(self, *_):
        self._count("test_batch")

    def on_test_epoch_start(self, *_):
        self._count("test_epoch")


class DummyModel(BoringModel):
    def training_step(self, batch, batch_idx):
        self.log("loss", self.global_step)
        return super().training_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        self.log("val_log", self.current_epoch)


def limits_by_dataset(root, kind, limit):
    """Lightning: test_inf_dataloaders_with_limit_percent_batches, test_dataloaders_with_limit_train_batches,
    test_dataloaders_with_limit_val_batches, test_datasets_dataloaders_with_limit_num_batches."""
    torch.manual_seed(0)
    dataset = {"map": RandomDataset, "iterable": RandomIterableDataset,
               "iterable_len": RandomIterableDatasetWithLen}[kind](32, 24)
    counter = Counter()
    trainer = Trainer(default_root_dir=root, num_sanity_val_steps=0, max_epochs=2, callbacks=[counter],
                      limit_train_batches=limit, limit_val_batches=limit, limit_test_batches=limit, logger=False,
                      enable_checkpointing=False, **QUIET)
    model = DummyModel()
    loaders = [DataLoader(dataset, batch_size=4) for _ in range(3)]
    trainer.fit(model, train_dataloaders=loaders[0], val_dataloaders=loaders[1])
    out = {"num_training_batches": trainer.num_training_batches, "num_val_batches": list(trainer.num_val_batches)}
    trainer.test(model, dataloaders=loaders[2], verbose=False)
    out.update(num_test_batches=list(trainer.num_test_batches), counts=counter.counts, weights=weights(model),
               metrics=sorted(trainer.callback_metrics))
    return out


def fast_dev_run_multi(root, fast_dev_run):
    """Lightning: test_dataloaders_with_fast_dev_run."""
    torch.manual_seed(0)
    model = MultiEval()
    trainer = Trainer(default_root_dir=root, max_epochs=2, fast_dev_run=fast_dev_run, **QUIET)
    out = {"limits": [trainer.limit_train_batches, trainer.limit_val_batches, trainer.limit_test_batches],
           "fast_dev_run": trainer.fast_dev_run, "sanity": trainer.num_sanity_val_steps, "max_epochs": trainer.max_epochs}
    trainer.fit(model)
    out.update(num_training_batches=trainer.num_training_batches, num_val_batches=list(trainer.num_val_batches))
    trainer.test(model, verbose=False)
    out["num_test_batches"] = list(trainer.num_test_batches)
    return out


def empty_epochs(root, yield_at_all):
    """Lightning: test_iterable_dataset_stop_iteration_at_epoch_beginning."""

    class TestDataset(IterableDataset):
        def __init__(self, gen):
            self.gen = gen

        def __iter__(self):
            return iter(self.gen())

    class TestModel(BoringModel):
        def gen(self):
            if yield_at_all and self.current_epoch == 0:
                yield torch.rand(32)
                yield torch.rand(32)
                yield torch.rand(32)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, logger=False, max_epochs=2, enable_checkpointing=False, **QUIET)
    trainer.fit(model, train_dataloaders=DataLoader(TestDataset(model.gen), batch_size=2))
    return {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch, "weights": weights(model)}


def multiple_train_loaders(root, mode):
    """Lightning: test_fit_multiple_train_loaders."""
    seen = []

    class Model(BoringModel):
        def train_dataloader(self):
            a_b = [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 4))]
            c_d_e = [DataLoader(RandomDataset(32, 4)) for _ in range(3)]
            return CombinedLoader({"a_b": a_b, "c_d_e": c_d_e}, mode)

        def training_step(self, batch, batch_idx):
            seen.append((len(batch), len(batch["a_b"]), len(batch["c_d_e"]),
                         [b is None for b in batch["a_b"] + batch["c_d_e"]]))
            return super().training_step(batch["a_b"][0], batch_idx)

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(max_epochs=1, default_root_dir=root, logger=False, enable_checkpointing=False,
                      limit_val_batches=1, **QUIET)
    try:
        trainer.fit(model)
    except ValueError as err:
        return {"error": type(err).__name__}
    return {"num_training_batches": trainer.num_training_batches, "seen": seen, "weights": weights(model)}


def reset_and_attach(root):
    """Lightning: test_dataloaders_reset_and_attach."""
    sets = [RandomDataset(32, 8) for _ in range(4)]
    loaders = [DataLoader(s) for s in sets]
    model = BoringModel()
    trainer = Trainer(default_root_dir=root, max_steps=1, limit_val_batches=1, limit_test_batches=1,
                      limit_predict_batches=1, logger=False, enable_checkpointing=False, **QUIET)
    seen = []
    trainer.fit(model, train_dataloaders=loaders[0], val_dataloaders=loaders[1])
    seen.append(sets.index(trainer.train_dataloader.dataset))
    seen.append(sets.index(trainer.val_dataloaders.dataset))
    trainer.fit(model, train_dataloaders=loaders[2], val_dataloaders=loaders[3])
    seen += [sets.index(trainer.train_dataloader.dataset), sets.index(trainer.val_dataloaders.dataset)]
    for fn, attr in (("validate", "val_dataloaders"), ("test", "test_dataloaders"),
                     ("predict", "predict_dataloaders")):
        for i in (0, 1):
            getattr(trainer, fn)(model, dataloaders=loaders[i])
            seen.append((fn, sets.index(getattr(trainer, attr).dataset)))
    return {"seen": seen, "global_step": trainer.global_step}


def dataloader_idx_in_hooks(root, mode):
    """Lightning: test_correct_dataloader_idx_in_hooks."""
    seen = []

    class Model(BoringModel):
        def stage(self):
            t = self.trainer
            return "train" if t.training else "val" if t.validating else "test" if t.testing else "predict"

        def on_before_batch_transfer(self, batch, dataloader_idx):
            seen.append((self.stage(), "before", dataloader_idx))
            return super().on_before_batch_transfer(batch, dataloader_idx)

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            seen.append((self.stage(), "transfer", dataloader_idx))
            return super().transfer_batch_to_device(batch, device, dataloader_idx)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            seen.append((self.stage(), "after", dataloader_idx))
            return super().on_after_batch_transfer(batch, dataloader_idx)

        def training_step(self, batch, batch_idx):
            return super().training_step(batch["a"], batch_idx)

        def validation_step(self, batch, batch_idx, dataloader_idx):
            seen.append(("val", "step", dataloader_idx, batch_idx))
            out = super().validation_step(batch, batch_idx)
            self.log("val_loss", out["x"])
            return out

        def test_step(self, batch, batch_idx, dataloader_idx):
            seen.append(("test", "step", dataloader_idx, batch_idx))
            out = super().test_step(batch, batch_idx)
            self.log("test_loss", out["y"])
            return out

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            seen.append(("predict", "step", dataloader_idx, batch_idx))
            return super().predict_step(batch, batch_idx, dataloader_idx)

        def train_dataloader(self):
            return CombinedLoader({"a": DataLoader(RandomDataset(32, 8)), "b": DataLoader(RandomDataset(32, 6))},
                                  mode=mode)

        def val_dataloader(self):
            return [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 8))]

        test_dataloader = val_dataloader
        predict_dataloader = val_dataloader

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, fast_dev_run=3, **QUIET)
    trainer.fit(model)
    val = trainer.validate(model, verbose=False)
    test = trainer.test(model, verbose=False)
    preds = trainer.predict(model)
    return {"seen": seen, "val": plain(val), "test": plain(test), "preds": [[p.tolist() for p in ps] for ps in preds],
            "weights": weights(model)}


class LoaderWrapper:
    def __init__(self, loader):
        self.loader = loader
        self._iter = iter(self.loader)

    def __iter__(self):
        self._iter = iter(self.loader)
        return self._iter

    def __next__(self):
        return next(self._iter)


def wrapped_loaders(root):
    """Lightning: test_request_dataloader, test_train_dataloader_not_implemented_error."""
    seen = []

    class Model(BoringModel):
        def train_dataloader(self):
            return LoaderWrapper(super().train_dataloader())

        def val_dataloader(self):
            return LoaderWrapper(super().val_dataloader())

        def on_train_batch_start(self, batch, batch_idx):
            seen.append(("train", isinstance(self.trainer.train_dataloader, LoaderWrapper), batch_idx))

        def on_validation_batch_start(self, *_):
            seen.append(("val", isinstance(self.trainer.val_dataloaders, LoaderWrapper)))

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2,
                      max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    trainer.test(model, verbose=False)
    return {"seen": seen, "weights": weights(model), "num_training_batches": trainer.num_training_batches}


def overfit_random_samplers(root, num_loaders):
    """Lightning: test_multiple_dataloaders_with_random_sampler_overfit_batches."""
    seen = []

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            seen.append([type(dl.sampler).__name__ for dl in self.trainer.train_dataloader])
            return super().training_step(batch[0], batch_idx)

        def _loader(self):
            ds = RandomDataset(32, 6)
            return DataLoader(ds, sampler=RandomSampler(ds))

        def train_dataloader(self):
            return [self._loader() for _ in range(num_loaders)]

        validation_step = None

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, overfit_batches=1.0, max_epochs=1, logger=False,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {"seen": seen, "weights": weights(model)}


def refused(root):
    """Lightning: test_dataloader_config_errors_init, test_dataloader_config_errors_runtime,
    test_dataloaders_load_every_n_epochs_exception."""
    out = {}
    for key, value in [("limit_train_batches", -0.1), ("limit_train_batches", 1.2), ("limit_val_batches", -0.1),
                       ("limit_val_batches", 1.2), ("limit_test_batches", 1.2), ("val_check_interval", -0.1),
                       ("val_check_interval", 1.2), ("overfit_batches", -0.1), ("overfit_batches", 1.2),
                       ("reload_dataloaders_every_n_epochs", -1)]:
        try:
            Trainer(default_root_dir=root, max_epochs=1, **{key: value})
            out[f"{key}={value}"] = None
        except Exception:
            out[f"{key}={value}"] = "error"
    trainer = Trainer(default_root_dir=root, max_epochs=1, val_check_interval=10000, logger=False, **QUIET)
    try:
        trainer.fit(BoringModel())
        out["val_check_interval=10000"] = None
    except Exception:
        out["val_check_interval=10000"] = "error"
    return out


class InfLoader:
    def __init__(self, dataloader):
        self.dataloader = dataloader
        self.iter = iter(dataloader)
        self.count = 0

    def __iter__(self):
        self.count = 0
        return self

    def __next__(self):
        if self.count >= 5:
            raise StopIteration
        self.count = self.count + 1
        try:
            return next(self.iter)
        except StopIteration:
            self.iter = iter(self.dataloader)
            return next(self.iter)


class NotImplementedLenLoader(InfLoader):
    def __len__(self):
        raise NotImplementedError


def no_len_loaders(root, wrapper, check_interval):
    """Lightning: test_train_dataloader_not_implemented_error."""
    wrap = {"inf": InfLoader, "not_implemented": NotImplementedLenLoader}[wrapper]
    counter = Counter()

    class Model(BoringModel):
        def train_dataloader(self):
            return wrap(DataLoader(RandomDataset(32, 64)))

        def val_dataloader(self):
            return wrap(DataLoader(RandomDataset(32, 64)))

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, max_steps=8, max_epochs=3, val_check_interval=check_interval,
                      callbacks=[counter], logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {"counts": counter.counts, "global_step": trainer.global_step, "weights": weights(model)}


def partial_limit_no_len(root, stage, wrapper):
    """Lightning: test_inf_dataloader_raise_error_with_partial_batch_limits."""
    wrap = {"inf": InfLoader, "not_implemented": NotImplementedLenLoader}[wrapper]
    model = BoringModel()
    prefix = {"fit": "train", "validate": "val", "test": "test", "predict": "predict"}[stage]
    setattr(model, f"{prefix}_dataloader", lambda: wrap(DataLoader(RandomDataset(32, 64))))
    trainer = Trainer(default_root_dir=root, max_epochs=1, logger=False, **{f"limit_{prefix}_batches": 0.5}, **QUIET)
    try:
        getattr(trainer, stage)(model)
    except Exception:
        return "error"
    return None
'''

SPEC = Spec(SOURCE, "spec_dataloaders")


def test_several_eval_loaders(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("multi_eval", tmp_path, ckpt_path="specific")
    assert ours == theirs


def test_loaders_passed_to_fit_test_validate(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("passed_to_fn", tmp_path, n=2)
    assert ours == theirs


@pytest.mark.parametrize("kind,limit", [("iterable", 3), ("iterable", 1.0)])
def test_limits_by_dataset_kind(kind: str, limit: float, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("limits_by_dataset", tmp_path, kind=kind, limit=limit)
    assert ours == theirs


@pytest.mark.parametrize("fast_dev_run", [True, 3])
def test_fast_dev_run_several_loaders(fast_dev_run: object, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("fast_dev_run_multi", tmp_path, fast_dev_run=fast_dev_run)
    assert ours == theirs


def test_an_epoch_without_batches(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("empty_epochs", tmp_path, yield_at_all=True)
    assert ours == theirs


@pytest.mark.parametrize("mode", ["min_size", "max_size_cycle", "max_size", "sequential"])
def test_several_train_loaders(mode: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("multiple_train_loaders", tmp_path, mode=mode)
    assert ours == theirs


def test_loaders_replaced_by_each_call(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reset_and_attach", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("mode", ["min_size", "max_size_cycle"])
def test_dataloader_idx_in_hooks(mode: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("dataloader_idx_in_hooks", tmp_path, mode=mode)
    assert ours == theirs


def test_loaders_that_are_not_dataloaders(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("wrapped_loaders", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("num_loaders", [1, 2])
def test_overfit_batches_with_random_samplers(num_loaders: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("overfit_random_samplers", tmp_path, num_loaders=num_loaders)
    assert ours == theirs


def test_refused_limits(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("refused", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("wrapper", ["inf", "not_implemented"])
@pytest.mark.parametrize("check_interval", [3, 1.0])
def test_loaders_without_len(wrapper: str, check_interval: float, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("no_len_loaders", tmp_path, wrapper=wrapper, check_interval=check_interval)
    assert ours == theirs


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_fraction_limit_on_loader_without_len(stage: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("partial_limit_no_len", tmp_path, stage=stage, wrapper="inf")
    assert ours == theirs == "error"
