"""The backend conformance kit: named rules that prove a backend against contract v2.

Each rule is a small function that builds backends of the class under test on the kit's
data (``benchbase.testing.kit_data``), compares what they do with the contract and with
benchbase's NumPy reference (``benchbase.testing.reference_model``, ``benchbase.metrics.ctc``),
and raises ``ConformanceFailure`` saying what it expected and what it found. The reasons for
each rule are in ``model_rules`` and ``training_rules``.

    results = run_conformance(MyBackend)                 # every rule, in order
    results = run_conformance(MyBackend, ["ctc_loss"])   # some of them

A rule failure never raises out of ``run_conformance``: an exception inside the backend is a
failed rule showing its type and message. ``benchbase backend-test NAME`` runs the kit from
the command line; ``benchbase.testing.BackendConformance`` turns it into pytest tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from benchbase.backend import Backend
from benchbase.errors import BenchbaseError, InputError
from benchbase.testing.kit import ConformanceFailure, Kit, describe_error
from benchbase.testing.kit_data import KitData, load_kit_data
from benchbase.testing.model_rules import (
    check_batchnorm_statistics,
    check_ctc_loss,
    check_forward_parity,
    check_parameter_count,
    check_predict_shapes,
    check_weight_round_trip,
)
from benchbase.testing.training_rules import (
    THREAD_RATIO_BOUND,
    check_checkpoint_round_trip,
    check_predict_sees_only_features,
    check_prediction_matches_weights,
    check_seed_determinism,
    check_thread_budget,
)

__all__ = [
    "RULES",
    "ConformanceFailure",
    "Kit",
    "Rule",
    "RuleResult",
    "resolve_backend",
    "run_conformance",
    "select_rules",
]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[Kit], str | None]
    """Raises ConformanceFailure; may return a note (shown with a pass)."""


@dataclass(frozen=True)
class RuleResult:
    name: str
    passed: bool
    message: str
    """Why it failed; for a pass, an empty string or a note."""
    seconds: float

    def to_dict(self) -> dict:
        return {"rule": self.name, "passed": self.passed, "message": self.message, "seconds": round(self.seconds, 3)}


RULES: tuple[Rule, ...] = (
    Rule("parameter_count", "parameter_count() and export_weights()' names and shapes are what the spec implies",
         check_parameter_count),
    Rule("weight_round_trip", "import_weights then export_weights returns the same arrays; misfits are refused",
         check_weight_round_trip),
    Rule("predict_shapes", "predict returns float32 log-softmax (batch, frames, symbols) and changes no state",
         check_predict_shapes),
    Rule("forward_parity", "predict matches the NumPy reference on random weights within float32's rounding bound",
         check_forward_parity),
    Rule("ctc_loss", "train_step's loss is the spec's mean CTC loss (impossible alignment = 0) within float32's "
         "rounding bound", check_ctc_loss),
    Rule("batchnorm_statistics", "running BatchNorm mean/variance after a step are the reference's within float32's "
         "rounding bound", check_batchnorm_statistics),
    Rule("checkpoint_round_trip", "a checkpoint loaded by another seed's backend predicts and trains on "
         "identically (the same kernels)", check_checkpoint_round_trip),
    Rule("predict_sees_only_features", "predictions depend on features and weights only, never on labels seen",
         check_predict_sees_only_features),
    Rule("prediction_matches_weights", "after training, predict agrees with the NumPy reference on the backend's "
         "own export_weights() within the error model's bound", check_prediction_matches_weights),
    Rule("seed_determinism", "the same seed gives the same weights and first losses; another seed "
         "does not", check_seed_determinism),
    Rule("thread_budget", f"with threads=1, train_step uses at most {THREAD_RATIO_BOUND} CPU seconds per second",
         check_thread_budget),
)


def select_rules(names: Iterable[str] | None = None) -> list[Rule]:
    """The named rules in the kit's order (every rule for None); an unknown name is an InputError."""
    if names is None:
        return list(RULES)
    wanted = list(names)
    known = {rule.name for rule in RULES}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InputError(f"unknown conformance rule {', '.join(map(repr, unknown))}; available: "
                         f"{', '.join(rule.name for rule in RULES)}")
    return [rule for rule in RULES if rule.name in wanted]


def run_conformance(backend_class: type[Backend], rules: Iterable[str] | None = None, *, data: KitData | None = None,
                    seed: int = 0, kit: Kit | None = None,
                    on_result: Callable[[RuleResult], None] | None = None) -> list[RuleResult]:
    """Run the named rules (all by default) on ``backend_class``; one result per rule, in order.

    ``data`` defaults to the kit's cached speech (prepared on first use); ``kit`` shares one
    kit, and what its rules computed, between calls.
    """
    selected = select_rules(rules)
    if kit is None:
        kit = Kit(backend_class, data or load_kit_data(), seed)
    elif kit.backend_class is not backend_class:
        raise ValueError(f"the kit tests {kit.backend_class.__name__}, not {backend_class.__name__}")
    results = []
    for rule in selected:
        result = run_rule(rule, kit)
        results.append(result)
        if on_result:
            on_result(result)
    return results


def run_rule(rule: Rule, kit: Kit) -> RuleResult:
    """One rule; its failure, or any exception from the backend, is a failed result."""
    started = time.perf_counter()
    try:
        note = rule.check(kit)
    except ConformanceFailure as failure:
        return RuleResult(rule.name, False, failure.message, time.perf_counter() - started)
    except Exception as error:  # noqa: BLE001  (a backend's error fails the rule, not the kit)
        return RuleResult(rule.name, False, describe_error(error), time.perf_counter() - started)
    return RuleResult(rule.name, True, note or "", time.perf_counter() - started)


def resolve_backend(name: str) -> type[Backend]:
    """A registered backend class by name, through the plugin manager (entry points included)."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    registry = collect_registry(get_plugin_manager())
    try:
        return registry.backend(name)
    except ImportError as error:
        raise BenchbaseError(f"backend {name!r} cannot be imported: {describe_error(error)}") from None
