"""Making an RCP file from reference runs (`benchbase rcp make`).

An RCP is a claim about the reference: "trained as the workload pins it, at this batch size, it
needs this many epochs". Every run behind it must therefore be a closed-division run of one
workload on one backend, with the same pinned hyperparameters and TTA rule, distinct seeds, and
every target reached: a run that never converged has no epochs to contribute (MLPerf's reference
runs all converge). Each batch size needs twice the runs a submission set will have. Anything else
is refused with the runs it concerns named, rather than left out silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import ValidationError

from benchbase.errors import InputError, describe_validation_error
from benchbase.rcp.points import FORMAT, BatchReference, HyperparameterValue, RcpFile, ReferenceRun, SourceRevision
from benchbase.rcp.runs import RunConvergence, differing_hyperparameters, read_convergence
from benchbase.report.runs import RunGroup

__all__ = ["make_rcp"]

NAMES_SHOWN = 6


def make_rcp(groups: list[RunGroup], submission_runs: int, made_by: str) -> RcpFile:
    """The RCP file of every run of ``groups``; InputError naming the runs that cannot make one."""
    runs = [read_convergence(group, run) for group in groups for run in group.runs]
    workload = _one_workload(runs)
    for run in runs:
        run.require_closed()
    backend = _one_value(runs, lambda run: run.backend, "backends", "an RCP is one reference backend's")
    rule = runs[0].rule
    for run in runs[1:]:
        if run.rule != rule:
            raise InputError(f"{run.run.path}: its TTA rule (config.json's workload.tta) differs from "
                             f"{runs[0].name}'s: an RCP's runs are scored alike")
    _converged(runs)
    hyperparameters = _shared_hyperparameters(runs)
    batches = _by_batch(runs, submission_runs)
    revisions = Counter(run.revision for run in runs)
    try:
        return RcpFile(
            format=FORMAT, workload=workload, division="closed", reference_backend=backend,
            submission_runs=submission_runs, tta=rule, hyperparameters=hyperparameters, made_by=made_by,
            benchbase=tuple(SourceRevision(version=version, commit=commit, dirty=dirty, runs=count)
                            for (version, commit, dirty), count in sorted(revisions.items(), key=str)),
            batches=tuple(BatchReference(global_batch=batch, runs=tuple(
                ReferenceRun(seed=run.seed, run=run.name, epochs={label: epoch for label, epoch in run.epochs.items()
                                                                  if epoch is not None})
                for run in sorted(members, key=lambda run: (run.seed or 0, run.name))))
                for batch, members in sorted(batches.items())))
    except ValidationError as error:
        raise InputError(describe_validation_error("the RCP these runs make", error)) from None


def _one_workload(runs: list[RunConvergence]) -> str:
    for run in runs:
        if run.workload is None:
            raise InputError(f"{run.log_path}: no submission_benchmark: the run's workload is unknown")
    return _one_value(runs, lambda run: run.workload, "workloads", "an RCP is one workload's")


def _one_value(runs: list[RunConvergence], value: Callable[[RunConvergence], str | None], what: str, why: str) -> str:
    found: dict[str, list[RunConvergence]] = {}
    for run in runs:
        found.setdefault(str(value(run)), []).append(run)
    if len(found) > 1:
        described = "; ".join(f"{name} ({_names(members)})" for name, members in sorted(found.items()))
        raise InputError(f"the runs are of several {what}: {described}: {why}")
    return next(iter(found))


def _converged(runs: list[RunConvergence]) -> None:
    missed = [f"{run.name} never reached {', '.join(run.missed())}" for run in runs if run.missed()]
    if missed:
        raise InputError(f"{len(missed)} of {len(runs)} runs did not converge ({'; '.join(missed[:NAMES_SHOWN])}"
                         f"{'; ...' if len(missed) > NAMES_SHOWN else ''}): an RCP is made of converged runs")


def _shared_hyperparameters(runs: list[RunConvergence]) -> dict[str, HyperparameterValue]:
    first = runs[0]
    for run in runs[1:]:
        differences = differing_hyperparameters(run.hyperparameters, first.hyperparameters)
        if differences:
            raise InputError(f"{run.log_path}: its hyperparameters differ from {first.name}'s: "
                             f"{'; '.join(differences[:NAMES_SHOWN])}")
    scalars = {key: value for key, value in first.hyperparameters.items()
               if value is None or isinstance(value, str | int | float | bool)}
    if len(scalars) < len(first.hyperparameters):
        odd = sorted(set(first.hyperparameters) - set(scalars))
        raise InputError(f"{first.log_path}: {', '.join(odd)} is not a single value")
    return scalars


def _by_batch(runs: list[RunConvergence], submission_runs: int) -> dict[int, list[RunConvergence]]:
    batches: dict[int, list[RunConvergence]] = {}
    for run in runs:
        if run.global_batch is None:
            raise InputError(f"{run.log_path}: no global_batch_size in the log")
        if run.seed is None:
            raise InputError(f"{run.log_path}: no seed in the log")
        batches.setdefault(run.global_batch, []).append(run)
    for batch, members in sorted(batches.items()):
        seeds = Counter(run.seed for run in members)
        repeated = [run for run in members if seeds[run.seed] > 1]
        if repeated:
            raise InputError(f"batch {batch}: a seed repeats ({_names(repeated)}): reference runs are distinct seeds")
        if len(members) < 2 * submission_runs:
            raise InputError(f"batch {batch}: {len(members)} reference run(s) ({_names(members)}); an RCP needs "
                             f"2 x {submission_runs} submission runs = {2 * submission_runs} (--submission-runs)")
    return batches


def _names(runs: Iterable[RunConvergence]) -> str:
    names = [run.name for run in runs]
    return ", ".join(names[:NAMES_SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > NAMES_SHOWN else "")
