"""Reports over run folders: olympic scores, the paper's tables and figures, cost and energy."""

from __future__ import annotations

from benchbase.report.cost import CostModel, energy_kwh
from benchbase.report.report_table import ReportTable
from benchbase.report.runs import Run, RunGroup, load_groups
from benchbase.report.scoring import OlympicScore, olympic_score, score_group

__all__ = [
    "CostModel",
    "OlympicScore",
    "ReportTable",
    "Run",
    "RunGroup",
    "energy_kwh",
    "load_groups",
    "olympic_score",
    "score_group",
]
