"""The conformance kit on the RNN-T family: a backend broken in one way fails the rule that names it
(every backend passes the kit in its own tests), and `benchbase backend-test --family`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
from busy_threads import busy_threads, spare_cores
from cli_helpers import run_benchbase

from benchbase.backend import Backend, Batch
from benchbase.errors import InputError
from benchbase.families.rnnt import reference
from benchbase.families.rnnt.bounds import bounded_transducer_loss
from benchbase.families.rnnt.loss import mean_transducer_loss
from benchbase.kit.conformance import (
    families_to_test,
    rules_by_family,
    run_conformance,
    select_rules,
)
from benchbase.kit.core import Kit
from benchbase.kit.data import IMPOSSIBLE_ROW, load_kit_data
from benchbase.testing import BackendConformance

torch = pytest.importorskip("torch")
TorchBackend = pytest.importorskip("benchbase_torch_ds2.backend").TorchBackend

pytestmark = pytest.mark.numerics  # `make test-isa` runs these again under a lower CPU ISA

RNNT_RULE_NAMES = [rule.name for rule in select_rules(None, "rnnt")]


@pytest.fixture(scope="module")
def rnnt_data():
    return load_kit_data(family="rnnt")


def test_the_rnnt_kit_reuses_the_kit_speech_with_one_row_too_short_for_any_encoder_frame(rnnt_data):
    ds2 = load_kit_data()
    batch = rnnt_data.impossible_batch
    assert rnnt_data.model.family == "rnnt" and rnnt_data.feature_dimension == ds2.feature_dimension
    assert [b.utterance_ids for b in rnnt_data.batches] == [b.utterance_ids for b in ds2.batches]
    assert (batch.output_lengths == 0).tolist() == [row == IMPOSSIBLE_ROW for row in range(batch.size)]
    assert batch.feature_lengths[IMPOSSIBLE_ROW] >= rnnt_data.model.input_stack
    assert all((b.output_lengths >= 1).all() for b in rnnt_data.batches)
    assert rnnt_data.model.dropout == 0.0 and rnnt_data.spec_model.dropout > 0


def test_the_loss_rule_compares_with_the_references_mean_transducer_loss(rnnt_data):
    """The rule's rounded computation, with no rounding moved, is the family's reference itself."""
    batch, model = rnnt_data.impossible_batch, rnnt_data.model
    weights = Kit(TorchBackend, rnnt_data).parity_weights()
    encoded, _ = reference.encoder_forward(weights, model, batch.features, batch.feature_lengths)
    predicted = reference.prediction_forward(weights, model, batch.labels, batch.label_lengths)
    log_probs = reference.joint(weights, model, encoded[:, : batch.output_lengths.max()], predicted)
    expected = mean_transducer_loss(log_probs, batch.labels, batch.output_lengths, batch.label_lengths,
                                    model.blank_index)
    bounded = bounded_transducer_loss(weights, model, batch)
    assert bounded.loss == pytest.approx(expected, rel=1e-12) and np.isinf(bounded.losses[IMPOSSIBLE_ROW])
    assert 0 < bounded.bound < 1e-4 * expected  # float32's roundings, far below a wrong reduction's factor


# ---------------------------------------------------------------- the PyTorch backend, broken


class CountsFrozenBias(TorchBackend):
    """parameter_count counts PyTorch's frozen second LSTM bias (bias_hh)."""

    def parameter_count(self):
        return sum(p.numel() for p in self.network.parameters())


class LenientImport(TorchBackend):
    """Fills a missing weight with its current value and ignores unknown names."""

    def import_weights(self, weights):
        current = self.export_weights()
        super().import_weights({name: weights.get(name, current[name]) for name in current})


class PredictDrawsRandomNumbers(TorchBackend):
    """predict() draws from torch's generator, so the next training step's dropout masks move."""

    def predict(self, inputs):
        torch.rand(1)
        return super().predict(inputs)


class EncoderOffByAHundredth(TorchBackend):
    def predict(self, inputs):
        return super().predict(inputs) + np.float32(0.01)


class LossScaled(TorchBackend):
    def train_step(self, batch):
        return 1.01 * super().train_step(batch)


class LossOverPossibleUtterances(TorchBackend):
    """Averages over the utterances that have an encoder frame only."""

    def train_step(self, batch):
        return super().train_step(batch) * batch.size / int((batch.output_lengths > 0).sum())


class OffOnceTrained(TorchBackend):
    """Honest on fresh or imported weights; after a training step, its encoder outputs drift."""

    def train_step(self, batch):
        self.trained = True
        return super().train_step(batch)

    def predict(self, inputs):
        outputs = super().predict(inputs)
        return outputs + np.float32(0.01) if getattr(self, "trained", False) else outputs


class IgnoresSeed(TorchBackend):
    def build(self, context):
        super().build(dataclasses.replace(context, seed=0))


class RemembersBatches(TorchBackend):
    """Remembers the utterances it trained on and moves their encoder outputs: predict() would
    know what it has seen."""

    def train_step(self, batch):
        self.__dict__.setdefault("seen", set()).update(_fingerprint(row) for row in batch.features)
        return super().train_step(batch)

    def predict(self, inputs):
        outputs = super().predict(inputs)
        for row, features in enumerate(inputs.features):
            if _fingerprint(features) in self.__dict__.get("seen", ()):
                outputs[row] += np.float32(0.5)
        return outputs


def _fingerprint(features: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(features).tobytes()).hexdigest()


class SpinsHelperThreads(TorchBackend):
    """Keeps as many extra threads as the machine has cores busy during every step."""

    def train_step(self, batch):
        with busy_threads(os.cpu_count() or 2):
            return super().train_step(batch)


class AdamWWithTheFrameworksBeta2(TorchBackend):
    """AdamW at every framework's default beta2 (0.999), whatever the spec pins."""

    def build(self, context):
        super().build(context)
        spec = context.optimizer
        if spec.name == "adamw":
            self.optimizer = torch.optim.AdamW(self.network.parameters(), lr=spec.learning_rate,
                                               betas=(spec.beta1, 0.999), eps=spec.epsilon,
                                               weight_decay=spec.weight_decay)


class CheckpointWithoutOptimizer(TorchBackend):
    def save_checkpoint(self, path):
        torch.save({"model": self.network.state_dict(), "rng": torch.get_rng_state()}, path)

    def load_checkpoint(self, path):
        state = torch.load(path, weights_only=True)
        self.network.load_state_dict(state["model"])
        torch.set_rng_state(state["rng"])


class WarmUpRestoresOnlyTheWeights(TorchBackend):
    """Trains a step on its first shape's zeros, then puts the weights back but not the optimizer's state."""

    def warm_up(self, shapes):
        shape, weights = shapes[0], self.export_weights()
        frames = np.full(shape.rows, shape.frames, np.int32)
        self.train_step(Batch(features=np.zeros((shape.rows, shape.frames, self.context.feature_dimension), np.float32),
                              feature_lengths=frames, output_lengths=self.context.model.output_frames(frames),
                              labels=np.ones((shape.rows, shape.label_length), np.int32),
                              label_lengths=np.full(shape.rows, shape.label_length, np.int32),
                              utterance_ids=("",) * shape.rows, transcripts=("",) * shape.rows))
        self.import_weights(weights)


BROKEN = [
    ("parameter_count", CountsFrozenBias),
    ("weight_round_trip", LenientImport),
    ("predict_shapes", PredictDrawsRandomNumbers),
    ("forward_parity", EncoderOffByAHundredth),
    ("loss", LossScaled),
    ("optimizer_update", AdamWWithTheFrameworksBeta2),
    ("checkpoint_round_trip", CheckpointWithoutOptimizer),
    ("predict_sees_only_features", RemembersBatches),
    ("prediction_matches_weights", OffOnceTrained),
    ("seed_determinism", IgnoresSeed),
    ("thread_budget", SpinsHelperThreads),
    ("warm_up", WarmUpRestoresOnlyTheWeights),
]


def test_every_rnnt_rule_has_a_broken_backend():
    assert [rule for rule, _ in BROKEN] == RNNT_RULE_NAMES


@pytest.mark.parametrize(("rule", "broken"), [
    # A spinning helper thread shows in the process's CPU time only on a core no other test is using.
    pytest.param(rule, broken, id=broken.__name__, marks=[pytest.mark.serial] if rule == "thread_budget" else [])
    for rule, broken in BROKEN])
def test_a_backend_broken_for_one_rnnt_rule_fails_that_rule_and_the_others_still_run(rnnt_data, rule, broken):
    if rule == "thread_budget" and spare_cores() < 1.6:
        pytest.skip("the machine is too busy for a second thread to show in this process's CPU time")
    other = "parameter_count" if rule != "parameter_count" else "weight_round_trip"
    results = {r.name: r for r in run_conformance(broken, [rule, other], family="rnnt", data=rnnt_data)}
    assert not results[rule].passed, f"{broken.__name__} passed {rule}"
    assert results[rule].message
    assert results[other].passed, results[other].message


def test_an_encoder_off_by_a_hundredth_fails_both_parity_rules_and_says_where(rnnt_data):
    rules = ["predict_shapes", "forward_parity", "prediction_matches_weights"]
    results = {r.name: r for r in run_conformance(EncoderOffByAHundredth, rules, family="rnnt", data=rnnt_data)}
    assert results["predict_shapes"].passed
    assert re.search(r"predict\(\) differs from the reference by 0\.01 at \(\d+, \d+, \d+\) \[row, frame, "
                     r"unit\] .*\(encoder projection\).* \(float32 rounding bound there \d",
                     results["forward_parity"].message)
    assert not results["prediction_matches_weights"].passed


def test_a_drift_after_training_fails_prediction_matches_weights_only(rnnt_data):
    rules = ["forward_parity", "prediction_matches_weights"]
    results = {r.name: r for r in run_conformance(OffOnceTrained, rules, family="rnnt", data=rnnt_data)}
    utterances = rnnt_data.impossible_batch.size + rnnt_data.small_inputs.size
    failure = results["prediction_matches_weights"]
    assert results["forward_parity"].passed, results["forward_parity"].message
    assert re.search(rf"after 3 training steps, .* \d+ of {utterances} utterances differ from the reference, "
                     r"worst by 0\.01\d* \(.*; tolerance \d", failure.message), failure.message


def test_a_wrong_loss_says_what_the_reference_computes_and_names_a_known_wrong_reduction(rnnt_data):
    [scaled] = run_conformance(LossScaled, ["loss"], family="rnnt", data=rnnt_data)
    assert re.fullmatch(r"train_step returned [\d.]+, the reference's mean transducer loss is [\d.]+ \(float32 "
                        r"rounding bound [\d.e-]+\)", scaled.message), scaled.message
    [possible] = run_conformance(LossOverPossibleUtterances, ["loss"], family="rnnt", data=rnnt_data)
    assert possible.message.endswith("it matches the mean over the possible utterances only (an impossible one "
                                     "must count as zero)")


# ---------------------------------------------------------------- choosing families and rules


class DeclaresDs2Only(Backend):
    name = "ds2-only"


def test_the_families_to_test_are_those_the_backend_declares_or_the_one_asked_for():
    assert families_to_test(TorchBackend) == sorted(TorchBackend.capabilities.families)
    assert families_to_test(TorchBackend, "rnnt") == ["rnnt"]
    assert families_to_test(DeclaresDs2Only) == ["ds2"]
    with pytest.raises(InputError, match=r"^backend 'ds2-only' does not implement the rnnt model family \(it "
                                         r"declares ds2\)$"):
        families_to_test(DeclaresDs2Only, "rnnt")
    with pytest.raises(InputError, match="the conformance kit cannot prove model family 'nope': model family 'nope' "
                                         "is unknown"):
        families_to_test(TorchBackend, "nope")


def test_every_rule_runs_for_every_family_unless_it_needs_what_the_family_lacks():
    """One rule set for every family: rnnt runs every rule but batchnorm_statistics (it has no BatchNorm)."""
    chosen = rules_by_family(["forward_parity", "batchnorm_statistics"], ["ds2", "rnnt"])
    assert {family: [rule.name for rule in rules] for family, rules in chosen.items()} == {
        "ds2": ["forward_parity", "batchnorm_statistics"], "rnnt": ["forward_parity"]}
    assert list(rules_by_family(["batchnorm_statistics"], ["ds2", "rnnt"])) == ["ds2"]
    every = {family: [rule.name for rule in rules] for family, rules in rules_by_family(None, ["ds2", "rnnt"]).items()}
    assert [name for name in every["ds2"] if name not in every["rnnt"]] == ["batchnorm_statistics"]
    assert {"predict_sees_only_features", "thread_budget"} <= set(every["rnnt"])
    assert not [name for names in every.values() for name in names if name.startswith("rnnt_")]
    with pytest.raises(InputError, match="'batchnorm_statistics' does not apply to the rnnt family; available: "
                                         "parameter_count"):
        select_rules(["batchnorm_statistics"], "rnnt")
    with pytest.raises(InputError, match="unknown conformance rule 'no_such_rule' for the families ds2, rnnt"):
        rules_by_family(["loss", "no_such_rule"], ["ds2", "rnnt"])


def conformance_cases(suite: type[BackendConformance]) -> list:
    """``suite``'s test_conformance cases (pytest.param), as pytest would collect them."""
    found: list = []
    metafunc = SimpleNamespace(function=suite.test_conformance, parametrize=lambda names, cases: found.extend(cases))
    suite().pytest_generate_tests(metafunc)
    return found


def conformance_test_ids(suite: type[BackendConformance]) -> list[str]:
    return [case.id for case in conformance_cases(suite)]


def test_a_backends_suite_runs_each_rule_of_each_family_it_declares_or_of_the_one_it_names():
    class TestTorch(BackendConformance):
        backend_class = TorchBackend

    class TestTorchOnRnnt(TestTorch):
        family = "rnnt"

    declared = sorted(TorchBackend.capabilities.families)
    assert len(declared) > 1
    assert conformance_test_ids(TestTorch) == [f"{family}-{rule.name}" for family in declared
                                               for rule in select_rules(None, family)]
    assert conformance_test_ids(TestTorchOnRnnt) == [f"rnnt-{name}" for name in RNNT_RULE_NAMES]
    assert conformance_test_ids(type("TestDs2Only", (BackendConformance,), {"backend_class": DeclaresDs2Only})) == [
        f"ds2-{rule.name}" for rule in select_rules(None, "ds2")]


def test_a_backends_suite_marks_slow_the_families_and_cases_it_names():
    class TestTorch(BackendConformance):
        backend_class = TorchBackend
        slow = ("rnnt", "ds2-loss")

    slow = {case.id for case in conformance_cases(TestTorch) if any(mark.name == "slow" for mark in case.marks)}
    assert slow == {f"rnnt-{name}" for name in RNNT_RULE_NAMES} | {"ds2-loss"}


def test_a_backends_suite_marks_numerics_the_rules_held_to_the_error_models_bounds():
    class TestTorch(BackendConformance):
        backend_class = TorchBackend

    numerics = {case.id for case in conformance_cases(TestTorch) if any(mark.name == "numerics" for mark in case.marks)}
    bounded = {f"{family}-{rule.name}" for family in sorted(TorchBackend.capabilities.families)
               for rule in select_rules(None, family) if rule.within_bounds}
    assert numerics == bounded and "ds2-forward_parity" in numerics and "ds2-parameter_count" not in numerics


def test_a_kit_of_another_family_is_refused(rnnt_data):
    with pytest.raises(ValueError, match="the kit's data is the rnnt family's, not ds2's"):
        run_conformance(TorchBackend, ["parameter_count"], kit=Kit(TorchBackend, rnnt_data))


def test_the_command_runs_each_declared_familys_rules_labelled_by_family():
    done = run_benchbase("backend-test", "torch", "--rule", "parameter_count", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    declared = sorted(TorchBackend.capabilities.families)
    assert report["passed"] and report["families"] == declared
    assert [(rule["family"], rule["rule"]) for rule in report["rules"]] == [
        (family, "parameter_count") for family in declared]


def test_the_command_with_family_runs_that_familys_rules_only():
    done = run_benchbase("backend-test", "torch", "--family", "rnnt", "--rule", "predict_sees_only_features")
    assert done.returncode == 0, done.stderr
    assert "PASS backend torch, rnnt family: 1/1 conformance rules pass" in " ".join(done.stdout.split())
    assert "ds2" not in done.stdout


def test_the_command_refuses_an_unknown_family_or_a_rule_that_does_not_apply_in_one_line_with_exit_2():
    for arguments, said in [(("--family", "nope"), "cannot prove model family 'nope'"),
                            (("--family", "rnnt", "--rule", "batchnorm_statistics"), "does not apply to the rnnt"),
                            (("--rule", "rnnt_forward_parity"), "unknown conformance rule 'rnnt_forward_parity'")]:
        done = run_benchbase("backend-test", "torch", *arguments)
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and said in done.stderr, done.stderr
