"""The Conformer family's cost model (benchbase.families.conformer.cost) against what PyTorch counts."""

from __future__ import annotations

import pytest

from benchbase.families.conformer.cost import attention_bytes, forward_flops, total_forward_flops
from benchbase.families.conformer.spec import ConformerModelSpec

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")
Conformer = pytest.importorskip("benchbase_torch_ds2.conformer.model").Conformer

# Unequal sizes where they can be, so that a size counted in the wrong place shows.
MODEL = ConformerModelSpec(encoder_dim=24, attention_heads=3, encoder_layers=2, feed_forward_expansion=3,
                           conv_kernel_size=7, symbols=29, dropout=0.0)


@pytest.mark.parametrize(("layers", "frames", "bins"), [(2, 61, 13), (1, 50, 16)])
def test_the_flops_are_what_pytorch_counts(layers, frames, bins):
    model = MODEL.model_copy(update={"subsampling_layers": layers})
    network = Conformer(model, bins).eval()
    with torch.no_grad(), flop_counter.FlopCounterMode(display=False) as counter:
        network(torch.randn(1, frames, bins), torch.tensor([frames]))
    parts = forward_flops(model, bins, frames)
    # FlopCounterMode counts no scaled_dot_product_attention kernel on a CPU (torch 2.13): the
    # matmuls and convolutions are the rest, and the scores are counted as the matmuls they are.
    assert counter.get_total_flops() == total_forward_flops(parts) - parts["attention_scores"]
    assert _explicit_attention_flops(model, model.output_frames(frames)) == parts["attention_scores"]


def _explicit_attention_flops(model: ConformerModelSpec, frames: int) -> int:
    heads, width = model.attention_heads, model.head_dim
    q, k, v = (torch.randn(1, heads, frames, width) for _ in range(3))
    with flop_counter.FlopCounterMode(display=False) as counter:
        for _ in range(model.encoder_layers):
            torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
    return counter.get_total_flops()


def test_attention_grows_with_the_square_of_the_frames_and_the_rest_linearly():
    short, long = forward_flops(MODEL, 80, 400), forward_flops(MODEL, 80, 800)
    assert long["attention_scores"] == pytest.approx(4 * short["attention_scores"], rel=0.02)
    assert long["feed_forward"] == pytest.approx(2 * short["feed_forward"], rel=0.02)
    assert attention_bytes(MODEL, 400) == 2 * 3 * 100 * 100 * 4  # 100 frames after 4x subsampling


def test_algoperfs_model_costs_39_gflops_for_ten_seconds_most_of_it_in_subsampling():
    """AlgoPerf's sizes, 10 s at 100 frames a second: its second subsampling convolution (512 to 512
    channels, 3x3, over 250 x 20) is 60% of the forward pass."""
    parts = forward_flops(ConformerModelSpec(symbols=1024), 80, 1000)
    assert total_forward_flops(parts) == pytest.approx(39.24e9, rel=1e-3)
    assert parts["subsampling"] / total_forward_flops(parts) == pytest.approx(0.606, abs=0.002)
