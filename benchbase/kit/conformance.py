"""The backend conformance kit: named rules that prove a backend against contract v2.

Each rule is a small function that builds backends of the class under test on the kit's
data (``benchbase.kit.data``), compares what they do with the contract and with
benchbase's NumPy reference (``benchbase.families.ds2.reference``, ``benchbase.metrics.ctc``),
and raises ``ConformanceFailure`` saying what it expected and what it found. The reasons for
each rule are in ``model_rules`` and ``training_rules``.

Each model family has its own rule set (``RULE_SETS``): ds2's (``RULES``) and rnnt's
(``RNNT_RULES``, reasons in ``rnnt_rules``), run on that family's kit data. Rule names are
unique across families; a backend is proven for every family it declares
(``Capabilities.families``) that the kit has rules for (``families_to_test``).

    results = run_conformance(MyBackend)                 # every ds2 rule, in order
    results = run_conformance(MyBackend, ["ctc_loss"])   # some of them
    results = run_conformance(MyBackend, family="rnnt")  # every rnnt rule
    results = run_conformance(MyBackend, family="rnnt", precision="int8-emulated")  # its int8 rules

The family's rules run in fp32, which every backend implements. A precision the backend
declares for a family (``Capabilities.precisions_of``) has rules of its own where a reference
fixes its numbers (``PRECISION_RULE_SETS``: int8-emulated; reasons in ``precision_rules``).

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
from benchbase.kit.core import ConformanceFailure, Kit, describe_error
from benchbase.kit.data import KIT_FAMILIES, KitData, load_kit_data
from benchbase.kit.model_rules import (
    check_batchnorm_statistics,
    check_ctc_loss,
    check_forward_parity,
    check_parameter_count,
    check_predict_shapes,
    check_weight_round_trip,
)
from benchbase.kit.precision_rules import (
    check_int8_forward,
    check_int8_ranges,
    check_rnnt_int8_checkpoint,
    check_rnnt_int8_encoder,
    check_rnnt_int8_training_step,
)
from benchbase.kit.rnnt_rules import (
    check_rnnt_checkpoint_round_trip,
    check_rnnt_forward_parity,
    check_rnnt_parameter_count,
    check_rnnt_predict_shapes,
    check_rnnt_prediction_matches_weights,
    check_rnnt_transducer_loss,
    check_rnnt_weight_round_trip,
)
from benchbase.kit.training_rules import (
    THREAD_RATIO_BOUND,
    check_checkpoint_round_trip,
    check_predict_sees_only_features,
    check_prediction_matches_weights,
    check_seed_determinism,
    check_thread_budget,
    check_warm_up,
)

__all__ = [
    "PRECISION_RULE_SETS",
    "RNNT_RULES",
    "RULES",
    "RULE_SETS",
    "ConformanceFailure",
    "Kit",
    "Rule",
    "RuleResult",
    "families_to_test",
    "resolve_backend",
    "rules_by_family",
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
    family: str = "ds2"
    """The model family whose rule set it belongs to."""

    def to_dict(self) -> dict:
        return {"family": self.family, "rule": self.name, "passed": self.passed, "message": self.message,
                "seconds": round(self.seconds, 3)}


WARM_UP_RULE = ("warm_up() (compiling before run_start, where the workload allows it) changes neither the weights "
                "nor the losses that follow")

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
    Rule("warm_up", WARM_UP_RULE, check_warm_up),
)

RNNT_RULES: tuple[Rule, ...] = (
    Rule("rnnt_parameter_count", "parameter_count() and export_weights()' names and shapes are what the rnnt spec "
         "implies", check_rnnt_parameter_count),
    Rule("rnnt_weight_round_trip", "import_weights then export_weights returns the same arrays; misfits are refused",
         check_rnnt_weight_round_trip),
    Rule("rnnt_predict_shapes", "predict returns the float32 encoder projection (batch, frames, joint_units) and "
         "changes no state", check_rnnt_predict_shapes),
    Rule("rnnt_forward_parity", "predict matches the NumPy reference encoder on random weights within float32's "
         "rounding bound", check_rnnt_forward_parity),
    Rule("rnnt_transducer_loss", "train_step's loss is the spec's mean transducer loss (no encoder frame = 0) "
         "within float32's rounding bound", check_rnnt_transducer_loss),
    Rule("rnnt_prediction_matches_weights", "after training, predict agrees with the reference encoder on the "
         "backend's own export_weights() within the error model's bound", check_rnnt_prediction_matches_weights),
    Rule("rnnt_seed_determinism", "the same seed gives the same weights and first losses; another seed does not",
         check_seed_determinism),
    Rule("rnnt_checkpoint_round_trip", "a checkpoint loaded by another seed's backend predicts and trains on "
         "identically (the same kernels)", check_rnnt_checkpoint_round_trip),
    Rule("rnnt_warm_up", WARM_UP_RULE, check_warm_up),
)

RULE_SETS: dict[str, tuple[Rule, ...]] = {"ds2": RULES, "rnnt": RNNT_RULES}
"""Each model family's rules, run on that family's kit data (``KIT_FAMILIES``)."""
assert tuple(RULE_SETS) == KIT_FAMILIES

PRECISION_RULE_SETS: dict[tuple[str, str], tuple[Rule, ...]] = {
    ("ds2", "int8-emulated"): (
        Rule("int8_forward", "an int8-emulated model's predict matches the quantized reference within the "
             "error model's grid-flip bound", check_int8_forward),
        Rule("int8_ranges", "the activation ranges a training step leaves are the reference's", check_int8_ranges),
    ),
    ("rnnt", "int8-emulated"): (
        Rule("rnnt_int8_encoder", "an int8-emulated transducer's encoder projection matches the quantized "
             "reference within the error model's grid-flip bound", check_rnnt_int8_encoder),
        Rule("rnnt_int8_training_step", "the loss of an int8 training step and the ranges it leaves are the "
             "reference's", check_rnnt_int8_training_step),
        Rule("rnnt_int8_checkpoint", "a checkpoint keeps every activation range and the predictions",
             check_rnnt_int8_checkpoint),
    ),
}
"""(family, precision) -> the rules that prove a backend in that precision (on the family's kit data)."""


def select_rules(names: Iterable[str] | None = None, family: str = "ds2", precision: str = "fp32") -> list[Rule]:
    """The named rules of ``family`` (in ``precision``) in the kit's order (every rule for None); an
    unknown name, family or precision, or another family's rule, is an InputError."""
    rules = _rule_set(family, precision)
    if names is None:
        return list(rules)
    wanted = list(names)
    known = {rule.name for rule in rules}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InputError(f"unknown {family} conformance rule {', '.join(map(repr, unknown))}{_elsewhere(unknown)}; "
                         f"available: {', '.join(rule.name for rule in rules)}")
    return [rule for rule in rules if rule.name in wanted]


def rules_by_family(names: Iterable[str] | None, families: Iterable[str],
                    precision: str = "fp32") -> dict[str, list[Rule]]:
    """Each of ``families`` with the named rules it has in ``precision`` (every rule for None); a
    family none of the names belongs to is left out. A name in none of them is an InputError."""
    families = list(families)
    if names is None:
        return {family: select_rules(None, family, precision) for family in families}
    wanted = list(names)
    chosen = {family: [rule for rule in _rule_set(family, precision) if rule.name in wanted] for family in families}
    found = {rule.name for rules in chosen.values() for rule in rules}
    unknown = [name for name in wanted if name not in found]
    if unknown:
        available = ", ".join(f"{family}: {', '.join(rule.name for rule in _rule_set(family, precision))}"
                              for family in families)
        kind = "" if precision == "fp32" else f"{precision} "
        raise InputError(f"unknown {kind}conformance rule {', '.join(map(repr, unknown))} for the families "
                         f"{', '.join(families)}{_elsewhere(unknown)}; available: {available}")
    return {family: rules for family, rules in chosen.items() if rules}


def families_to_test(backend_class: type[Backend], family: str | None = None, precision: str = "fp32") -> list[str]:
    """``family``, which the backend must declare (in ``precision``), or every family it declares
    in ``precision`` that the kit has rules for, in the kit's order (an InputError when there is none)."""
    capabilities = backend_class.capabilities
    declared = capabilities.families
    proved = sorted({name for _, name in PRECISION_RULE_SETS})
    if precision != "fp32" and precision not in proved:
        raise InputError(f"the conformance kit has no {precision} rules; it proves fp32 and {', '.join(proved)}")
    if family is not None:
        _rule_set(family, precision)
        if family not in declared:
            raise InputError(f"backend {backend_class.name!r} does not implement the {family} model family (it "
                             f"declares {', '.join(sorted(declared))})")
        if precision != "fp32" and precision not in capabilities.precisions_of(family):
            raise InputError(f"backend {backend_class.name!r} does not implement {family} in {precision} (it "
                             f"declares {', '.join(sorted(capabilities.precisions_of(family)))})")
        return [family]
    families = [known for known in RULE_SETS if known in declared and (precision == "fp32" or (
        (known, precision) in PRECISION_RULE_SETS and precision in capabilities.precisions_of(known)))]
    if not families and precision == "fp32":
        raise InputError(f"the conformance kit has no rules for the families backend {backend_class.name!r} "
                         f"declares ({', '.join(sorted(declared))}); it has rules for {', '.join(RULE_SETS)}")
    if not families:
        raise InputError(f"backend {backend_class.name!r} declares {precision} for none of the families the kit "
                         f"has {precision} rules for (it declares {', '.join(sorted(declared))})")
    return families


def run_conformance(backend_class: type[Backend], rules: Iterable[str] | None = None, *, family: str = "ds2",
                    data: KitData | None = None, seed: int = 0, kit: Kit | None = None,
                    on_result: Callable[[RuleResult], None] | None = None,
                    precision: str = "fp32") -> list[RuleResult]:
    """Run the named rules of ``family`` (all by default) on ``backend_class``; one result per rule, in order.

    ``data`` defaults to the kit's cached speech for the family (prepared on first use); ``kit``
    shares one kit, and what its rules computed, between calls. Either must be the family's.
    """
    selected = select_rules(rules, family, precision)
    if kit is None:
        kit = Kit(backend_class, data or load_kit_data(family=family), seed)
    elif kit.backend_class is not backend_class:
        raise ValueError(f"the kit tests {kit.backend_class.__name__}, not {backend_class.__name__}")
    if kit.model.family != family:
        raise ValueError(f"the kit's data is the {kit.model.family} family's, not {family}'s")
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
    family = kit.model.family
    try:
        note = rule.check(kit)
    except ConformanceFailure as failure:
        return RuleResult(rule.name, False, failure.message, time.perf_counter() - started, family)
    except Exception as error:  # noqa: BLE001  (a backend's error fails the rule, not the kit)
        return RuleResult(rule.name, False, describe_error(error), time.perf_counter() - started, family)
    return RuleResult(rule.name, True, note or "", time.perf_counter() - started, family)


def _rule_set(family: str, precision: str = "fp32") -> tuple[Rule, ...]:
    if family not in RULE_SETS:
        raise InputError(f"the conformance kit has no rules for model family {family!r}; it has rules for "
                         f"{', '.join(RULE_SETS)}")
    if precision == "fp32":
        return RULE_SETS[family]
    if (family, precision) not in PRECISION_RULE_SETS:
        known = ", ".join(sorted({name for _, name in PRECISION_RULE_SETS}))
        raise InputError(f"the conformance kit has no {precision} rules for the {family} family (it proves fp32 and "
                         f"{known})")
    return PRECISION_RULE_SETS[(family, precision)]


def resolve_backend(name: str) -> type[Backend]:
    """A registered backend class by name, through the plugin manager (entry points included)."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    registry = collect_registry(get_plugin_manager())
    try:
        return registry.backend(name)
    except ImportError as error:
        raise BenchbaseError(f"backend {name!r} cannot be imported: {describe_error(error)}") from None


def _elsewhere(names: list[str]) -> str:
    """"; 'x' is a rule of the rnnt family" for each name some family has."""
    owners = {rule.name: family for family, rules in RULE_SETS.items() for rule in rules}
    owners |= {rule.name: f"{family} ({precision})" for (family, precision), rules in PRECISION_RULE_SETS.items()
               for rule in rules}
    return "".join(f"; {name!r} is a rule of the {owners[name]} family" for name in names if name in owners)
