"""Lightning Bolts' debugging callbacks (pl_bolts/callbacks/data_monitor.py: `ModuleDataMonitor`,
`TrainingDataMonitor`; pl_bolts/callbacks/verification: `BatchGradientVerificationCallback`)
on a small module with a BatchNorm layer and an `example_input_array`, copied as written
(docstrings left out), with a `TensorBoardLogger` whose histograms the test reads back.

What Lightning 2.6 itself refuses was changed the minimal way, for both frameworks:
Lightning 2 no longer has the `utilities.apply_func` module bolts imports, so `apply_to_collection`
is a few lines here (the cases bolts' calls need: tensors and arrays in lists, tuples and
dicts) rather than an import from Lightning's utility package. Substituted:
`is_param_in_hook_signature` (a Lightning internal) is `inspect` inline; W&B is not
installed, so the W&B branch never runs (as in bolts without it). Shrunk: 40 random rows of
6 features, two epochs."""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from copy import deepcopy
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Type, Union

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Module
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.hooks import RemovableHandle

from trainer import Callback, LightningModule, Trainer, seed_everything
from trainer.loggers import Logger, TensorBoardLogger, WandbLogger
from trainer.utilities import move_data_to_device, rank_zero_warn
from trainer.utilities.exceptions import MisconfigurationException

_WANDB_AVAILABLE = False


def apply_to_collection(data: Any, dtype: type, function: Callable) -> Any:
    """`function` applied to every `dtype` leaf of nested lists, tuples and dicts (Lightning's helper, reduced)."""
    if isinstance(data, dtype):
        return function(data)
    if isinstance(data, dict):
        return {key: apply_to_collection(value, dtype, function) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_collection(item, dtype, function) for item in data)
    return data


# ---------------------------------------------------------------- pl_bolts/callbacks/data_monitor.py
class DataMonitorBase(Callback):
    supported_loggers = (TensorBoardLogger, WandbLogger)

    def __init__(self, log_every_n_steps: int = None) -> None:  # type: ignore[assignment]
        super().__init__()
        self._log_every_n_steps: Optional[int] = log_every_n_steps
        self._log = False
        self._trainer: Trainer
        self._train_batch_idx: int

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._log = self._is_logger_available(trainer.logger)
        self._log_every_n_steps = self._log_every_n_steps or trainer.log_every_n_steps
        self._trainer = trainer

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, unused: Optional[int] = 0) -> None:
        self._train_batch_idx = batch_idx

    def log_histograms(self, batch: Any, group: str = "") -> None:
        if not self._log or (self._train_batch_idx + 1) % self._log_every_n_steps != 0:  # type: ignore[operator]
            return
        batch = apply_to_collection(batch, dtype=np.ndarray, function=torch.from_numpy)
        named_tensors: Dict[str, Tensor] = {}
        collect_and_name_tensors(batch, output=named_tensors, parent_name=group)
        for name, tensor in named_tensors.items():
            self.log_histogram(tensor, name)

    def log_histogram(self, tensor: Tensor, name: str) -> None:
        logger = self._trainer.logger
        tensor = tensor.detach().cpu()
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_histogram(tag=name, values=tensor, global_step=self._trainer.global_step)
        if isinstance(logger, WandbLogger):
            if not _WANDB_AVAILABLE:  # pragma: no cover
                raise ModuleNotFoundError("You want to use `wandb` which is not installed yet.")

    def _is_logger_available(self, logger: Logger) -> bool:
        available = True
        if not logger:
            rank_zero_warn("Cannot log histograms because Trainer has no logger.")
            available = False
        if not isinstance(logger, self.supported_loggers):
            rank_zero_warn(
                f"{self.__class__.__name__} does not support logging with {logger.__class__.__name__}."
                f" Supported loggers are: {', '.join(str(x.__name__) for x in self.supported_loggers)}"
            )
            available = False
        return available


class ModuleDataMonitor(DataMonitorBase):
    GROUP_NAME_INPUT = "input"
    GROUP_NAME_OUTPUT = "output"

    def __init__(self, submodules: Optional[Union[bool, List[str]]] = None, log_every_n_steps: int = None) -> None:  # type: ignore[assignment]
        super().__init__(log_every_n_steps=log_every_n_steps)
        self._submodule_names = submodules
        self._hook_handles: List = []

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        submodule_dict = dict(pl_module.named_modules())
        self._hook_handles = []
        for name in self._get_submodule_names(pl_module):
            if name not in submodule_dict:
                rank_zero_warn(f"{name} is not a valid identifier for a submodule in {pl_module.__class__.__name__}, skipping this key.")
                continue
            handle = self._register_hook(name, submodule_dict[name])
            self._hook_handles.append(handle)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for handle in self._hook_handles:
            handle.remove()

    def _get_submodule_names(self, root_module: nn.Module) -> List[str]:
        names = [""]
        if isinstance(self._submodule_names, list):
            names = self._submodule_names
        if self._submodule_names is True:
            names = [name for name, _ in root_module.named_modules()]
        return names

    def _register_hook(self, module_name: str, module: nn.Module) -> RemovableHandle:
        input_group_name = f"{self.GROUP_NAME_INPUT}/{module_name}" if module_name else self.GROUP_NAME_INPUT
        output_group_name = f"{self.GROUP_NAME_OUTPUT}/{module_name}" if module_name else self.GROUP_NAME_OUTPUT

        def hook(_: Module, inp: Sequence, out: Sequence) -> None:
            inp = inp[0] if len(inp) == 1 else inp
            self.log_histograms(inp, group=input_group_name)
            self.log_histograms(out, group=output_group_name)

        return module.register_forward_hook(hook)


class TrainingDataMonitor(DataMonitorBase):
    GROUP_NAME = "training_step"

    def __init__(self, log_every_n_steps: int = None) -> None:  # type: ignore[assignment]
        super().__init__(log_every_n_steps=log_every_n_steps)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, unused: Optional[int] = 0) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx, unused)
        self.log_histograms(batch, group=self.GROUP_NAME)


def collect_and_name_tensors(data: Any, output: Dict[str, Tensor], parent_name: str = "input") -> None:
    assert isinstance(output, dict)
    if isinstance(data, Tensor):
        name = f"{parent_name}/{shape2str(data)}"
        output[name] = data
    if isinstance(data, dict):
        for k, v in data.items():
            collect_and_name_tensors(v, output, parent_name=f"{parent_name}/{k}")
    if isinstance(data, Sequence) and not isinstance(data, str):
        for i, item in enumerate(data):
            collect_and_name_tensors(item, output, parent_name=f"{parent_name}/{i:d}")


def shape2str(tensor: Tensor) -> str:
    return "[" + ", ".join(map(str, tensor.shape)) + "]"


# ---------------------------------------------------------------- pl_bolts/callbacks/verification
class VerificationBase:
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def _get_input_array_copy(self, input_array: Optional[Any] = None) -> Any:
        if input_array is None and isinstance(self.model, LightningModule):
            input_array = self.model.example_input_array
        input_array = deepcopy(input_array)
        if isinstance(self.model, LightningModule):
            kwargs = {}
            if "dataloader_idx" in inspect.signature(self.model.transfer_batch_to_device).parameters:  # was is_param_in_hook_signature
                kwargs["dataloader_idx"] = 0
            input_array = self.model.transfer_batch_to_device(input_array, self.model.device, **kwargs)
        else:
            input_array = move_data_to_device(input_array, device=next(self.model.parameters()).device)
        return input_array

    def _model_forward(self, input_array: Any) -> Any:
        if isinstance(input_array, tuple):
            return self.model(*input_array)
        if isinstance(input_array, dict):
            return self.model(**input_array)
        return self.model(input_array)


class VerificationCallbackBase(Callback):
    def __init__(self, warn: bool = True, error: bool = False) -> None:
        self._raise_warning = warn
        self._raise_error = error

    def message(self, *args: Any, **kwargs: Any) -> str:
        return ""

    def _raise(self, *args: Any, **kwargs: Any) -> None:
        if self._raise_error:
            raise RuntimeError(self.message(*args, **kwargs))
        if self._raise_warning:
            rank_zero_warn(self.message(*args, **kwargs))


class BatchGradientVerification(VerificationBase):
    NORM_LAYER_CLASSES = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm, torch.nn.GroupNorm)

    def check(self, input_array: Any, input_mapping: Optional[Callable] = None, output_mapping: Optional[Callable] = None, sample_idx: int = 0) -> bool:
        input_mapping = input_mapping or default_input_mapping
        output_mapping = output_mapping or default_output_mapping
        input_array = self._get_input_array_copy(input_array)
        input_batches = input_mapping(input_array)
        if input_batches[0].size(0) < 2:
            raise MisconfigurationException("Batch size must be greater than 1 to run verification.")
        for input_batch in input_batches:
            input_batch.requires_grad = True
        self.model.zero_grad()
        with selective_eval(self.model, self.NORM_LAYER_CLASSES):
            output = self._model_forward(input_array)
        # backward on the i-th sample should lead to gradient only in i-th input slice
        output_mapping(output)[sample_idx].sum().backward()
        zero_grad_inds = list(range(len(input_batches[0])))
        zero_grad_inds.pop(sample_idx)
        has_grad_outside_sample = [input_batch.grad[zero_grad_inds].abs().sum().item() for input_batch in input_batches]
        has_grad_inside_sample = [input_batch.grad[sample_idx].abs().sum().item() for input_batch in input_batches]
        return not any(has_grad_outside_sample) and all(has_grad_inside_sample)


class BatchGradientVerificationCallback(VerificationCallbackBase):
    def __init__(self, input_mapping: Optional[Callable] = None, output_mapping: Optional[Callable] = None, sample_idx: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._input_mapping = input_mapping
        self._output_mapping = output_mapping
        self._sample_idx = sample_idx

    def message(self, *args: Any, **kwargs: Any) -> str:
        return (
            "Your model is mixing data across the batch dimension."
            " This can lead to wrong gradient updates in the optimizer."
            " Check the operations that reshape and permute tensor dimensions in your model."
        )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        verification = BatchGradientVerification(pl_module)
        result = verification.check(
            input_array=pl_module.example_input_array, input_mapping=self._input_mapping,
            output_mapping=self._output_mapping, sample_idx=self._sample_idx,
        )
        if not result:
            self._raise()


def default_input_mapping(data: Any) -> List[Tensor]:
    tensors = collect_tensors(data)
    batches: List[Tensor] = []
    for tensor in tensors:
        if tensor.ndim > 0 and (not batches or tensor.size(0) == batches[0].size(0)):
            batches.append(tensor)
    return batches


def default_output_mapping(data: Any) -> Tensor:
    if isinstance(data, Tensor):
        return data
    batches = default_input_mapping(data)
    # cannot use .flatten(1) because of tensors with shape (B, )
    batches = [batch.view(batch.size(0), -1).float() for batch in batches]
    return torch.cat(batches, 1)  # combined batch has shape (B, N)


def collect_tensors(data: Any) -> List[Tensor]:
    tensors = []

    def collect_batches(tensor: Tensor) -> Tensor:
        tensors.append(tensor)
        return tensor

    apply_to_collection(data, dtype=Tensor, function=collect_batches)
    return tensors


@contextmanager
def selective_eval(model: nn.Module, layer_types: Iterable[Type[nn.Module]]) -> Iterator[None]:
    to_revert = []
    try:
        for module in model.modules():
            if isinstance(module, tuple(layer_types)) and module.training:
                module.eval()
                to_revert.append(module)
        yield
    finally:
        for module in to_revert:
            module.train()


# ---------------------------------------------------------------- the project
class Net(LightningModule):
    """A regressor whose forward returns a dict (bolts' output mapping flattens it)."""

    def __init__(self, mix: bool = False) -> None:
        super().__init__()
        self.mix = mix
        self.body = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh())
        self.head = nn.Linear(8, 1)
        self.example_input_array = torch.randn(4, 6)

    def forward(self, x: Tensor) -> Dict[str, Tensor]:
        h = self.body(x)
        if self.mix:  # the mistake bolts' check exists to find: mixing samples of the batch
            h = h + h.mean(dim=0, keepdim=True)
        return {"y": self.head(h), "h": h}

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x)["y"], y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x)["y"], y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main(root_dir: str | Path, precision: str = "32-true", mix: bool = False, error: bool = False, **options: Any) -> dict[str, Any]:
    seed_everything(3)
    model = Net(mix=mix)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(40, 6, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    callbacks = [BatchGradientVerificationCallback(error=error), ModuleDataMonitor(submodules=True), TrainingDataMonitor(log_every_n_steps=3)]
    logger = TensorBoardLogger(save_dir=str(root_dir), name="tb", version=0)
    trainer = Trainer(default_root_dir=root_dir, accelerator="cpu", max_epochs=2, precision=precision, logger=logger, callbacks=callbacks,
                      log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False, **options)
    trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True), DataLoader(data, batch_size=20))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "log_dir": Path(logger.log_dir)}
