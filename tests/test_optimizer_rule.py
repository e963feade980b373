"""The kit's optimizer_update rule: the PyTorch backend passes it, and each planted optimizer fault
fails it with a message naming the setting.

Each faulty backend is the PyTorch backend with one change to its optimizer, declaring only the
optimizer the fault is in (and SGD, the gradient probe's), so that each test steps one optimizer.
They run on the Conformer's kit model: its float64 reference is the kit's fastest with BatchNorm.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from benchbase_torch_ds2.backend import TorchBackend  # noqa: E402

from benchbase.backend import Capabilities  # noqa: E402
from benchbase.kit.conformance import run_conformance  # noqa: E402
from benchbase.kit.data import load_kit_data  # noqa: E402
from benchbase.optimizers.reference import ReferenceOptimizer, clipped  # noqa: E402
from benchbase.specs.optimizer import AdaDeltaSpec, AdamWSpec, SGDSpec  # noqa: E402

FAMILY = "conformer"
RULE = "optimizer_update"


@pytest.fixture(scope="module")
def kit_data():
    return load_kit_data(family=FAMILY)


def _declaring(*optimizers: str) -> Capabilities:
    return dataclasses.replace(TorchBackend.capabilities, optimizers=frozenset({*optimizers, "sgd"}))


class _OptimizerSwapped(TorchBackend):
    """The PyTorch backend whose optimizer for ``replaced``'s kind is ``swap(parameters, spec)``."""

    replaced: type = AdaDeltaSpec

    def build(self, context):
        super().build(context)
        if isinstance(context.optimizer, self.replaced):
            parameters = [p for p in self.network.parameters() if p.requires_grad]
            self.optimizer = self.swap(parameters, context.optimizer)

    def swap(self, parameters, spec):
        raise NotImplementedError


class AdaDeltaWithTorchDefaults(_OptimizerSwapped):
    capabilities = _declaring("adadelta")

    def swap(self, parameters, spec):
        return torch.optim.Adadelta(parameters, lr=spec.learning_rate)  # rho 0.9, eps 1e-6


class AdamWWithDefaultBeta2(_OptimizerSwapped):
    capabilities, replaced = _declaring("adamw"), AdamWSpec

    def swap(self, parameters, spec):
        return torch.optim.AdamW(parameters, lr=spec.learning_rate, betas=(spec.beta1, 0.999), eps=spec.epsilon,
                                 weight_decay=spec.weight_decay)


class AdamWWithDefaultEpsilon(_OptimizerSwapped):
    capabilities, replaced = _declaring("adamw"), AdamWSpec

    def swap(self, parameters, spec):
        return torch.optim.AdamW(parameters, lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                 weight_decay=spec.weight_decay)


class AdamWithoutDecay(_OptimizerSwapped):
    capabilities, replaced = _declaring("adamw"), AdamWSpec

    def swap(self, parameters, spec):
        return torch.optim.AdamW(parameters, lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                 eps=spec.epsilon, weight_decay=0.0)


class AdamWithCoupledDecay(_OptimizerSwapped):
    capabilities, replaced = _declaring("adamw"), AdamWSpec

    def swap(self, parameters, spec):
        return torch.optim.Adam(parameters, lr=spec.learning_rate, betas=(spec.beta1, spec.beta2), eps=spec.epsilon,
                                weight_decay=spec.weight_decay)  # Adam's L2: added to the gradient


class _SpecChanged:
    """An optimizer spec with one thing changed, everything else read from the spec."""

    def __init__(self, spec, **changed) -> None:
        self._spec, self._changed = spec, changed

    def __getattr__(self, name):
        return self._changed.get(name, getattr(self._spec, name))

    def learning_rate_at(self, step: int) -> float:
        return self._spec.learning_rate_at(step + self._changed.get("schedule_offset", 0))


class _ContextChanged(TorchBackend):
    capabilities = _declaring("adamw")
    changed: dict = {}

    def build(self, context):
        super().build(context)
        if isinstance(context.optimizer, AdamWSpec):
            self.context = dataclasses.replace(context, optimizer=_SpecChanged(context.optimizer, **self.changed))


class ScheduleOneStepAhead(_ContextChanged):
    changed = {"schedule_offset": 1}


class ClipMissing(_ContextChanged):
    changed = {"gradient_clip_norm": None}


class TwoUpdatesPerStep(TorchBackend):
    capabilities = _declaring("adamw")

    def train_step(self, batch):
        loss = super().train_step(batch)
        super().train_step(batch)
        return loss


FAULTS = [
    (AdaDeltaWithTorchDefaults, "PyTorch's defaults (rho 0.9, epsilon 1e-06)"),
    (AdamWWithDefaultBeta2, "beta2 0.999"),
    (AdamWWithDefaultEpsilon, "epsilon 1e-08"),
    (AdamWithoutDecay, "no weight decay"),
    (AdamWithCoupledDecay, "weight decay coupled"),
    (ScheduleOneStepAhead, "schedule one step ahead"),
    (ClipMissing, "no gradient clipping"),
    (TwoUpdatesPerStep, "two updates in one step"),
]


@pytest.mark.parametrize(("backend_class", "named"), FAULTS, ids=[fault.__name__ for fault, _ in FAULTS])
def test_a_planted_optimizer_fault_fails_the_rule_naming_the_setting(kit_data, backend_class, named):
    [result] = run_conformance(backend_class, [RULE], family=FAMILY, data=kit_data)
    assert not result.passed
    assert named in result.message, result.message


def test_the_honest_torch_backend_passes_every_optimizer(kit_data):
    [result] = run_conformance(TorchBackend, [RULE], family=FAMILY, data=kit_data)
    assert result.passed, result.message
    for name in ("adadelta", "adamw (exponential decay)", "adamw (cosine decay)", "sgd"):
        assert name in result.message


# ------------------------------------------------------------------ the reference optimizer alone


def test_the_reference_adamw_decays_decoupled_and_follows_the_schedule():
    spec = AdamWSpec(learning_rate=0.1, weight_decay=0.5, warmup_steps=2)
    optimizer = ReferenceOptimizer(spec)
    weights = {"w": np.array([1.0, -2.0])}
    after = optimizer.step(weights, {"w": np.array([0.5, 0.0])})
    # Step 0: rate 0.05; Adam's first step is the gradient's sign (0 for 0); decay shrinks by 1 - 0.025.
    expected = weights["w"] * (1 - 0.05 * 0.5) - 0.05 * np.array([0.5 / (0.5 + 1e-8), 0.0])
    np.testing.assert_allclose(after["w"], expected, rtol=1e-12)


def test_the_reference_clips_the_global_norm_and_sgd_adds_l2_before_momentum():
    gradients = clipped({"a": np.array([3.0]), "b": np.array([4.0])}, 1.0)
    np.testing.assert_allclose([gradients["a"][0], gradients["b"][0]], [0.6, 0.8])
    optimizer = ReferenceOptimizer(SGDSpec(learning_rate=0.1, momentum=0.5, weight_decay=0.1))
    first = optimizer.step({"w": np.array([1.0])}, {"w": np.array([1.0])})
    second = optimizer.step(first, {"w": np.array([1.0])})
    assert first["w"][0] == pytest.approx(1.0 - 0.1 * 1.1)
    assert second["w"][0] == pytest.approx(first["w"][0] - 0.1 * (0.5 * 1.1 + 1.0 + 0.1 * first["w"][0]))


# ------------------------------------------------------------------ the kit's other seams


class PredictsInTrainingMode(TorchBackend):
    """predict() with dropout on: each call draws other masks."""

    def predict(self, inputs):
        eval_mode, self.network.eval = self.network.eval, lambda: self.network  # never leaves training mode
        try:
            return super().predict(inputs)
        finally:
            self.network.eval = eval_mode


def test_a_predict_left_in_training_mode_is_reported_as_not_deterministic(kit_data):
    [result] = run_conformance(PredictsInTrainingMode, ["predict_shapes"], family=FAMILY, data=kit_data)
    assert not result.passed
    assert "not deterministic (dropout on?)" in result.message, result.message


def test_a_family_parts_member_the_kit_needs_is_named_in_one_line(monkeypatch, kit_data):
    from benchbase.families.conformer.parts import ConformerParts

    monkeypatch.delattr(ConformerParts, "random_weights")
    [result] = run_conformance(TorchBackend, ["forward_parity"], family=FAMILY, data=kit_data)
    assert not result.passed
    assert result.message == ("MissingPart: model family 'conformer': its parts (ConformerParts) have no "
                              "random_weights, which FamilyParts requires")


def test_the_kit_turns_dropout_off_through_the_family_parts(kit_data):
    from benchbase.families.parts import parts_of_family

    assert kit_data.spec_model.dropout > 0
    assert kit_data.model == parts_of_family(FAMILY).without_dropout(kit_data.spec_model)
    assert kit_data.model.dropout == 0.0


class _AdaDeltaTwin:
    """A twin whose train_step applies AdaDelta (float32, as a framework would) to a known gradient."""

    def __init__(self, spec, gradients) -> None:
        self.spec, self.gradients, self.state = spec, iter(gradients), {}

    def import_weights(self, weights):
        self.weights = {name: np.asarray(value, np.float32).copy() for name, value in weights.items()}

    def train_step(self, batch):
        rho, eps, gradient = np.float32(self.spec.rho), np.float32(self.spec.epsilon), next(self.gradients)
        square, delta = self.state.get("square", np.float32(0)), self.state.get("delta", np.float32(0))
        square = rho * square + (1 - rho) * gradient * gradient
        update = np.sqrt(delta + eps) / np.sqrt(square + eps) * gradient
        self.state = {"square": square, "delta": rho * delta + (1 - rho) * update * update}
        self.weights["w"] = self.weights["w"] - np.float32(self.spec.learning_rate) * update
        return 0.0

    def export_weights(self):
        return dict(self.weights)


def test_the_adadelta_probe_reads_each_steps_gradient_through_the_state_earlier_steps_left():
    from benchbase.optimizers.probe import PROBE_ADADELTA, GradientProbe

    generator = np.random.default_rng(0)
    gradients = [generator.normal(0, 3, 50).astype(np.float32) for _ in range(3)]
    probe = GradientProbe(_AdaDeltaTwin(PROBE_ADADELTA, gradients), PROBE_ADADELTA, ["w"], 0.0)
    weights = {"w": generator.normal(0, 0.1, 50).astype(np.float32)}
    for gradient in gradients:
        read, bound = probe.gradient(weights, None)
        assert np.all(np.abs(read["w"] - gradient) <= bound["w"]), np.max(np.abs(read["w"] - gradient) / bound["w"])
