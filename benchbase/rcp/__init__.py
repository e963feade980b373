"""Reference convergence points (RCPs): MLPerf's rule that a set of runs may not converge in
significantly fewer epochs than the reference implementation did (docs/rcp.md).

rule.py is the rule on numbers (mlperf_logging's rcp_checker, per target); points.py the RCP file
and the files that ship with benchbase; runs.py reads a run's epochs to each target from its log;
making.py makes an RCP file of reference runs; checking.py holds groups of runs to one; tables.py
lays the results out for the CLI.
"""

from __future__ import annotations

from benchbase.rcp.checking import GroupJudgement, GroupRcp, judge_group, rcp_for, rcp_of_groups
from benchbase.rcp.making import make_rcp
from benchbase.rcp.points import RcpFile, bundled_rcp, load_rcp, read_rcp_text
from benchbase.rcp.rule import Case, ReferencePoint, Verdict, judge, reference_point
from benchbase.rcp.runs import RunConvergence, read_convergence

__all__ = [
    "Case",
    "GroupJudgement",
    "GroupRcp",
    "RcpFile",
    "ReferencePoint",
    "RunConvergence",
    "Verdict",
    "bundled_rcp",
    "judge",
    "judge_group",
    "load_rcp",
    "make_rcp",
    "rcp_for",
    "rcp_of_groups",
    "read_convergence",
    "read_rcp_text",
    "reference_point",
]
