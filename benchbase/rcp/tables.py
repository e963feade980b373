"""The RCP's tables as plain data (ReportTable): an RCP file's points, a group's verdicts, and the RCP
column that `benchbase score` adds to its olympic scores. The CLI renders them."""

from __future__ import annotations

from dataclasses import replace

from benchbase.rcp.checking import GroupJudgement, GroupRcp
from benchbase.rcp.points import RcpFile
from benchbase.rcp.rule import Case, Verdict, prune
from benchbase.report.report_table import ReportTable, format_cell

__all__ = ["FAIL", "FAILED_SCORE", "NOT_JUDGED", "PASS", "points_table", "verdict_cell", "verdict_table",
           "verdict_word", "with_rcp_column"]

RCP_HEADER = "RCP"
PASS, FAIL, NOT_JUDGED = "pass", "fail", "NA"
"""A target's verdict as `rcp check`, `score` and `summarize` all spell it."""
FAILED_SCORE = "(RCP fail)"
"""After a score whose set fails the RCP: MLPerf does not count it as a result."""


def verdict_word(verdict: Verdict) -> str:
    """A verdict in a word: pass, fail, or NA for a set of another size than the RCP's, which the rule
    does not judge."""
    if verdict.case is Case.WRONG_RUN_COUNT:
        return NOT_JUDGED
    return PASS if verdict.passed else FAIL


def verdict_cell(verdict: Verdict) -> str:
    """``verdict_word``, with the norm factor after a pass whose score MLPerf would normalize."""
    word = verdict_word(verdict)
    return f"{word} x{verdict.norm_factor:.3f}" if word == PASS and verdict.norm_factor > 1 else word


def points_table(rcp: RcpFile, source: str) -> ReportTable:
    """Every RCP of the file, as the rule derives it: per target and batch size."""
    rows = []
    for target in rcp.tta.targets:
        points = rcp.points(target.label)
        kept = {point.batch for point in prune(points, rcp.submission_runs)}
        for point, batch in zip(points, sorted(rcp.batches, key=lambda batch: batch.global_batch)):
            epochs = sorted(run.epochs[target.label] for run in batch.runs)
            rows.append([target.label, point.batch, point.runs, f"{epochs[0]}-{epochs[-1]}", point.mean, point.stdev,
                         point.min_epochs, point.max_speedup, "yes" if point.batch in kept else "pruned"])
    notes = [f"{rcp.workload} on {rcp.reference_backend}, {rcp.tta.subset or 'the first dev subset'}, window "
             f"{rcp.tta.window}; a submission set has exactly {rcp.submission_runs} runs. Mean: olympic; stdev: "
             "population; min epochs: the smallest olympic mean a set may have (one-sided t-test, alpha 0.05). "
             f"From {source}."]
    return ReportTable("reference convergence points (epochs)", ["target", "batch", "runs", "epochs", "mean", "stdev",
                       "min epochs", "max speedup", "used"], rows, name="rcp-points", notes=notes)


def verdict_table(judgement: GroupJudgement) -> ReportTable:
    rows = [[label, verdict.rcp_mean, verdict.min_epochs, verdict.submission_mean, verdict_cell(verdict),
             f"{verdict.case}: {verdict.explanation}"] for label, verdict in judgement.verdicts.items()]
    status = "PASS" if judgement.passed else "FAIL"
    runs = len(judgement.group.runs)
    return ReportTable(f"{status} {judgement.group.name}: {judgement.rcp.workload}, batch {judgement.batch}, {runs} "
                       f"run(s) against {judgement.source}",
                       ["target", "RCP mean", "min epochs", "runs' olympic mean", "verdict", "note"], rows,
                       name=f"rcp-{judgement.group.name}")


def with_rcp_column(table: ReportTable, rcps: dict[str, GroupRcp]) -> ReportTable:
    """``benchbase score``'s table (rows: group, target, ..., score, ..., note) with each row's RCP verdict
    before the note, each score of a failing verdict marked as such, and a note for every verdict that is
    not a pass. Unchanged when no group's workload has an RCP."""
    if not any(found.source is not None for found in rcps.values()):
        return table
    at = table.headers.index("note") if "note" in table.headers else len(table.headers)
    score_at = table.headers.index("score") if "score" in table.headers else None
    rows, notes = [], []
    for row in table.rows:
        found = rcps.get(row[0])
        judgement = None if found is None else found.judgement
        verdict = None if judgement is None else judgement.verdicts.get(row[1])
        row = list(row)
        if verdict is not None and verdict_word(verdict) == FAIL and score_at is not None \
                and row[score_at] is not None:  # a number alone would read as a valid result
            row[score_at] = f"{format_cell(row[score_at], table.digits)} {FAILED_SCORE}"
        rows.append([*row[:at], NOT_JUDGED if verdict is None else verdict_cell(verdict), *row[at:]])
    for name, found in rcps.items():
        if found.judgement is None:
            notes.append(f"RCP of {name}: not judged: {found.note}")
            continue
        verdicts = found.judgement.verdicts
        notes += [f"RCP of {name}, {label}: {verdict.explanation}" for label, verdict in verdicts.items()
                  if not verdict.passed and verdict.case is not Case.WRONG_RUN_COUNT]
        notes += [f"RCP of {name}: not judged: {verdict.explanation}" for verdict in verdicts.values()
                  if verdict.case is Case.WRONG_RUN_COUNT][:1]
    notes.append("RCP: MLPerf's reference convergence points, per target (pass xN: within the allowed speedup, the "
                 f"score normalized by N; a score marked {FAILED_SCORE} is not a valid result); `benchbase rcp check` "
                 "shows the numbers.")
    return replace(table, headers=[*table.headers[:at], RCP_HEADER, *table.headers[at:]], rows=rows,
                   notes=[*table.notes, *dict.fromkeys(notes)])
