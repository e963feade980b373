"""The torch backend's RNN-T family: the transducer model, its loss, and what ``TorchBackend`` asks of them."""

from __future__ import annotations

from benchbase_torch_ds2.rnnt.family import RNNTFamily

__all__ = ["FAMILY"]

FAMILY = RNNTFamily()
