"""Versioned, declarative rule sets: YAML data validated by pydantic.

A rule set is a list of rules; each rule names the Python check that enforces it (its
``check`` field picks the model, a discriminated union) and carries only data: keys, counts,
limits, field paths. Nothing in a rule set is ever evaluated as code, unlike the official
checker's ``CHECK: "v['value'] in [...]"`` strings.

A kind of rule is declared once, here, by its model: a class with a ``check`` literal joins
the union a rule set is read with (RULE_KINDS), and the function that enforces it names the
model in its ``@check`` (check_registry.py).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import Field, model_validator

from benchbase.compliance.keys import constants
from benchbase.errors import InputError
from benchbase.specs._base import Spec
from benchbase.specs.yaml_files import load_spec_file, load_spec_text

__all__ = [
    "AccuracyValueRule",
    "ComputeRule",
    "DevicePlanRule",
    "DivisionRule",
    "EvalCadenceRule",
    "EventMetadataRule",
    "FixedHyperparametersRule",
    "IndependentScoringRule",
    "OptimizerReplayRule",
    "InitDurationRule",
    "KeyCount",
    "KeyCountsRule",
    "LinesParseRule",
    "MonotonicTimeRule",
    "OrderRule",
    "PrecisionKeysRule",
    "ResultConsistencyRule",
    "ResultTTARule",
    "ResumesRule",
    "RULE_KINDS",
    "Rule",
    "RuleSet",
    "RunStopRule",
    "ThreadBudgetRule",
    "DEFAULT_RULESET",
    "available_rulesets",
    "load_ruleset",
]

DEFAULT_RULESET = "1.9"
_KEY = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.]+$", description="An MLLOG key.")
_PATH = Field(min_length=1, max_length=200, pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$",
              description="A dotted field path inside the workload spec.")


RULE_KINDS: dict[str, type[_RuleBase]] = {}
"""Rule name -> its model, in the order the models are declared below (the order in which a rule
set's validation error lists the names it knows)."""


class _RuleBase(Spec):
    description: str = Field("", max_length=1000, description="What the rule protects, shown beside failures.")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # After pydantic has built the fields: a model with a `check` literal is a kind of rule.
        super().__pydantic_init_subclass__(**kwargs)
        if "check" in cls.model_fields:
            RULE_KINDS[cls.rule_name()] = cls

    @classmethod
    def rule_name(cls) -> str:
        """The name a rule set gives this kind of rule: its ``check`` literal."""
        (name,) = get_args(cls.model_fields["check"].annotation)
        return name


class LinesParseRule(_RuleBase):
    check: Literal["lines_parse"] = Field(description="Every line is a well-formed MLLOG event.")


class KeyCount(Spec):
    key: str = _KEY
    exactly: int | None = Field(None, ge=0, le=1_000_000, description="The key must occur exactly this often.")
    at_least: int | None = Field(None, ge=0, le=1_000_000, description="The key must occur at least this often.")

    @model_validator(mode="after")
    def _one_bound(self) -> KeyCount:
        if (self.exactly is None) == (self.at_least is None):
            raise ValueError(f"key {self.key}: give exactly one of 'exactly' and 'at_least'")
        return self


class KeyCountsRule(_RuleBase):
    check: Literal["key_counts"] = Field(description="Required keys occur as often as stated.")
    keys: tuple[KeyCount, ...] = Field(min_length=1, max_length=200, description="Keys and their counts.")


class OrderPair(Spec):
    before: str = _KEY
    after: str = _KEY


class OrderRule(_RuleBase):
    check: Literal["order"] = Field(description="Every event of `before` precedes every event of `after`.")
    pairs: tuple[OrderPair, ...] = Field(min_length=1, max_length=200, description="Ordered key pairs.")


class InitDurationRule(_RuleBase):
    check: Literal["init_duration"] = Field(description="init_start to run_start takes at most max_minutes.")
    max_minutes: float = Field(30.0, gt=0, le=10_000, description="MLPerf allows 30 minutes of untimed init.")


class RunStopRule(_RuleBase):
    check: Literal["run_stop_status"] = Field(description="Exactly one run_stop, with a known status.")
    statuses: tuple[str, ...] = Field((constants.SUCCESS, constants.ABORTED), min_length=1, max_length=10,
                                      description="Allowed values of run_stop's metadata status.")


class MonotonicTimeRule(_RuleBase):
    check: Literal["monotonic_time"] = Field(description="time_ms never decreases from one line to the next.")


class EventMetadataRule(_RuleBase):
    check: Literal["event_metadata"] = Field(description="Every event of `key` carries the metadata fields.")
    key: str = _KEY
    fields: tuple[str, ...] = Field(min_length=1, max_length=20, description="Required metadata fields.")


class AccuracyValueRule(_RuleBase):
    check: Literal["accuracy_value"] = Field(description="eval_accuracy's value holds each metric as a number.")
    metrics: tuple[Literal["wer", "cer", "paper_cer", "loss"], ...] = Field(min_length=1,
                                                                            description="Required metrics.")


class EvalCadenceRule(_RuleBase):
    check: Literal["eval_cadence"] = Field(
        description="An evaluation after every epoch the workload's evaluation.every_epochs names.")


class FixedHyperparametersRule(_RuleBase):
    check: Literal["fixed_hyperparameters"] = Field(description="Pinned hyperparameters equal the workload spec.")
    log_keys: dict[str, str] = Field(default_factory=dict, max_length=100,
                                     description="MLLOG key -> workload field path its value must equal.")
    config_fields: tuple[str, ...] = Field((), max_length=100,
                                           description="Workload field paths config.json must not change.")
    run_choices: tuple[str, ...] = Field(
        (), max_length=20,
        description="Paths among log_keys' that a run may set itself (benchbase run --precision): held to "
        "config.json instead of the registered workload, but only where the log and config.json agree.")

    @model_validator(mode="after")
    def _paths_are_paths(self) -> FixedHyperparametersRule:
        for path in (*self.log_keys.values(), *self.config_fields, *self.run_choices):
            if not path or any(not part.isidentifier() for part in path.split(".")):
                raise ValueError(f"{path!r} is not a dotted field path")
        logged = set(self.log_keys.values())
        for path in self.run_choices:
            if path not in logged:
                raise ValueError(f"run choice {path!r} is not logged: a run's own choice is accepted only where "
                                 "the log states it")
        return self


class _ClockToleranceRule(_RuleBase):
    """A rule comparing two clocks: the harness's perf_counter and the log's whole-millisecond wall clock."""

    tolerance_seconds: float = Field(1.0, ge=0, le=3600, description="Absolute tolerance in seconds.")
    tolerance_fraction: float = Field(0.01, ge=0, le=1, description="Relative tolerance (of the logged time).")

    def allowed(self, seconds: float) -> float:
        """The difference allowed at ``seconds`` on the run clock: the larger of the two tolerances."""
        return max(self.tolerance_seconds, self.tolerance_fraction * seconds)


class ResultTTARule(_ClockToleranceRule):
    check: Literal["result_tta"] = Field(description="result.json's TTA equals the TTA recomputed from the log.")


class ResultConsistencyRule(_RuleBase):
    check: Literal["result_consistency"] = Field(description="result.json's seed, status and workload match the log.")


class ThreadBudgetRule(_RuleBase):
    check: Literal["thread_budget"] = Field(description="Training stayed within the plan's CPU threads.")
    allowance: float = Field(ge=0.0, le=64.0,
                             description="Cores allowed above the budget (the harness's own reader threads).")


class EvalSubsetsRule(_RuleBase):
    check: Literal["eval_subsets"] = Field(
        description="Every evaluation scores each of the workload's dev subsets on its own, and the log names "
        "the subset TTA is scored on as the workload does.")


class FinalEvaluationRule(_RuleBase):
    check: Literal["final_evaluation"] = Field(
        description="The untimed final evaluation after run_stop covers every dev and test subset, and "
        "result.json reports exactly what the log holds.")


class NumericHealthRule(_RuleBase):
    check: Literal["numeric_health"] = Field(
        description="The run did not end on a NaN or infinite loss or log-probability.")


class DecodedOutputsRule(_RuleBase):
    check: Literal["decoded_outputs"] = Field(
        description="Every evaluation's rates equal those recomputed with jiwer from the decoded outputs it names.")
    tolerance: float = Field(0.001, ge=0, le=100, description="Allowed difference in percentage points (the log "
                             "rounds rates to 4 decimals).")


class EvalCountsRule(_RuleBase):
    check: Literal["eval_counts"] = Field(
        description="Every evaluation decoded its whole subset: the decoded outputs, the log and the store agree.")


class TimelineRule(_ClockToleranceRule):
    check: Literal["timeline"] = Field(
        description="The log's evaluations end when metrics.jsonl's run clock says; no batch after run_stop.")


class ArtifactsRule(_RuleBase):
    check: Literal["artifacts"] = Field(description="The checkpoints the log names (and keeps) exist.")


class DevicePlanRule(_RuleBase):
    check: Literal["device_plan"] = Field(description="The devices trained on agree with the profile and the plan.")


class CompilationRule(_RuleBase):
    check: Literal["compilation"] = Field(
        description="The model is built and compiled where the workload's TTA rule (tta.compilation) puts it: "
        "benchbase_warm_up in init under before_run_start, none under on_clock.")


class ResumesRule(_RuleBase):
    check: Literal["resumes"] = Field(description="A resumed run's resumes hold together.")
    tolerance_seconds: float = Field(0.5, ge=0.0, le=3600.0,
                                     description="Slack between the log's millisecond wall clock and the run clock.")


class DivisionRule(_RuleBase):
    check: Literal["division"] = Field(description="A closed run is the registered workload but for its run choices.")
    registered_data: bool = Field(
        False, description="A closed run also trained on the workload's registered data: the log's benchbase_data "
        "(the store's corpus and each subset's utterances) is what the workload registers (rule set 1.8 on).")


class EnvironmentRule(_RuleBase):
    check: Literal["environment"] = Field(
        description="The log records the software environment the run measured, and result.json agrees.")
    required: tuple[str, ...] = Field(min_length=1, max_length=64, description="Dotted paths into the "
                                      "benchbase_environment value that must be present and not empty.")


class IndependentScoringRule(_RuleBase):
    check: Literal["independent_scoring"] = Field(
        description="Every evaluation's predictions agreed with the backend's exported weights, re-scored by "
        "benchbase's reference model on a sample of the workload's size; the exported weights are the file "
        "the log names.")


class OptimizerReplayRule(_RuleBase):
    check: Literal["optimizer_replay"] = Field(
        description="A fresh run's first training step, replayed from the exported weights with the workload's "
        "optimizer in float64, landed where the backend's did, or the log names an accepted reason it could not "
        "be replayed exactly.")


class PrecisionKeysRule(_RuleBase):
    check: Literal["precision_keys"] = Field(
        description="MLPerf's lowest_numerical_precision_in_linear, _in_attn and _in_comm are in the log and agree "
        "with its precision and training strategy (benchbase.compliance.precision_keys).")


class ComputeRule(_ClockToleranceRule):
    check: Literal["compute"] = Field(
        description="result.json's FLOPs, padding fraction and MFU agree with the log's benchbase_epoch_flops, its "
        "run clock and the dense peak of the run's own hardware profile in its precision.")


Rule = Annotated[Union[tuple(RULE_KINDS.values())], Field(discriminator="check")]  # noqa: UP007 (a computed union)
"""Any kind of rule, told apart by its ``check`` field."""


class RuleSet(Spec):
    version: str = Field(min_length=1, max_length=20, pattern=r"^[0-9]+(\.[0-9]+)*$", description="Rule-set version.")
    description: str = Field("", max_length=500, description="What the rule set is for.")
    rules: tuple[Rule, ...] = Field(min_length=1, max_length=500, description="Rules, checked in order.")


def available_rulesets() -> list[str]:
    """Versions of the rule sets that ship with benchbase."""
    names = [item.name for item in resources.files("benchbase.compliance.rulesets").iterdir()]
    return sorted(name.removeprefix("benchbase-").removesuffix(".yaml") for name in names
                  if name.startswith("benchbase-") and name.endswith(".yaml"))


def load_ruleset(version_or_path: str = DEFAULT_RULESET) -> RuleSet:
    """A shipped rule set by version ('1.0'), or a YAML file by path."""
    if version_or_path.endswith((".yaml", ".yml")):
        return load_spec_file(RuleSet, Path(version_or_path))
    if version_or_path not in available_rulesets():
        raise InputError(f"unknown rule set {version_or_path!r}; available: {', '.join(available_rulesets())}")
    item = resources.files("benchbase.compliance.rulesets") / f"benchbase-{version_or_path}.yaml"
    return load_spec_text(RuleSet, item.read_text(encoding="utf-8"), f"rulesets/{item.name}")
