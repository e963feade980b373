"""The conformance kit on the Conformer family: each planted fault (what a Conformer backend typically
gets wrong about padding) fails the rule that covers it (every backend passes the kit in its own tests)."""

from __future__ import annotations

import pytest

from benchbase.kit.conformance import run_conformance
from benchbase.kit.data import load_kit_data

torch = pytest.importorskip("torch")
TorchBackend = pytest.importorskip("benchbase_torch_ds2.backend").TorchBackend
conformer_model = pytest.importorskip("benchbase_torch_ds2.conformer.model")
normalization = pytest.importorskip("benchbase_torch_ds2.conformer.normalization")

pytestmark = pytest.mark.numerics


@pytest.fixture(scope="module")
def conformer_data():
    return load_kit_data(family="conformer")


def _modules(backend, kind):
    return [module for module in backend.network.modules() if isinstance(module, kind)]


class BatchNormOverPaddedFrames(TorchBackend):
    """Its BatchNorm counts every frame of the padded batch, as PyTorch's own does."""

    def build(self, context):
        super().build(context)
        for norm in _modules(self, normalization.MaskedBatchNorm):
            original = norm.forward
            norm.forward = lambda x, padded, original=original: original(x, torch.zeros_like(padded))


class AttendsToPaddedKeys(TorchBackend):
    """Its self-attention gives the padded frames' keys weight too."""

    def build(self, context):
        super().build(context)
        for attention in _modules(self, conformer_model.SelfAttention):
            original = attention.forward
            attention.forward = lambda x, key_mask, original=original: original(x, torch.ones_like(key_mask))


class AugmentsItself(TorchBackend):
    """Draws its own SpecAugment time masks on the batch it is given (the harness's job)."""

    def train_step(self, batch):
        features = batch.features.copy()
        features[:, 10:20] = 0.0
        return super().train_step(type(batch)(**{**batch.__dict__, "features": features}))


@pytest.mark.parametrize(("rule", "broken"), [
    ("batchnorm_statistics", BatchNormOverPaddedFrames),
    ("forward_parity", AttendsToPaddedKeys),
    ("loss", AugmentsItself),
])
def test_a_planted_padding_fault_fails_its_rule(conformer_data, rule, broken):
    results = {r.name: r for r in run_conformance(broken, [rule, "parameter_count"], family="conformer",
                                                  data=conformer_data)}
    assert not results[rule].passed, f"{broken.__name__} passed {rule}"
    assert results["parameter_count"].passed


def test_positions_off_by_one_fail_forward_parity(conformer_data, monkeypatch):
    shifted = conformer_model.sinusoids
    monkeypatch.setattr(conformer_model, "sinusoids",
                        lambda frames, *rest: shifted(frames + 1, *rest)[1:])
    [result] = run_conformance(TorchBackend, ["forward_parity"], family="conformer", data=conformer_data)
    assert not result.passed and "differs from the reference" in result.message
