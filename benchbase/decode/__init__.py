"""CTC decoders. They live in the harness so that every backend is scored by the same one."""

from __future__ import annotations

from benchbase.decode.greedy import greedy_decode

__all__ = ["greedy_decode"]
