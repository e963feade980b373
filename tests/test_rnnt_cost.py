"""The RNN-T family's cost model (benchbase.families.rnnt.cost) against what PyTorch counts."""

from __future__ import annotations

import pytest

from benchbase.families.rnnt.cost import forward_flops, joint_bytes, total_forward_flops
from benchbase.families.rnnt.spec import RNNTModelSpec

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")
RNNTransducer = pytest.importorskip("benchbase_torch_ds2.rnnt.model").RNNTransducer

# Unequal sizes everywhere, so that a size counted in the wrong place shows.
MODEL = RNNTModelSpec(symbols=29, encoder_units=32, prediction_embedding=16, prediction_units=24, joint_units=20,
                      encoder_pre_layers=2, encoder_post_layers=1, prediction_layers=2)


@pytest.mark.parametrize(("frames", "labels"), [(50, 7), (61, 1)])
def test_the_matmul_flops_are_what_pytorch_counts_on_the_full_lattice(frames, labels):
    # The int8-emulated network runs each LSTM as explicit matmuls (the fused kernel is one
    # opaque call FlopCounterMode does not count); quantization adds no matmul.
    network = RNNTransducer(MODEL.model_copy(update={"precision": "int8-emulated"}), 13).eval()
    features, label_ids = torch.randn(1, frames, 13), torch.randint(0, 28, (1, labels))
    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        network.joint(network.encode(features), network.predict_net(label_ids, torch.tensor([labels])))
    parts = forward_flops(MODEL, 13, frames, labels)
    matmuls = parts["encoder_matmul"] + parts["prediction_matmul"] + parts["joint_projections"] + parts["joint_output"]
    assert counter.get_total_flops() == matmuls


def test_the_joint_grows_with_frames_times_labels_and_the_encoder_with_frames_only():
    short, long = forward_flops(MODEL, 13, 120, 10), forward_flops(MODEL, 13, 240, 20)
    assert long["joint_output"] == pytest.approx(short["joint_output"] * 2 * 21 / 11, rel=0.05)
    assert long["encoder"] == pytest.approx(2 * short["encoder"], rel=0.05)
    assert total_forward_flops(short) == sum(value for name, value in short.items() if "matmul" not in name)
    assert joint_bytes(MODEL, 2, 10, 4) == {"hidden": 2 * 10 * 5 * 20 * 4, "log_probs": 2 * 10 * 5 * 29 * 4}
