"""TTARule: which accuracy targets a run must reach and how evaluations are aggregated."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from benchbase.specs._base import Spec

__all__ = ["Target", "TTARule"]

Metric = Literal["cer", "wer"]


class Target(Spec):
    metric: Metric = Field(description="Error rate the target is stated in.")
    value: float = Field(gt=0.0, le=100.0, description="Reached when the aggregate is at or below this (percent).")

    @property
    def label(self) -> str:
        return f"{self.metric.upper()} {self.value:g}"


class TTARule(Spec):
    targets: tuple[Target, ...] = Field(min_length=1, max_length=32, description="Every target to report a TTA for.")
    window: int = Field(3, ge=1, le=100, description="e: the aggregate covers the last e evaluations.")
    aggregation: Literal["median"] = Field("median", description="How the last e evaluations are combined.")

    @field_validator("targets")
    @classmethod
    def _distinct(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        labels = [target.label for target in targets]
        if len(set(labels)) != len(labels):
            raise ValueError(f"targets repeat: {labels}")
        return targets
