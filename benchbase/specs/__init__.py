"""Pydantic specs: what a run is made of, and what it reports (RunResult).

All are frozen; the specs a person writes reject unknown fields, a result read back keeps them."""

from __future__ import annotations

from benchbase.specs.augmentation import SpecAugmentSpec
from benchbase.specs.hardware import CPUSpec, DeviceSpec, HardwareProfile, PipelineDefaults, PriceSpec
from benchbase.specs.model import ModelSpec
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec, OptimizerSpec
from benchbase.specs.result import ResultProblem, RunResult, TargetReached, read_run_result
from benchbase.specs.run import RunConfig
from benchbase.specs.tta import Target, TTARule
from benchbase.specs.workload import (
    BEAM_DECODERS,
    DECODER_NAMES,
    DataSpec,
    Deviation,
    EvalSpec,
    FeatureSpec,
    WorkloadSpec,
)

__all__ = [
    "AdaDeltaSpec",
    "AdamWSpec",
    "BEAM_DECODERS",
    "DECODER_NAMES",
    "CPUSpec",
    "DataSpec",
    "Deviation",
    "DeviceSpec",
    "EvalSpec",
    "FeatureSpec",
    "HardwareProfile",
    "ModelSpec",
    "OptimizerSpec",
    "PipelineDefaults",
    "PriceSpec",
    "ResultProblem",
    "RunConfig",
    "RunResult",
    "SpecAugmentSpec",
    "TTARule",
    "Target",
    "TargetReached",
    "WorkloadSpec",
    "read_run_result",
]
