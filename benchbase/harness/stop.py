"""Why a run stopped: a closed set, written into run_stop's metadata and result.json.

The values are log vocabulary, so they are spelled in the log's keys module, like every key.
"""

from __future__ import annotations

from benchbase.compliance.keys import StopReason

__all__ = ["StopReason"]
