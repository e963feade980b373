"""The MLPerf-style compliance log (written with mlperf-logging's mllog)."""

from __future__ import annotations

from benchbase.compliance.log import ComplianceLog

__all__ = ["ComplianceLog"]
