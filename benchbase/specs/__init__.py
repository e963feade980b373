"""Pydantic specs: what a run is made of. All are frozen and reject unknown fields."""

from __future__ import annotations

from benchbase.specs.hardware import CPUSpec, DeviceSpec, HardwareProfile, PipelineDefaults, PriceSpec
from benchbase.specs.run import RunConfig
from benchbase.specs.tta import Target, TTARule
from benchbase.specs.workload import (
    BEAM_DECODERS,
    DECODER_NAMES,
    DataSpec,
    Deviation,
    EvalSpec,
    FeatureSpec,
    ModelSpec,
    OptimizerSpec,
    WorkloadSpec,
)

__all__ = [
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
    "RunConfig",
    "TTARule",
    "Target",
    "WorkloadSpec",
]
