"""Optional behaviours built on `trainer`'s public API only."""

from __future__ import annotations

from trainer import Callback
from trainer.callback import Checkpoint

from callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from callbacks.batch_size_finder import BatchSizeFinder
from callbacks.model_checkpoint import ModelCheckpoint
from callbacks.device_stats_monitor import DeviceStatsMonitor
from callbacks.early_stopping import EarlyStopping
from callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from callbacks.lambda_function import LambdaCallback
from callbacks.lr_finder import LearningRateFinder
from callbacks.lr_monitor import LearningRateMonitor
from callbacks.model_summary import ModelSummary
from callbacks.on_exception_checkpoint import OnExceptionCheckpoint
from callbacks.prediction_writer import BasePredictionWriter
from callbacks.progress import RichProgressBar, TQDMProgressBar
from callbacks.rich_model_summary import RichModelSummary
from callbacks.step_time import StepTimeBreakdown
from callbacks.stochastic_weight_avg import StochasticWeightAveraging
from callbacks.throughput_monitor import ThroughputMonitor
from callbacks.timer import Timer
from callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__: list[str] = [
    "Callback", "Checkpoint", "ModelCheckpoint", "EarlyStopping", "LambdaCallback", "LearningRateMonitor", "ModelSummary",
    "TQDMProgressBar", "RichProgressBar", "WeightAveraging", "EMAWeightAveraging",
    "StochasticWeightAveraging", "BaseFinetuning", "BackboneFinetuning",
    "GradientAccumulationScheduler", "OnExceptionCheckpoint", "Timer",
    "DeviceStatsMonitor", "RichModelSummary", "BatchSizeFinder",
    "BasePredictionWriter", "LearningRateFinder", "ThroughputMonitor",
    "StepTimeBreakdown",
]
