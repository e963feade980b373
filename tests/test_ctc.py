"""The NumPy CTC loss (benchbase.metrics.ctc) against PyTorch's, utterance by utterance."""

from __future__ import annotations

import numpy as np
import pytest

from benchbase.metrics.ctc import ctc_loss, mean_ctc_loss
from benchbase.numerics.tolerances import (
    BOTH_SIDES,
    FLOAT64_UNIT_ROUNDOFF,
    ctc_recursion_bound,
    ctc_recursion_bounds,
)

torch = pytest.importorskip("torch")


def _log_softmax(rng: np.random.Generator, batch: int, frames: int, symbols: int) -> np.ndarray:
    logits = rng.standard_normal((batch, frames, symbols)) * 3
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def _torch_losses(log_probs, output_lengths, labels, label_lengths, blank) -> np.ndarray:
    return torch.nn.functional.ctc_loss(
        torch.from_numpy(log_probs).double().transpose(0, 1), torch.from_numpy(labels).long(),
        torch.from_numpy(output_lengths).long(), torch.from_numpy(label_lengths).long(),
        blank=blank, reduction="none", zero_infinity=False,
    ).numpy()


def _random_problem(seed: int, blank: int, batch: int = 12, frames: int = 40, symbols: int = 8, longest: int = 12):
    rng = np.random.default_rng(seed)
    log_probs = _log_softmax(rng, batch, frames, symbols)
    output_lengths = rng.integers(frames // 2, frames + 1, batch).astype(np.int32)
    label_lengths = rng.integers(1, longest + 1, batch).astype(np.int32)
    others = np.array([s for s in range(symbols) if s != blank])
    labels = rng.choice(others, (batch, longest)).astype(np.int32)
    labels[0, :4] = labels[0, 0]  # repeated labels need a blank between their copies
    label_lengths[0] = max(label_lengths[0], 4)
    # Impossible: 5 labels with 2 repeated pairs need 7 frames; it has 6.
    labels[1, :5] = [others[0], others[0], others[1], others[1], others[2]]
    label_lengths[1], output_lengths[1] = 5, 6
    # Just possible: the same labels in exactly 7 frames.
    labels[2, :5] = labels[1, :5]
    label_lengths[2], output_lengths[2] = 5, 7
    for row in range(batch):
        labels[row, label_lengths[row]:] = blank  # padded with the blank, as in a Batch
    return log_probs, output_lengths, labels, label_lengths


@pytest.mark.parametrize(("seed", "blank"), [(0, 0), (1, 0), (2, 3), (3, 7)])
def test_every_utterances_loss_matches_torch(seed, blank):
    problem = _random_problem(seed, blank)
    ours = ctc_loss(*problem, blank=blank)
    theirs = _torch_losses(*problem, blank=blank)
    assert ours.dtype == np.float64 and ours.shape == (12,)
    assert np.isinf(ours[1]) and np.isinf(theirs[1])
    assert np.isfinite(ours[2])
    finite = np.isfinite(theirs)
    assert (np.isfinite(ours) == finite).all()
    # Two float64 CTC recursions (ours in NumPy, PyTorch's): each within its rounding bound.
    allowed = BOTH_SIDES * ctc_recursion_bounds(problem[1], theirs, FLOAT64_UNIT_ROUNDOFF)
    assert (np.abs(ours[finite] - theirs[finite]) <= allowed[finite]).all()


def test_the_batch_mean_counts_impossible_alignments_as_zero_and_divides_by_the_batch():
    problem = _random_problem(5, 0)
    theirs = _torch_losses(*problem, blank=0)
    expected = np.where(np.isinf(theirs), 0.0, theirs).sum() / len(theirs)
    allowed = BOTH_SIDES * ctc_recursion_bound(problem[1], theirs, FLOAT64_UNIT_ROUNDOFF)
    assert abs(mean_ctc_loss(*problem, blank=0) - expected) <= allowed
    assert mean_ctc_loss(*problem, blank=0, impossible="inf") == np.inf
    zero_infinity = torch.nn.functional.ctc_loss(
        torch.from_numpy(problem[0]).double().transpose(0, 1), torch.from_numpy(problem[2]).long(),
        torch.from_numpy(problem[1]).long(), torch.from_numpy(problem[3]).long(), blank=0, reduction="sum",
        zero_infinity=True).item() / len(theirs)
    assert abs(mean_ctc_loss(*problem, blank=0) - zero_infinity) <= allowed


def test_frames_and_labels_past_their_lengths_are_ignored():
    log_probs, output_lengths, labels, label_lengths = _random_problem(6, 0)
    before = ctc_loss(log_probs, output_lengths, labels, label_lengths, blank=0)
    scrambled = log_probs.copy()
    for row, length in enumerate(output_lengths):
        scrambled[row, length:] = -50.0
    longer = np.concatenate([labels, np.full((len(labels), 3), 5, dtype=np.int32)], axis=1)
    after = ctc_loss(scrambled, output_lengths, longer, label_lengths, blank=0)
    np.testing.assert_array_equal(before, after)


def test_a_single_frame_and_a_single_label_is_that_labels_log_probability():
    log_probs = np.log(np.array([[[0.1, 0.6, 0.3]]]))
    losses = ctc_loss(log_probs, np.array([1]), np.array([[1]]), np.array([1]), blank=0)
    assert losses[0] == pytest.approx(-np.log(0.6))
    no_frames = ctc_loss(log_probs, np.array([0]), np.array([[1]]), np.array([1]), blank=0)
    assert no_frames[0] == np.inf


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="output_lengths"):
        ctc_loss(np.zeros((1, 2, 3)), np.array([3]), np.array([[1]]), np.array([1]), blank=0)
    with pytest.raises(ValueError, match="batch"):
        ctc_loss(np.zeros((2, 2)), np.array([1]), np.array([[1]]), np.array([1]), blank=0)


def test_a_dev_sized_set_is_fast():
    """Validation loss on a few hundred utterances must not slow an evaluation down."""
    import time

    rng = np.random.default_rng(0)
    log_probs = _log_softmax(rng, 300, 200, 30)
    lengths = rng.integers(120, 201, 300)
    labels = rng.integers(1, 30, (300, 60))
    started = time.perf_counter()
    losses = ctc_loss(log_probs, lengths, labels, rng.integers(1, 61, 300), blank=0)
    assert np.isfinite(losses).all()
    assert time.perf_counter() - started < 5.0  # about 0.3 s on one core; generous for a loaded CI machine
