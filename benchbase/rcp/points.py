"""The RCP file: a workload's reference runs and their epochs to each target, as data.

MLPerf keeps one JSON file of RCPs per benchmark (rcps_BENCHMARK.json) with, per batch size, the
epochs to converge of every reference run and the hyperparameters they ran with. benchbase's file
says the same and what makes it reproducible: the command and the benchbase revisions that made
the runs, the backend they ran on, the TTA rule their epochs were recomputed with, and each run's
seed and folder. Only the epochs are stored; the statistics (mean, stdev, min epochs) are derived
by benchbase.rcp.rule whenever the file is read, so a file can never disagree with the rule.

The files that ship with benchbase live at benchbase/workloads/rcps/WORKLOAD.json, outside the
folder's *.yaml that the workload registry reads.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from benchbase.errors import InputError, describe_validation_error
from benchbase.rcp.rule import ReferencePoint, reference_point
from benchbase.specs import TTARule
from benchbase.specs._base import Spec

__all__ = ["FORMAT", "MINIMUM_SUBMISSION_RUNS", "BatchReference", "HyperparameterValue", "RcpFile", "ReferenceRun",
           "SourceRevision", "bundled_rcp", "load_rcp", "read_rcp_text"]

FORMAT = 1
MINIMUM_SUBMISSION_RUNS = 3
"""The olympic mean of a set drops one run at each end, so a set needs three to keep one."""
_WORKLOAD_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")  # WorkloadSpec.name's pattern: a name, never a path
HyperparameterValue = str | int | float | bool | None


class ReferenceRun(Spec):
    seed: int = Field(ge=0, description="The run's seed.")
    run: str = Field(min_length=1, max_length=300, description="The run folder, as its group and its own name "
                     "(a sweep's CONFIGURATION/seed-S).")
    epochs: dict[str, int] = Field(description="Target label -> the epoch whose evaluation first reached it, "
                                   "recomputed from the run's log.")

    @model_validator(mode="after")
    def _epochs_count_from_one(self) -> ReferenceRun:
        wrong = {label: epoch for label, epoch in self.epochs.items() if epoch < 1}
        if wrong:
            raise ValueError(f"epochs to converge must be 1 or more: {wrong}")
        return self


class BatchReference(Spec):
    global_batch: int = Field(ge=1, le=65_536, description="The global batch size the reference runs trained at.")
    runs: tuple[ReferenceRun, ...] = Field(min_length=1, max_length=1000,
                                           description="Every reference run at this batch size.")


class SourceRevision(Spec):
    version: str | None = Field(description="benchbase's version (config.json's environment.benchbase).")
    commit: str | None = Field(description="The git commit of benchbase's checkout; None from an installed wheel.")
    dirty: bool | None = Field(description="Uncommitted changes in that checkout.")
    runs: int = Field(ge=1, description="Reference runs made with this revision.")


class RcpFile(Spec):
    """One workload's reference convergence points."""

    format: Literal[1] = Field(description="The file format's version.")
    workload: str = Field(min_length=1, max_length=64, description="The workload the references trained (the log's "
                          "submission_benchmark).")
    division: Literal["closed"] = Field(description="Only closed-division runs (the registered workload but for its "
                                        "run choices) make or meet an RCP.")
    reference_backend: str = Field(min_length=1, max_length=64, description="The backend the references ran on.")
    submission_runs: int = Field(ge=MINIMUM_SUBMISSION_RUNS, le=500, description="Runs a submission set must have; "
                                 "the reference has at least twice as many per batch size (MLPerf's rule).")
    tta: TTARule = Field(description="The targets, window and subset the epochs were recomputed with; a submission's "
                         "log is recomputed with the same rule.")
    hyperparameters: dict[str, HyperparameterValue] = Field(
        description="What the references' logs state that a submission's log must state alike: the optimizer's and "
        "the evaluation's pinned values (opt_*, eval_decoder, ...).")
    made_by: str = Field(min_length=1, max_length=2000, description="The command that wrote this file.")
    benchbase: tuple[SourceRevision, ...] = Field(description="The benchbase revisions the reference runs were made "
                                                  "with, as their config.json records them.")
    batches: tuple[BatchReference, ...] = Field(min_length=1, max_length=64, description="Per global batch size, "
                                                "the reference runs and their epochs to each target.")

    @model_validator(mode="after")
    def _complete(self) -> RcpFile:
        labels = {target.label for target in self.tta.targets}
        sizes = [batch.global_batch for batch in self.batches]
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"a global batch size appears twice: {sizes}")
        for batch in self.batches:
            if len(batch.runs) < 2 * self.submission_runs:
                raise ValueError(f"batch {batch.global_batch} has {len(batch.runs)} reference runs; an RCP needs "
                                 f"2 x submission_runs = {2 * self.submission_runs}")
            for run in batch.runs:
                if set(run.epochs) != labels:
                    raise ValueError(f"batch {batch.global_batch}, run {run.run}: epochs for {sorted(run.epochs)}, "
                                     f"but the TTA rule's targets are {sorted(labels)}")
        return self

    def points(self, label: str) -> list[ReferencePoint]:
        """The RCP of each batch size for the target called ``label``, unpruned, smallest batch first."""
        return [reference_point(batch.global_batch, [run.epochs[label] for run in batch.runs], self.submission_runs)
                for batch in sorted(self.batches, key=lambda batch: batch.global_batch)]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2) + "\n"


def read_rcp_text(text: str, source: str) -> RcpFile:
    """An RCP file's text as an RcpFile; InputError in one line naming ``source`` and what is wrong."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InputError(f"{source}: not an RCP file: malformed JSON: {str(error)[:100]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{source}: not an RCP file: expected a JSON object, got {type(data).__name__}")
    try:
        return RcpFile.model_validate(data)
    except ValidationError as error:
        raise InputError(describe_validation_error(f"{source}: not an RCP file", error)) from None


def load_rcp(path: Path | Traversable) -> RcpFile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    return read_rcp_text(text, str(path))


def bundled_rcp(workload: str) -> Traversable | None:
    """The RCP file that ships with benchbase for ``workload``, or None when it has none."""
    if not _WORKLOAD_NAME.match(workload):
        return None
    found = resources.files("benchbase.workloads") / "rcps" / f"{workload}.json"
    return found if found.is_file() else None
