"""The Conformer family's spec, layout and float64 reference: sizes, frames, masks."""

from __future__ import annotations

import numpy as np
import pytest

from benchbase.families.conformer.parts import KIT_MODEL, PARTS
from benchbase.families.conformer.reference import positions, random_weights, reference_forward
from benchbase.families.conformer.spec import ConformerModelSpec
from benchbase.families.conformer.weight_layout import weight_layout

pytestmark = pytest.mark.numerics

SMALL = ConformerModelSpec(encoder_dim=8, attention_heads=2, encoder_layers=2, feed_forward_expansion=2,
                           conv_kernel_size=3, subsampling_layers=2, symbols=7, dropout=0.0)
FEATURES = 10


def _features(lengths, frames, seed=0):
    """Random features, zero past each row's length (as the harness pads)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(len(lengths), frames, FEATURES)).astype(np.float32)
    features[np.arange(frames)[None, :] >= np.asarray(lengths)[:, None]] = 0.0
    return features, np.asarray(lengths, np.int32)


def test_the_full_model_has_algoperfs_parameter_count():
    """32,321,792: AlgoPerf's librispeech_conformer PyTorch model, counted from its source layer by
    layer (subsampling convs 5,120 + 2,359,808, projection 5,243,392, four blocks of 6,046,784,
    final LayerNorm 1,024, output 525,312 for 1024 pieces over 80 mel bins)."""
    model = ConformerModelSpec(symbols=1024)
    layout = weight_layout(model, 80)
    trainable = sum(int(np.prod(shape)) for name, shape in layout.items()
                    if not name.endswith((".mean", ".variance")))
    assert model.parameter_count(80) == trainable == 32_321_792


@pytest.mark.parametrize("layers", [1, 2])
def test_output_frames_halve_per_layer_rounding_up_and_input_frames_for_is_the_fewest(layers):
    model = SMALL.model_copy(update={"subsampling_layers": layers})
    for frames in range(1, 40):
        expected = frames
        for _ in range(layers):
            expected = int(np.ceil(expected / 2))
        assert model.output_frames(frames) == expected
    for outputs in range(1, 12):
        fewest = model.input_frames_for(outputs)
        assert model.output_frames(fewest) == outputs and model.output_frames(fewest - 1) < outputs


def test_an_utterances_outputs_do_not_depend_on_the_batch_it_is_padded_in():
    weights = random_weights(SMALL, FEATURES, seed=3)
    features, lengths = _features([23, 40, 9], 40)
    batched, _ = reference_forward(weights, SMALL, features, lengths, training=False)
    for row, length in enumerate(lengths):
        alone, _ = reference_forward(weights, SMALL, features[row : row + 1, :length], lengths[row : row + 1],
                                     training=False)
        valid = SMALL.output_frames(int(length))
        np.testing.assert_allclose(alone[0, :valid], batched[row, :valid], rtol=0, atol=1e-12)


def test_batchnorm_statistics_are_over_the_valid_frames_only():
    """Padding a batch further changes neither the loss's inputs nor the running statistics."""
    weights = random_weights(SMALL, FEATURES, seed=4)
    features, lengths = _features([23, 31], 31)
    longer = np.concatenate([features, np.zeros((2, 17, FEATURES), np.float32)], axis=1)
    _, running = reference_forward(weights, SMALL, features, lengths, training=True)
    _, padded_running = reference_forward(weights, SMALL, longer, lengths, training=True)
    assert set(running) == {f"blocks.{b}.conv.batchnorm.{s}" for b in range(2) for s in ("mean", "variance")}
    for name, value in running.items():
        np.testing.assert_allclose(padded_running[name], value, rtol=1e-12, atol=1e-14)
        assert not np.allclose(value, weights[name])  # the step moved them


def test_positions_are_sines_then_cosines_over_geometric_timescales():
    table = positions(5, 8, 10_000.0)
    rates = 10_000.0 ** (-np.arange(4) / 3)
    np.testing.assert_allclose(table[3, :4], np.sin(3 * rates))
    np.testing.assert_allclose(table[3, 4:], np.cos(3 * rates))


def test_the_kit_model_keeps_every_kit_alignment_feasible_but_the_cut_row():
    """The kit's Conformer subsamples once: CTC needs an output frame per label at least."""
    assert KIT_MODEL.model.subsampling_layers == 1
    assert PARTS.impossible_frames(KIT_MODEL.model, 10) < KIT_MODEL.model.input_frames_for(10)
