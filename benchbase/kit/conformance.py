"""The backend conformance kit: named rules that prove a backend against the backend contract.

Each rule is a small function that builds backends of the class under test on the kit's
data (``benchbase.kit.data``), compares what they do with the contract and with the model
family's NumPy reference (``benchbase.families.parts``: the layout, the reference and its
float32 bounds), and raises ``ConformanceFailure`` saying what it expected and what it found.
The reasons for each rule are in ``model_rules``, ``step_rules``, ``training_rules`` and
``optimizer_rules``.

Every rule is written once, for every family (``RULES``); a rule that needs what only some
families have (running statistics) says when it applies. A backend is proven for every family
it declares (``Capabilities.families``), a plugin's family included: the kit asks the family's
parts for its small model and its reference. The small model predicts the alphabet's symbols;
``symbols=N`` proves the same model predicting N (a subword vocabulary's width, up to 1024), on
labels drawn from them (``benchbase.kit.data``).

    results = run_conformance(MyBackend)                 # every rule, on the ds2 family
    results = run_conformance(MyBackend, ["loss"])       # some of them
    results = run_conformance(MyBackend, family="rnnt")  # every rule that applies to rnnt
    results = run_conformance(MyBackend, family="rnnt", precision="int8-emulated")  # its int8 rules
    results = run_conformance(MyBackend, family="rnnt", symbols=1024)  # a kit model of 1024 symbols

The rules run in fp32, which every backend implements. A precision the backend declares for a
family (``Capabilities.precisions_of``) has rules of its own where a reference fixes its numbers
(``PRECISION_RULE_SETS``: int8-emulated, for every family whose parts have a quantized reference;
reasons in ``precision_rules``).

A rule failure never raises out of ``run_conformance``: an exception inside the backend is a
failed rule showing its type and message. ``benchbase backend-test NAME`` runs the kit from
the command line; ``benchbase.testing.BackendConformance`` turns it into pytest tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from benchbase.backend import Backend, DeviceKind
from benchbase.errors import BenchbaseError, InputError
from benchbase.families.parts import CheckedParts, FamilyParts, parts_of_family, quantized_reference_of
from benchbase.kit.core import ConformanceFailure, Kit, describe_error
from benchbase.kit.data import KitData, load_kit_data
from benchbase.kit.model_rules import (
    check_forward_parity,
    check_parameter_count,
    check_predict_shapes,
    check_weight_round_trip,
)
from benchbase.kit.optimizer_rules import STEPS as OPTIMIZER_STEPS
from benchbase.kit.optimizer_rules import check_optimizer_update
from benchbase.kit.precision_rules import check_int8_checkpoint, check_int8_forward, check_int8_training_step
from benchbase.kit.step_rules import check_batchnorm_statistics, check_loss
from benchbase.kit.training_rules import (
    THREAD_RATIO_BOUND,
    check_checkpoint_round_trip,
    check_predict_sees_only_features,
    check_prediction_matches_weights,
    check_seed_determinism,
    check_thread_budget,
    check_warm_up,
)
from benchbase.numerics.quantization import INT8_EMULATED
from benchbase.specs import ModelSpec

__all__ = [
    "PRECISION_RULE_SETS",
    "RULES",
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
    applies: Callable[[FamilyParts, ModelSpec], bool] = lambda parts, model: True
    """Whether the rule proves anything for a family (on the family's kit model)."""
    within_bounds: bool = False
    """Whether it holds floats to the error model's bounds, which the CPU's instruction set moves
    (``make test-isa`` runs such rules again one ISA lower); the others compare a backend with itself."""


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

def _has_running_statistics(parts: FamilyParts, model: ModelSpec) -> bool:
    return bool(parts.normalization_layers(model))


RULES: tuple[Rule, ...] = (
    Rule("parameter_count", "parameter_count() and export_weights()' names and shapes are what the spec implies",
         check_parameter_count),
    Rule("weight_round_trip", "import_weights then export_weights returns the same arrays; misfits are refused",
         check_weight_round_trip),
    Rule("predict_shapes", "predict returns the family's float32 outputs (batch, frames, width), a log-softmax where "
         "they are log-probabilities, and changes no state", check_predict_shapes, within_bounds=True),
    Rule("forward_parity", "predict matches the family's NumPy reference on random weights within float32's rounding "
         "bound", check_forward_parity, within_bounds=True),
    Rule("loss", "train_step's loss is the spec's mean loss (CTC, transducer; impossible alignment = 0) within "
         "float32's rounding bound", check_loss, within_bounds=True),
    Rule("batchnorm_statistics", "running BatchNorm mean/variance after a step are the reference's within float32's "
         "rounding bound", check_batchnorm_statistics, _has_running_statistics, within_bounds=True),
    Rule("optimizer_update", f"the weights after each of {OPTIMIZER_STEPS} steps are the spec's optimizer (every "
         "one the backend declares, its schedule and clip) applied to the gradient, which central differences of "
         "the reference's loss confirm", check_optimizer_update, within_bounds=True),
    Rule("checkpoint_round_trip", "a checkpoint loaded by another seed's backend predicts and trains on "
         "identically (the same kernels)", check_checkpoint_round_trip),
    Rule("predict_sees_only_features", "predictions depend on features and weights only, never on labels seen",
         check_predict_sees_only_features),
    Rule("prediction_matches_weights", "after training, predict agrees with the NumPy reference on the backend's "
         "own export_weights() within the error model's bound", check_prediction_matches_weights, within_bounds=True),
    Rule("seed_determinism", "the same seed gives the same weights and first losses; another seed "
         "does not", check_seed_determinism),
    Rule("thread_budget", f"with threads=1, train_step uses at most {THREAD_RATIO_BOUND} CPU seconds per second",
         check_thread_budget),
    Rule("warm_up", "warm_up() (compiling before run_start, where the workload allows it) changes neither the "
         "weights nor the losses that follow", check_warm_up),
)
"""Every family's rules, in the kit's order (each family runs those that apply to it)."""

def _has_quantized_reference(parts: FamilyParts, model: ModelSpec) -> bool:
    return quantized_reference_of(parts) is not None


PRECISION_RULE_SETS: dict[str, tuple[Rule, ...]] = {
    INT8_EMULATED: (
        Rule("int8_forward", "an int8-emulated model's predict matches the family's quantized reference within the "
             "error model's grid-flip bound", check_int8_forward, _has_quantized_reference),
        Rule("int8_training_step", "the loss of an int8-emulated training step and the activation ranges it leaves "
             "are the quantized reference's", check_int8_training_step, _has_quantized_reference),
        Rule("int8_checkpoint", "a checkpoint keeps every activation range and the predictions",
             check_int8_checkpoint, _has_quantized_reference),
    ),
}
"""precision -> the rules that prove a backend in it, written once for every family (each family runs
those that apply to it: int8-emulated's, a family whose parts have a ``quantized_reference``)."""


def select_rules(names: Iterable[str] | None = None, family: str = "ds2", precision: str = "fp32") -> list[Rule]:
    """The named rules of ``family`` (in ``precision``) in the kit's order (every rule that applies
    for None); an unknown name, family or precision, or a rule that does not apply, is an InputError."""
    rules = _rule_set(family, precision)
    if names is None:
        return list(rules)
    wanted = list(names)
    known = {rule.name for rule in rules}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InputError(f"unknown {family} conformance rule {', '.join(map(repr, unknown))}"
                         f"{_elsewhere(unknown, family)}; available: {', '.join(rule.name for rule in rules)}")
    return [rule for rule in rules if rule.name in wanted]


def rules_by_family(names: Iterable[str] | None, families: Iterable[str],
                    precision: str = "fp32") -> dict[str, list[Rule]]:
    """Each of ``families`` with the named rules it has in ``precision`` (every rule for None); a
    family none of the names applies to is left out. A name in none of them is an InputError."""
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
                         f"{', '.join(families)}{_elsewhere(unknown, *families)}; available: {available}")
    return {family: rules for family, rules in chosen.items() if rules}


def families_to_test(backend_class: type[Backend], family: str | None = None, precision: str = "fp32") -> list[str]:
    """``family``, which the backend must declare (in ``precision``), or every family it declares
    (in ``precision``, where the kit has rules for it), in name order; an InputError when there is none."""
    capabilities = backend_class.capabilities
    declared = sorted(capabilities.families)
    proved = sorted(PRECISION_RULE_SETS)
    if precision != "fp32" and precision not in proved:
        raise InputError(f"the conformance kit has no {precision} rules; it proves fp32 and {', '.join(proved)}")
    if family is not None:
        _rule_set(family, precision)
        if family not in declared:
            raise InputError(f"backend {backend_class.name!r} does not implement the {family} model family (it "
                             f"declares {', '.join(declared)})")
        if precision != "fp32" and precision not in capabilities.precisions_of(family):
            raise InputError(f"backend {backend_class.name!r} does not implement {family} in {precision} (it "
                             f"declares {', '.join(sorted(capabilities.precisions_of(family)))})")
        return [family]
    if precision == "fp32":
        return declared
    families = [known for known in declared
                if precision in capabilities.precisions_of(known) and _proves(known, precision)]
    if not families:
        raise InputError(f"backend {backend_class.name!r} declares {precision} for none of the families the kit "
                         f"has {precision} rules for (it declares {', '.join(declared)})")
    return families


def run_conformance(backend_class: type[Backend], rules: Iterable[str] | None = None, *, family: str = "ds2",
                    data: KitData | None = None, seed: int = 0, kit: Kit | None = None,
                    on_result: Callable[[RuleResult], None] | None = None,
                    precision: str = "fp32", symbols: int | None = None,
                    device: DeviceKind = "cpu") -> list[RuleResult]:
    """Run the named rules of ``family`` (all that apply by default) on ``backend_class``; one result
    per rule, in order.

    ``data`` defaults to the kit's cached speech for the family (prepared on first use); ``kit``
    shares one kit, and what its rules computed, between calls. Either must be the family's.
    ``symbols``: the kit model's output symbols (``load_kit_data``; default: its own); given
    ``data`` or ``kit``, theirs must be as many.
    """
    selected = select_rules(rules, family, precision)
    if kit is None:
        kit = Kit(backend_class, data or load_kit_data(family=family, symbols=symbols), seed, device)
    elif kit.backend_class is not backend_class:
        raise ValueError(f"the kit tests {kit.backend_class.__name__}, not {backend_class.__name__}")
    if kit.family != family:
        raise ValueError(f"the kit's data is the {kit.family} family's, not {family}'s")
    if symbols is not None and kit.model.symbols != symbols:
        raise ValueError(f"the kit's model predicts {kit.model.symbols} symbols, not {symbols}")
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
        return RuleResult(rule.name, False, failure.message, time.perf_counter() - started, kit.family)
    except Exception as error:  # noqa: BLE001  (a backend's error fails the rule, not the kit)
        return RuleResult(rule.name, False, describe_error(error), time.perf_counter() - started, kit.family)
    return RuleResult(rule.name, True, note or "", time.perf_counter() - started, kit.family)


def _rule_set(family: str, precision: str = "fp32") -> tuple[Rule, ...]:
    """The rules that apply to ``family`` in ``precision``; an InputError for a family the kit cannot
    prove (no parts) or a precision it has no rules for."""
    try:
        parts = CheckedParts(parts_of_family(family), family)
        model = parts.kit_model().model
    except BenchbaseError as error:
        raise InputError(f"the conformance kit cannot prove model family {family!r}: {error}") from None
    if precision == "fp32":
        return tuple(rule for rule in RULES if rule.applies(parts, model))
    rules = tuple(rule for rule in PRECISION_RULE_SETS.get(precision, ()) if rule.applies(parts, model))
    if not rules:
        raise InputError(f"the conformance kit has no {precision} rules for the {family} family (it proves fp32 and, "
                         f"for a family with a quantized reference, {', '.join(sorted(PRECISION_RULE_SETS))})")
    return rules


def _proves(family: str, precision: str) -> bool:
    """Whether the kit has ``precision`` rules for ``family``."""
    try:
        return bool(_rule_set(family, precision))
    except InputError:
        return False


def resolve_backend(name: str) -> type[Backend]:
    """A registered backend class by name, through the plugin manager (entry points included)."""
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    registry = collect_registry(get_plugin_manager())
    try:
        return registry.backend(name)
    except ImportError as error:
        raise BenchbaseError(f"backend {name!r} cannot be imported: {describe_error(error)}") from None


def _elsewhere(names: list[str], *families: str) -> str:
    """"; 'x' does not apply to the rnnt family" for each name that is a rule every one of
    ``families`` skips."""
    skipped = {rule.name for rule in RULES}.difference(*({rule.name for rule in _rule_set(family)}
                                                         for family in families))
    return "".join(f"; {name!r} does not apply to the {' or '.join(families)} family" for name in names
                   if name in skipped)
