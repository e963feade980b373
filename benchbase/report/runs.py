"""Run folders as a report reads them: result.json, config.json, metrics and telemetry lines.

Each RUN_DIR argument becomes one RunGroup, a row of the report: a single run folder, or a
folder of run folders (run-0, run-1, ...) scored together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from benchbase.errors import InputError, UnreadableFile
from benchbase.run_folder import RESULT_NAME, RunFolder, find_run_folders, read_json_lines
from benchbase.specs import ResultProblem, RunResult, read_run_result

T = TypeVar("T")

__all__ = ["Run", "RunGroup", "groups_by_shared_batch", "groups_by_workload", "load_groups", "loss_name",
           "read_json_lines", "strategy_name"]


@dataclass
class Run:
    path: Path
    result: RunResult
    config: dict = field(default_factory=dict)
    """config.json as a mapping: the report reads a few keys, from runs of any version."""
    parts_left_out: list[str] = field(default_factory=list)
    """A line per file of the run that could not be read and that the report goes on without
    (metrics.jsonl, telemetry.jsonl: the tables and figures drawn from it), added as it is read."""

    def tta_seconds(self, label: str) -> float | None:
        reached = self.result.tta.get(label)
        return None if reached is None else reached["seconds"]

    @property
    def hardware(self) -> dict:
        return self.config.get("hardware") or {}

    @property
    def workload_name(self) -> str:
        workload = self.config.get("workload")
        name = workload.get("name") if isinstance(workload, dict) else None
        return str(name or self.result.workload or "?")

    @property
    def family(self) -> str:
        """The model family the run trained (a workload spec without one is DS2's)."""
        workload = self.config.get("workload")
        model = workload.get("model") if isinstance(workload, dict) else None
        return str((model.get("family") if isinstance(model, dict) else None) or "ds2")

    @property
    def division(self) -> str:
        """closed or open: config.json's, else result.json's."""
        return str(self.config.get("division") or self.result.division)

    @property
    def global_batch(self) -> int | None:
        batch = (self.hardware.get("pipeline") or {}).get("global_batch")
        return batch if isinstance(batch, int) and not isinstance(batch, bool) else None

    @cached_property
    def metrics(self) -> list[dict]:
        return self._optional_lines(RunFolder(self.path).metrics)

    @property
    def evaluations(self) -> list[dict]:
        return [record for record in self.metrics if record.get("kind") == "eval"]

    @property
    def batches(self) -> list[dict]:
        return [record for record in self.metrics if record.get("kind") == "batch"]

    @cached_property
    def telemetry_segments(self) -> list[list[dict]]:
        """The samples of each segment of the run: one without a resume. A resume moves the
        interrupted segment's samples to segments/K/ and its clock goes on from the interruption,
        so the segments' samples, in order, come first."""
        folder = RunFolder(self.path)
        return [self._optional_lines(part.telemetry) for part in (*folder.segment_folders(), folder)]

    @property
    def telemetry(self) -> list[dict]:
        """Every sample of the run, in order."""
        return [sample for segment in self.telemetry_segments for sample in segment]

    @property
    def resumed_at(self) -> list[float]:
        """Run-clock seconds where the run went on after an interruption: the first sample of each
        segment after the first (nothing was sampled between it and the interrupted one's last)."""
        starts = [segment[0].get("t") for segment in self.telemetry_segments[1:] if segment]
        return [float(start) for start in starts if isinstance(start, int | float)]

    def log_problem(self) -> str | None:
        """'PATH: cannot read: WHY' where the run's compliance log exists and cannot be read, else None:
        its scores then rest on result.json alone, which no log backs."""
        path = RunFolder(self.path).compliance_log
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except FileNotFoundError:
            return None
        except OSError as error:
            return str(UnreadableFile(path, error))
        return None

    def _optional_lines(self, path: Path) -> list[dict]:
        """A JSON-lines file a report can go on without: its records, or none and a line saying why."""
        try:
            return read_json_lines(path)
        except OSError as error:
            self.parts_left_out.append(f"{UnreadableFile(path, error)}: the report goes on without it")
            return []


@dataclass
class RunGroup:
    name: str
    runs: list[Run]
    left_out: list[Path] = field(default_factory=list)
    """Run folders without a result.json (killed, or still running): not scored, but reported."""
    duplicates: list[tuple[Path, Path]] = field(default_factory=list)
    """(run folder, the earlier run folder of the group it repeats): the same seed, config and
    evaluations (times included), which only a copy of one run's folder has. Scoring a copy
    would count one measurement several times, so only the first is scored."""
    folder: str = ""
    """The name of the folder the group's runs were found in ("" where it came from elsewhere): a
    group's name may add the experiment or the host that tells it from another group."""

    @property
    def targets(self) -> list[str]:
        return _unique(label for run in self.runs for label in run.result.tta)

    @property
    def hardware(self) -> dict:
        return self.runs[0].hardware

    @property
    def environment(self) -> dict:
        """The first run's recorded software environment ({} for runs that predate it)."""
        return self.runs[0].result.environment

    @property
    def workload(self) -> dict:
        return self.runs[0].config.get("workload") or {}

    @property
    def workload_name(self) -> str:
        return self.runs[0].workload_name

    @property
    def open(self) -> bool:
        """Whether any of its runs is in the open division."""
        return any(run.division != "closed" for run in self.runs)

    @property
    def shown_name(self) -> str:
        """The name a table's row shows: an open group's marked "(open)"."""
        return f"{self.name} (open)" if self.open else self.name

    @property
    def loss_name(self) -> str:
        """What its family calls the loss ("CTC loss", "transducer loss"); "loss" where unknown or mixed."""
        return loss_name(self.runs)

    @property
    def experiment(self) -> dict[str, str]:
        """What its first run measured, EXPERIMENT's fields by name: a folder's group holds one
        experiment's runs (load_groups splits a folder of several)."""
        return dict(zip(EXPERIMENT, _experiment_key(self.runs[0]), strict=True))

    @property
    def global_batch(self) -> int | None:
        """The global batch every run trained at; None when unrecorded or when the runs differ."""
        batches = {run.global_batch for run in self.runs}
        return batches.pop() if len(batches) == 1 else None


def loss_name(runs: list[Run]) -> str:
    """The loss's name in the runs' model family ("CTC loss", "transducer loss"); "loss" for
    runs of several families or of one this installation does not know."""
    from benchbase.errors import BenchbaseError
    from benchbase.families.parts import parts_of_family

    families = {run.family for run in runs}
    if len(families) != 1:
        return "loss"
    try:
        return parts_of_family(families.pop()).loss_name
    except BenchbaseError:
        return "loss"


def groups_by_shared_batch(groups: list[RunGroup]) -> dict[int, list[RunGroup]]:
    """Global batch -> the groups that trained at it, for the batches two or more groups share:
    only there does a comparison show the platform and framework rather than the batch size."""
    by_batch: dict[int, list[RunGroup]] = {}
    for group in groups:
        if group.global_batch is not None:
            by_batch.setdefault(group.global_batch, []).append(group)
    return {batch: shared for batch, shared in sorted(by_batch.items()) if len(shared) > 1}


def groups_by_workload(items: Iterable[T], group_of: Callable[[T], RunGroup] = lambda group: group
                       ) -> dict[str, list[T]]:
    """Workload name -> its groups (or items that each hold a group, ``group_of``), in the order they came."""
    by_workload: dict[str, list[T]] = {}
    for item in items:
        by_workload.setdefault(group_of(item).workload_name, []).append(item)
    return by_workload


def load_groups(paths: list[Path]) -> list[RunGroup]:
    """One group per path (its run folders are the group's runs); a sweep's folder is one group per
    configuration, so that a sweep reports as one experiment."""
    from benchbase.sweeps.folder import configuration_folders  # the sweep planner loads only for a sweep

    expanded = [member for path in paths for member in (configuration_folders(path) or [path])]
    groups: list[RunGroup] = []
    for path in expanded:
        found = find_run_folders(path)
        folders = [folder for folder in found if RunFolder(folder).result.is_file()]
        if not folders:
            raise InputError(f"{path}: no {RESULT_NAME} in it or in its run folders")
        left_out = [folder for folder in found if folder not in folders]
        folder_name = path.resolve().name or str(path)
        for label, experiment in _experiments([_load_run(folder) for folder in folders]):
            runs, duplicates = _distinct_measurements(experiment)
            name = _distinct_name(f"{folder_name} ({label})" if label else folder_name, runs[0], groups)
            groups.append(RunGroup(name, runs, left_out, duplicates, folder=folder_name))
            left_out = []  # a folder without a result cannot be told apart: listed once, with the first
    return groups


EXPERIMENT = ("workload", "backend", "hardware profile", "precision", "strategy")
"""What the runs of one experiment share, whatever their seeds: the TTA rule, the targets and what
is measured. A folder of several (`runs/` after `make run` and a run of another workload) is
scored as one group per experiment, never as seeds of one."""


def _experiments(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    """(label, runs) per experiment among ``runs``, in the order they came; the label names what
    tells the experiments apart ("" where the runs are all one)."""
    by_key: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        by_key.setdefault(_experiment_key(run), []).append(run)
    if len(by_key) == 1:
        return [("", runs)]
    differing = [index for index in range(len(EXPERIMENT)) if len({key[index] for key in by_key}) > 1]
    return [(", ".join(key[index] for index in differing), members) for key, members in by_key.items()]


def _experiment_key(run: Run) -> tuple[str, ...]:
    model = (run.config.get("workload") or {}).get("model") or {}
    return (run.workload_name, str(run.result.backend or run.config.get("backend") or "?"),
            str(run.result.hardware or run.hardware.get("name") or "?"), str(model.get("precision") or "fp32"),
            strategy_name(run.config))


def strategy_name(config: object) -> str:
    """The strategy a run's config.json names (a spec with a name, or a bare name); sync where none."""
    strategy = config.get("strategy") if isinstance(config, dict) else None
    name = strategy.get("name") if isinstance(strategy, dict) else strategy if isinstance(strategy, str) else None
    return str(name or "sync")


def _distinct_measurements(runs: list[Run]) -> tuple[list[Run], list[tuple[Path, Path]]]:
    """The runs, each measurement once, and (copy, first) for the copies."""
    first: dict[str, Run] = {}
    kept, duplicates = [], []
    for run in runs:
        measurement = _measurement(run)
        if measurement in first:
            duplicates.append((run.path, first[measurement].path))
        else:
            first[measurement] = run
            kept.append(run)
    return kept, duplicates


def _measurement(run: Run) -> str:
    """What makes a run one measurement: its seed, its config (less where it was written and the
    data's path) and its evaluations with their times."""
    config = {key: value for key, value in run.config.items() if key not in ("out", "data", "environment")}
    return json.dumps([run.result.seed, config, run.evaluations], sort_keys=True, default=str)


def _load_run(path: Path) -> Run:
    folder = RunFolder(path)
    return Run(path, _read_result(folder.result), _read_object(folder.config) if folder.config.is_file() else {})


def _read_result(path: Path) -> RunResult:
    try:
        return read_run_result(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise UnreadableFile(path, error) from None
    except ResultProblem as problem:
        raise InputError(f"{path}: {problem}") from None


def _read_object(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UnreadableFile(path, error) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InputError(f"{path}: not valid JSON: {str(error)[:100]}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def _distinct_name(name: str, run: Run, groups: list[RunGroup]) -> str:
    """The folder's name; where another group has it, the host (or benchbase commit) that tells
    the two apart, else a number: two machines' "torch-cpu" folders become "torch-cpu @sha256:1a2b..."."""
    taken = {group.name for group in groups}
    if name not in taken:
        return name
    for key in ("host", "commit"):
        mine = _environment_value(run.result.environment, key)
        others = {_environment_value(group.environment, key) for group in groups if group.name.split(" @")[0] == name}
        if mine and mine not in others and f"{name} @{mine}" not in taken:
            return f"{name} @{mine}"
    candidate, index = name, 2
    while candidate in taken:
        candidate, index = f"{name}-{index}", index + 1
    return candidate


def _environment_value(environment: dict, key: str) -> str | None:
    value = environment.get("host") if key == "host" else (environment.get("benchbase") or {}).get("commit")
    return str(value)[:19] if value else None


def _unique(items) -> list:
    return list(dict.fromkeys(items))
