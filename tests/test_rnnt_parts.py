"""What the harness does with an RNN-T model (benchbase.families.rnnt.parts): the encoder's rounding
bound, the transducer search and loss as the harness runs them on exported weights, and independent
scoring's verdict on an honest and a lying predict()."""

from __future__ import annotations

import numpy as np
import pytest

from benchbase.backend import Batch
from benchbase.data.alphabet import decode_labels
from benchbase.families.agreement import UtteranceOutputs, compare_with_reference
from benchbase.families.parts import family_parts
from benchbase.families.rnnt import RNNTModelSpec
from benchbase.families.rnnt.greedy import greedy_decode
from benchbase.families.rnnt.loss import transducer_loss
from benchbase.families.rnnt.reference import encoder_forward, joint, prediction_forward, random_weights
from benchbase.numerics.tolerances import FLOAT32_UNIT_ROUNDOFF

FEATURES = 6
pytestmark = pytest.mark.numerics


def small_model(**fields) -> RNNTModelSpec:
    sizes = dict(symbols=30, input_stack=2, input_subsample=2, encoder_pre_layers=1, stack_time_factor=2,
                 encoder_post_layers=1, encoder_units=12, prediction_embedding=6, prediction_layers=1,
                 prediction_units=8, joint_units=10, dropout=0.0)
    return RNNTModelSpec(**(sizes | fields))


@pytest.fixture
def batch() -> Batch:
    rng = np.random.default_rng(3)
    model = small_model()
    lengths = np.array([41, 29, 7, 3], dtype=np.int32)  # the last has no encoder frame: no alignment
    features = rng.normal(size=(4, 41, FEATURES)).astype(np.float32)
    features[np.arange(41)[None, :] >= lengths[:, None]] = 0.0
    label_lengths = np.array([5, 3, 2, 1], dtype=np.int32)
    labels = rng.integers(1, 29, size=(4, 5)).astype(np.int32)
    return Batch(features, lengths, model.output_frames(lengths), labels=labels, label_lengths=label_lengths,
                 utterance_ids=("a", "b", "c", "d"), transcripts=("", "", "", ""))


def test_the_encoders_bound_is_a_float32_roundoff_of_its_outputs_and_the_exact_outputs_are_the_reference(batch):
    model = small_model()
    weights = random_weights(model, FEATURES, np.random.default_rng(0))
    parts = family_parts(model)
    exact, bound = parts.bounded_outputs(weights, model, batch.features, batch.feature_lengths, 0.0, 3)
    expected, _ = encoder_forward(weights, model, batch.features, batch.feature_lengths)
    np.testing.assert_array_equal(exact, expected)
    assert exact.shape == (4, model.output_frames(41), parts.output_width(model))
    # Every output moves by some roundoffs of float32 and by far less than its own magnitude.
    assert np.all(bound > 0) and np.max(bound) < 1e4 * FLOAT32_UNIT_ROUNDOFF * max(np.max(np.abs(exact)), 1.0)


def test_a_float32_computation_agrees_with_the_reference_and_a_nudged_one_does_not(batch):
    model = small_model()
    weights = random_weights(model, FEATURES, np.random.default_rng(1))
    # The reference's own encoder in float32 arithmetic stands for an honest float32 backend.
    as_float32 = {name: value.astype(np.float32) for name, value in weights.items()}
    honest = _float32_encoder(as_float32, model, batch)
    nudged = honest.copy()
    nudged[1, 0, 3] += 0.05
    for outputs, disagreeing in ((honest, []), (nudged, ["b"])):
        rows = [UtteranceOutputs.of_row(utterance, batch.inputs(), outputs, row)
                for row, utterance in enumerate(batch.utterance_ids[:3])]
        assert compare_with_reference(weights, model, rows, draws=1).disagreeing == disagreeing


def test_the_harness_decodes_and_scores_with_the_exported_weights(batch):
    model = small_model()
    weights = random_weights(model, FEATURES, np.random.default_rng(2))
    encoded, lengths = encoder_forward(weights, model, batch.features, batch.feature_lengths)
    asked = []
    head = family_parts(model).evaluation_head(model, decoder=None, weights=lambda: asked.append(1) or weights)
    assert asked == [1]  # the search needs the weights once, when the evaluation starts
    texts = head.decode(encoded.astype(np.float32), lengths)
    found = greedy_decode(weights, model, encoded.astype(np.float32), lengths, model.max_symbols_per_frame)
    assert texts == [decode_labels(labels) for labels in found] == head.greedy(encoded.astype(np.float32), lengths)
    losses = head.losses(encoded, batch)
    predicted = prediction_forward(weights, model, batch.labels, batch.label_lengths)
    expected = transducer_loss(joint(weights, model, encoded, predicted), batch.labels, lengths,
                               batch.label_lengths, model.blank_index)
    assert lengths[3] == 0 and np.isinf(expected[3]) and losses[3] == 0.0  # transducer_impossible_alignments
    np.testing.assert_allclose(losses[:3], expected[:3], rtol=1e-12)


def _float32_encoder(weights, model: RNNTModelSpec, batch: Batch) -> np.ndarray:
    from benchbase.families.rnnt.bounds import rounded_encoder
    from benchbase.numerics.rounded import RoundedArithmetic

    class Float32(RoundedArithmetic):
        def dot(self, x, kernel, bias=0.0):
            return (x.astype(np.float32) @ kernel.astype(np.float32) + np.float32(bias)).astype(np.float64)

        def function(self, value, operations=1):
            return value.astype(np.float32).astype(np.float64)

    return rounded_encoder(weights, model, batch.features, Float32(None)).astype(np.float32)
