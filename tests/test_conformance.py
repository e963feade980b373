"""The backend conformance kit (benchbase.testing): it passes conforming backends, and each rule
fails a backend broken in exactly the way it exists to catch.

A NumPy backend built on the kit's own reference proves the kit without any framework; the
PyTorch backend's deliberately broken subclasses (one contract violation each) must fail exactly
their rule. The real backends pass the kit in their own tests (plugins/*/tests/).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import types
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from busy_threads import busy_threads, spare_cores
from cli_helpers import run_benchbase
from threadpoolctl import threadpool_limits

from benchbase.backend import Backend, Batch, BuildContext, Capabilities, Inputs
from benchbase.errors import BenchbaseError, InputError
from benchbase.families.ds2.reference import random_weights, reference_forward
from benchbase.families.ds2.weight_layout import validate_weights, weight_layout
from benchbase.kit import RULES, run_conformance
from benchbase.kit.conformance import Kit, select_rules
from benchbase.kit.data import IMPOSSIBLE_ROW, load_kit_data
from benchbase.metrics.ctc import mean_ctc_loss
from benchbase.testing import BackendConformance

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

try:
    import torch
    from benchbase_torch_ds2.backend import TorchBackend
except ImportError:  # the kit's own tests still run on the NumPy backend; the torch ones are skipped
    torch = None
    TorchBackend = Backend

RULE_NAMES = [rule.name for rule in RULES]


@pytest.fixture(scope="module")
def kit_data():
    return load_kit_data()


class ReferenceBackend(Backend):
    """The contract on NumPy, from the kit's own reference: a "step" computes the loss and moves
    BatchNorm's running statistics and a made-up optimizer state (no gradients: the rules only
    see losses, statistics, checkpoints and predictions)."""

    name = "numpy-reference"
    # No optimizer the spec language has: with no gradient step, optimizer_update has nothing to read.
    capabilities = Capabilities(optimizers=frozenset())

    def build(self, context: BuildContext) -> None:
        self.context = context
        self._limits = threadpool_limits(context.plan.threads) if context.plan.threads else None
        self.weights = random_weights(context.model, context.feature_dimension, seed=context.seed)
        self.velocity = np.zeros(context.model.symbols, np.float32)
        self.rng = np.random.default_rng(context.seed)

    def train_step(self, batch: Batch) -> float:
        log_probs, running = reference_forward(self.weights, self.context.model, batch.features,
                                               batch.feature_lengths, training=True)
        loss = mean_ctc_loss(log_probs, batch.output_lengths, batch.labels, batch.label_lengths,
                             self.context.model.ctc_blank_index)
        self.weights |= {name: value.astype(np.float32) for name, value in running.items()}
        self.velocity = 0.9 * self.velocity + self.rng.normal(0, 0.01, self.velocity.shape).astype(np.float32)
        self.weights["output.bias"] = self.weights["output.bias"] + self.velocity
        return loss

    def predict(self, inputs: Inputs) -> np.ndarray:
        log_probs, _ = reference_forward(self.weights, self.context.model, inputs.features, inputs.feature_lengths,
                                         training=False)
        return log_probs.astype(np.float32)

    def save_checkpoint(self, path: Path) -> None:
        path.write_bytes(pickle.dumps((self.weights, self.velocity, self.rng.bit_generator.state)))

    def load_checkpoint(self, path: Path) -> None:
        try:
            self.weights, self.velocity, self.rng.bit_generator.state = pickle.loads(path.read_bytes())
        except (pickle.UnpicklingError, ValueError, EOFError) as error:
            raise BenchbaseError(f"{path}: not a checkpoint ({error})") from None

    def parameter_count(self) -> int:
        layout = weight_layout(self.context.model, self.context.feature_dimension)
        return sum(int(np.prod(shape)) for name, shape in layout.items() if not name.endswith((".mean", ".variance")))

    def export_weights(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self.weights.items()}

    def import_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        validate_weights(weights, self.context.model, self.context.feature_dimension)
        self.weights = {name: np.array(value, dtype=np.float32) for name, value in weights.items()}

    def close(self) -> None:
        if getattr(self, "_limits", None) is not None:
            self._limits.restore_original_limits()


class TestReferenceBackendConformance(BackendConformance):
    backend_class = ReferenceBackend


def test_the_kit_batch_holds_one_impossible_alignment(kit_data):
    batch = kit_data.impossible_batch
    impossible = batch.output_lengths < batch.label_lengths
    assert impossible.tolist() == [row == IMPOSSIBLE_ROW for row in range(batch.size)]
    assert all((batch.output_lengths >= batch.label_lengths).all() for batch in kit_data.batches)
    assert kit_data.small_inputs.size < batch.size
    assert kit_data.model.dropout == 0.0 and kit_data.spec_model.dropout > 0


def test_an_unknown_rule_lists_the_available_ones():
    with pytest.raises(InputError, match="available: parameter_count, weight_round_trip"):
        select_rules(["parameter_count", "no_such_rule"])


def test_a_failing_rule_fails_its_pytest_test_with_the_rules_message(kit_data):
    class MiscountingBackend(ReferenceBackend):
        def parameter_count(self):
            return 1

    class TestMiscounting(BackendConformance):
        backend_class = MiscountingBackend

    with pytest.raises(pytest.fail.Exception, match=r"parameter_count: parameter_count\(\) returned 1, the ds2 spec"):
        TestMiscounting().test_conformance(Kit(MiscountingBackend, kit_data), "parameter_count")


def test_an_exception_inside_the_backend_fails_the_rule_with_its_type_and_message(kit_data):
    class NoDevice(ReferenceBackend):
        def build(self, context):
            raise RuntimeError("no device here")

    results = run_conformance(NoDevice, ["parameter_count", "loss"], data=kit_data)
    assert [(r.passed, r.message) for r in results] == [(False, "build() raised RuntimeError: no device here")] * 2


# ---------------------------------------------------------------- the PyTorch backend, broken
# Each backend passes the kit in its own tests (plugins/*/tests/test_*_conformance.py), as a
# third-party backend would.

needs_torch = pytest.mark.skipif(torch is None, reason="needs the PyTorch backend (benchbase_torch_ds2)")


class CountsFrozenBias(TorchBackend):
    """parameter_count counts PyTorch's frozen second LSTM bias."""

    def parameter_count(self):
        return sum(p.numel() for p in self.model.parameters())


class ImportSkipsRunningStatistics(TorchBackend):
    """import_weights leaves BatchNorm's running statistics as they were."""

    def import_weights(self, weights):
        kept = {name: array for name, array in self.export_weights().items()
                if name.endswith((".mean", ".variance"))}
        super().import_weights({**weights, **kept})


class PredictsFloat64(TorchBackend):
    def predict(self, inputs):
        return super().predict(inputs).astype(np.float64)


class PredictsAsContract2Did(TorchBackend):
    """Returns (log_probs, output_lengths), as backend contract 2 asked."""

    def predict(self, inputs):
        return super().predict(inputs), inputs.output_lengths.astype(np.int32)


class PlainRelu(TorchBackend):
    """ReLU without DS2's ceiling of 20."""

    def build(self, context):
        super().build(context)
        self.model._activation = torch.relu


class MeanOverLabelLengths(TorchBackend):
    """PyTorch's reduction='mean': divided by each label length, then averaged."""

    def train_step(self, batch):
        log_probs = self.model(self._tensor(batch.features))
        loss = torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1), self._tensor(batch.labels), self._tensor(batch.output_lengths).long(),
            self._tensor(batch.label_lengths).long(), blank=self.spec.ctc_blank_index, reduction="mean",
            zero_infinity=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())


class UnbiasedRunningVariance(TorchBackend):
    """PyTorch's own BatchNorm: the unbiased variance goes into the running estimate."""

    def build(self, context):
        super().build(context)
        for norm in (self.model.conv_norm, *self.model.lstm_norms):
            norm.momentum = 1.0 - context.model.batchnorm_momentum
            norm.forward = types.MethodType(torch.nn.BatchNorm1d.forward, norm)


class CheckpointWithoutOptimizer(TorchBackend):
    def save_checkpoint(self, path):
        torch.save({"model": self.model.state_dict(), "rng": torch.get_rng_state()}, path)

    def load_checkpoint(self, path):
        state = torch.load(path, weights_only=True)
        self.model.load_state_dict(state["model"])
        torch.set_rng_state(state["rng"])


class AdaDeltaWithFrameworkDefaults(TorchBackend):
    """PyTorch's AdaDelta as it comes (rho 0.9, eps 1e-6), whatever the spec pins."""

    def build(self, context):
        super().build(context)
        if context.optimizer.name == "adadelta":
            self.optimizer = torch.optim.Adadelta(self.network.parameters(), lr=context.optimizer.learning_rate)


class RemembersLabels(TorchBackend):
    """Remembers the labels of the batches it trained on and nudges predictions toward them."""

    def train_step(self, batch):
        self.__dict__.setdefault("seen", {})
        for row in range(batch.size):
            self.seen[_fingerprint(batch.features[row])] = batch.labels[row, : batch.label_lengths[row]]
        return super().train_step(batch)

    def predict(self, inputs):
        log_probs = super().predict(inputs)
        for row in range(inputs.size):
            labels = self.__dict__.get("seen", {}).get(_fingerprint(inputs.features[row]))
            if labels is not None:  # each label a little likelier on every other frame
                count = min(len(labels), log_probs.shape[1] // 2)
                log_probs[row, np.arange(count) * 2, labels[:count]] += 1.0
        shifted = log_probs - log_probs.max(-1, keepdims=True)
        return (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))).astype(np.float32)


class BoostsASymbolOnceTrained(TorchBackend):
    """Once it has trained, predict() adds 0.5 to one symbol's log-probability and renormalizes:
    a made-up output that the rules on fresh or imported weights never see."""

    BOOSTED_SYMBOL = 5

    def train_step(self, batch):
        self.trained = True
        return super().train_step(batch)

    def predict(self, inputs):
        log_probs = super().predict(inputs)
        if not self.__dict__.get("trained"):
            return log_probs
        log_probs[..., self.BOOSTED_SYMBOL] += 0.5
        shifted = log_probs - log_probs.max(-1, keepdims=True)
        return (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))).astype(np.float32)


def _fingerprint(features: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(features).tobytes()).hexdigest()


class IgnoresSeed(TorchBackend):
    def build(self, context):
        super().build(BuildContext(**{**context.__dict__, "seed": 0}))


class SpinsHelperThreads(TorchBackend):
    """Keeps as many extra threads as the machine has cores busy during every step (hashing
    releases the GIL, so they run beside the step)."""

    def train_step(self, batch):
        with busy_threads(os.cpu_count() or 2):
            return super().train_step(batch)


class WarmsUpWithARealStep(TorchBackend):
    """Compiles by training a step on a batch of zeros: the weights move before the clock."""

    def warm_up(self, shapes):
        self.train_step(_zeros(shapes[0], self.context))


class WarmUpRestoresOnlyTheWeights(TorchBackend):
    """Trains a step on zeros, then puts the weights back but not the optimizer's state."""

    def warm_up(self, shapes):
        weights = self.export_weights()
        self.train_step(_zeros(shapes[0], self.context))
        self.import_weights(weights)


def _zeros(shape, context) -> Batch:
    frames = np.full(shape.rows, shape.frames, np.int32)
    return Batch(features=np.zeros((shape.rows, shape.frames, context.feature_dimension), np.float32),
                 feature_lengths=frames, output_lengths=context.model.output_frames(frames),
                 labels=np.ones((shape.rows, shape.label_length), np.int32),
                 label_lengths=np.full(shape.rows, shape.label_length, np.int32),
                 utterance_ids=("",) * shape.rows, transcripts=("",) * shape.rows)


BROKEN = [
    ("parameter_count", CountsFrozenBias),
    ("weight_round_trip", ImportSkipsRunningStatistics),
    ("predict_shapes", PredictsFloat64),
    ("predict_shapes", PredictsAsContract2Did),
    ("forward_parity", PlainRelu),
    ("loss", MeanOverLabelLengths),
    ("batchnorm_statistics", UnbiasedRunningVariance),
    ("optimizer_update", AdaDeltaWithFrameworkDefaults),
    ("checkpoint_round_trip", CheckpointWithoutOptimizer),
    ("predict_sees_only_features", RemembersLabels),
    ("prediction_matches_weights", BoostsASymbolOnceTrained),
    ("seed_determinism", IgnoresSeed),
    ("thread_budget", SpinsHelperThreads),
    ("warm_up", WarmsUpWithARealStep),
    ("warm_up", WarmUpRestoresOnlyTheWeights),
]


def test_every_rule_has_a_broken_backend():
    assert {rule for rule, _ in BROKEN} == set(RULE_NAMES)


@needs_torch
@pytest.mark.parametrize(("rule", "broken"), [
    # A spinning helper thread shows in the process's CPU time only on a core no other test is using.
    pytest.param(rule, broken, id=broken.__name__, marks=[pytest.mark.serial] if rule == "thread_budget" else [])
    for rule, broken in BROKEN])
def test_a_backend_broken_for_one_rule_fails_that_rule_and_the_others_still_run(kit_data, rule, broken):
    if rule == "thread_budget" and spare_cores() < 1.6:
        pytest.skip("the machine is too busy for a second thread to show in this process's CPU time")
    other = "parameter_count" if rule != "parameter_count" else "predict_shapes"
    results = {r.name: r for r in run_conformance(broken, [rule, other], data=kit_data)}
    assert not results[rule].passed, f"{broken.__name__} passed {rule}"
    assert results[rule].message
    assert results[other].passed, results[other].message


@needs_torch
def test_a_predict_that_departs_from_its_trained_weights_fails_prediction_matches_weights(kit_data):
    # On fresh or imported weights it predicts honestly, so the rules that predict without
    # training pass; after training, the reference on its own exported weights shows the boost.
    rules = ["predict_shapes", "forward_parity", "prediction_matches_weights"]
    results = {r.name: r for r in run_conformance(BoostsASymbolOnceTrained, rules, data=kit_data)}
    assert results["predict_shapes"].passed and results["forward_parity"].passed
    failure = results["prediction_matches_weights"]
    utterances = kit_data.impossible_batch.size + kit_data.small_inputs.size
    assert not failure.passed
    assert re.search(rf"after 3 training steps, .* \d+ of {utterances} utterances differ from the reference, "
                     r"worst by 0\.\d+ \(.*; tolerance \d", failure.message), failure.message


@needs_torch
def test_a_passing_numerical_rule_says_how_close_the_backend_came_to_its_bound(kit_data):
    """A backend's author (and a GPU session) sees its margin, not only a pass: the share of its
    bound that the closest compared value used."""
    rules = {"forward_parity": r"closest element at (\S+) of its bound", "loss": r"(\S+) of its bound",
             "prediction_matches_weights": r"closest utterance at (\S+) of its tolerance"}
    for result in run_conformance(TorchBackend, list(rules), data=kit_data):
        share = re.fullmatch(rules[result.name], result.message)
        assert result.passed and share, result
        assert 0 <= float(share[1]) < 1, result


@needs_torch
def test_the_command_runs_the_named_rules_and_exits_0_when_they_pass():
    done = run_benchbase("backend-test", "torch", "--family", "ds2", "--rule", "parameter_count", "--rule",
                         "predict_shapes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] and [rule["rule"] for rule in report["rules"]] == ["parameter_count", "predict_shapes"]


def test_the_command_refuses_an_unknown_backend_in_one_line_with_exit_2():
    done = run_benchbase("backend-test", "no-such-backend")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "unknown backend 'no-such-backend'" in done.stderr
