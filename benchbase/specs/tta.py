"""TTARule: which accuracy targets a run must reach and how evaluations are aggregated."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator

from benchbase.errors import InputError
from benchbase.specs._base import Spec

__all__ = ["METRICS", "METRIC_LABELS", "Target", "TTARule", "parse_target"]

Metric = Literal["cer", "paper_cer", "wer"]
"""wer: word error rate; cer: jiwer's character error rate (edits / reference characters, can
exceed 100); paper_cer: the reference paper's Eq. 3 (each utterance's edits / max(len(hypothesis),
len(reference)), averaged over utterances)."""
METRICS: tuple[str, ...] = get_args(Metric)

# The paper's CER is the one its targets are stated in, so it takes the plain name in labels.
METRIC_LABELS = {"wer": "WER", "paper_cer": "CER", "cer": "CER/ref"}


class Target(Spec):
    metric: Metric = Field(description="Error rate the target is stated in: wer, paper_cer (the paper's CER, "
                           "labelled CER) or cer (jiwer's reference-length CER, labelled CER/ref).")
    value: float = Field(gt=0.0, le=100.0, description="Reached when the aggregate is at or below this (percent).")

    @property
    def label(self) -> str:
        return f"{METRIC_LABELS[self.metric]} {self.value:g}"


def parse_target(text: str, option: str = "target") -> dict[str, str | float]:
    """``paper_cer=40`` (a --target option, a sweep file's target) as a Target's fields; InputError names ``option``."""
    metric, separator, value = text.partition("=")
    try:
        if not separator:
            raise ValueError
        target: dict[str, str | float] = {"metric": metric.strip().lower(), "value": float(value)}
    except ValueError:
        raise InputError(f"{option} {text!r}: expected METRIC=VALUE, e.g. paper_cer=40") from None
    if target["metric"] not in METRICS:
        raise InputError(f"{option} {text!r}: unknown metric {metric.strip()!r}; the metrics are wer, paper_cer "
                         "(the paper's CER) and cer (jiwer's reference-length CER)")
    return target


class TTARule(Spec):
    subset: str | None = Field(
        None, max_length=64, description="The dev subset every target is scored on (e.g. dev-clean). May be left "
        "out only when the workload has a single dev subset.")
    targets: tuple[Target, ...] = Field(min_length=1, max_length=32, description="Every target to report a TTA for.")
    window: int = Field(3, ge=1, le=100, description="e: the aggregate covers the last e evaluations.")
    aggregation: Literal["median"] = Field("median", description="How the last e evaluations are combined.")
    compilation: Literal["on_clock", "before_run_start"] = Field(
        "on_clock", description="Where building the model and compiling it for the run's shapes go. on_clock: "
        "the paper's rule, the clock starts at model creation and a compiling backend compiles on it. "
        "before_run_start: MLPerf's allowance, build() and the backend's warm_up() on synthetic inputs of the "
        "run's batch shapes happen in init, off the clock, touching no data.")

    @field_validator("targets")
    @classmethod
    def _distinct(cls, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        labels = [target.label for target in targets]
        if len(set(labels)) != len(labels):
            raise ValueError(f"targets repeat: {labels}")
        return targets
