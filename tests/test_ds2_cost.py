"""The DS2 family's cost model (benchbase.families.ds2.cost) against what the NumPy reference multiplies."""

from __future__ import annotations

import numpy as np
import pytest

from benchbase.families.ds2.cost import forward_flops, forward_flops_per_frame, total_forward_flops
from benchbase.families.ds2.reference import random_weights, reference_forward
from benchbase.families.ds2.spec import DS2ModelSpec
from benchbase.numerics.rounded import RoundedArithmetic
from benchbase.plugin_host.builtins.workloads import builtin_workload

# Unequal sizes everywhere, so that a size counted in the wrong place shows.
MODEL = DS2ModelSpec(symbols=29, conv_channels=12, conv_width=5, conv_stride=3, lstm_layers=3, lstm_units=7)
FEATURES = 11


def _reference_matmul_flops(monkeypatch, frames: int) -> int:
    """2 x the multiply-adds of every x @ kernel the reference computes for one utterance."""
    counted = []
    plain_dot = RoundedArithmetic.dot

    def counting_dot(self, x, kernel, bias=0.0):
        counted.append(2 * int(np.prod(x.shape[:-1])) * kernel.shape[0] * kernel.shape[1])
        return plain_dot(self, x, kernel, bias)

    monkeypatch.setattr(RoundedArithmetic, "dot", counting_dot)
    features = np.random.default_rng(frames).standard_normal((1, frames, FEATURES)).astype(np.float32)
    reference_forward(random_weights(MODEL, FEATURES, 0), MODEL, features, np.array([frames]), training=False)
    return sum(counted)


@pytest.mark.parametrize("frames", [5, 41, 42])  # one output frame; a stride that divides evenly; one that does not
def test_the_matmul_flops_are_what_the_reference_multiplies(monkeypatch, frames):
    parts = forward_flops(MODEL, FEATURES, frames)
    assert parts["conv"] + parts["lstm_matmul"] + parts["output"] == _reference_matmul_flops(monkeypatch, frames)


def test_an_utterance_costs_its_output_frames_times_one_frame():
    frame = forward_flops_per_frame(MODEL, FEATURES)
    assert forward_flops(MODEL, FEATURES, 42) == {part: 13 * value for part, value in frame.items()}
    assert total_forward_flops(frame) == frame["conv"] + frame["lstm"] + frame["output"]
    assert frame["lstm"] - frame["lstm_matmul"] == 13 * 7 * 3  # the gates' elementwise work, per unit and layer
    assert total_forward_flops(forward_flops(MODEL, FEATURES, MODEL.conv_width - 1)) == 0  # too short to convolve


def test_the_papers_model_costs_what_the_gpu_benchmarks_report():
    workload = builtin_workload("ds2")
    frame = total_forward_flops(forward_flops_per_frame(workload.model, workload.features.dimension))
    assert frame == pytest.approx(51.2e6, rel=1e-3)  # docs/BENCHMARKS.md: 51.2 MFLOP forward per output frame
