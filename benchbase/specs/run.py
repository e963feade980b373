"""RunConfig: one run = workload + backend + hardware profile + seed + output folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SerializeAsAny

from benchbase.specs._base import Spec
from benchbase.specs.hardware import HardwareProfile
from benchbase.specs.strategy import StrategySpec, SyncSpec, validate_strategy
from benchbase.specs.workload import WorkloadSpec

__all__ = ["NamedStrategy", "RunConfig"]

# The strategy is one of several spec classes, picked by its name (a config.json without one: sync).
NamedStrategy = Annotated[SerializeAsAny[StrategySpec], BeforeValidator(validate_strategy)]


class RunConfig(Spec):
    workload: WorkloadSpec = Field(description="The resolved workload (after overrides).")
    backend: str = Field(min_length=1, max_length=64, description="Registered backend name.")
    hardware: HardwareProfile = Field(description="The resolved hardware profile.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed for data order, init and dropout.")
    out: Path = Field(description="Run folder.")
    data: Path = Field(description="Prepared feature store the run reads.")
    device: str = Field("auto", max_length=32, description="Device the backend trains on: auto, cpu, cuda.")
    devices: int | None = Field(None, ge=1, le=1024, description="Devices to train on instead of the profile's "
                                "count (--devices; an override the log records).")
    profile_steps: int = Field(0, ge=0, le=1000, description="Training steps to trace with the framework's profiler "
                               "(--profile-steps; 0: none).")
    checkpoint_every: int | None = Field(None, ge=1, le=10_000_000, description="Batches between checkpoints "
                                         "instead of the workload's (--checkpoint-every; not part of the score).")
    strategy: NamedStrategy = Field(default_factory=SyncSpec,
                                    description="How the learners combine their work (--strategy; sync: the paper's).")
    overrides: tuple[str, ...] = Field((), max_length=200, description="The --set overrides, as given.")
    division: Literal["closed", "open"] = Field("open", description="MLPerf's division: closed when the workload "
                                                "is the registered one but for its run choices.")
    open_changes: tuple[str, ...] = Field((), max_length=1000, description="What makes the run open, path by "
                                          "path (registered -> used).")
    final_evaluation: bool = Field(True, description="Evaluate every dev and test subset after run_stop (untimed).")
    submitter: str = Field("benchbase", min_length=1, max_length=120, description="submission_org in the log.")
    environment: dict[str, Any] | None = Field(
        None, description="The software environment and CPU the run measured, as the harness recorded it at init "
        "into config.json (benchbase.telemetry.environment); not an input: a run records its own.")
