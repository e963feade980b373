"""The live view of `benchbase sweep`: the whole sweep, the run in progress, the statuses so far.

It reads the current run's metrics.jsonl (its latest batch and evaluation) rather than its
output, which is the run's own view written to a file.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from benchbase.run_folder import RunFolder
from benchbase.specs.tta import METRIC_LABELS
from benchbase.sweeps.folder import FINISHED, SweepRecord
from benchbase.sweeps.spec import PlannedRun

__all__ = ["SweepView"]


class SweepView:
    """The whole sweep at a glance: runs done of all, the run in progress, the statuses so far."""

    def __init__(self, console: Console, name: str, plan: list[PlannedRun], record: SweepRecord, out: Path):
        self.console, self.plan, self.record, self.out = console, plan, record, out
        self.current: int | None = None
        self.log: Path | None = None
        self.current_folder: Path | None = None
        self.last_evaluation: dict | None = None
        self.progress = _SweepProgress(self._extra_lines, SpinnerColumn(), TextColumn("{task.description}"),
                                       BarColumn(), TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                       console=console, transient=True, refresh_per_second=2)
        done = sum(self._status(run) in FINISHED for run in plan)
        self.overall = self.progress.add_task(f"sweep {escape(name)}", total=len(plan), completed=done,
                                              count=f"{done}/{len(plan)} runs")

    def __enter__(self) -> SweepView:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.__exit__(None, None, None)

    def started(self, run: PlannedRun, action: str) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
        self.current = self.progress.add_task(f"{escape(run.name)} ({action})", total=None, count="")
        self.log, self.current_folder, self.last_evaluation = run.log(self.out), run.folder(self.out), None

    def finished(self, run: PlannedRun, status: str, code: int) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
            self.current, self.log, self.current_folder = None, None, None
        done = sum(self._status(item) in FINISHED for item in self.plan)
        self.progress.update(self.overall, completed=done, count=f"{done}/{len(self.plan)} runs")
        seconds = self.record.runs[run.name]["attempts"][-1]["seconds"]
        colour = {"success": "green", "aborted": "yellow"}.get(status, "red")
        self.console.print(f"[{colour}]{status}[/] {escape(run.name)} in {seconds:.0f} s (exit {code}; log "
                           f"{escape(str(run.log(self.out)))})")

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]{escape(text)}[/]")

    def _status(self, run: PlannedRun) -> str:
        return self.record.runs[run.name]["status"]

    def _extra_lines(self) -> list[Text]:
        counts: dict[str, int] = {}
        for run in self.plan:
            counts[self._status(run)] = counts.get(self._status(run), 0) + 1
        lines = [Text("  " + ", ".join(f"{status} {count}" for status, count in sorted(counts.items())),
                      style="dim")]
        now = self._run_now()
        if now:
            lines.append(Text(f"  {now}", style="dim", overflow="ellipsis", no_wrap=True))
        return lines

    def _run_now(self) -> str:
        """Where the current run is: its latest batch and evaluation, else its latest output line."""
        if self.current_folder is None or self.log is None:
            return ""
        batch, evaluation = _latest_metrics(RunFolder(self.current_folder).metrics)
        self.last_evaluation = evaluation or self.last_evaluation
        if batch is None:
            return _last_line(self.log)
        said = f"epoch {batch.get('epoch')}, batch {batch.get('batch')}, loss {batch.get('loss', 0):.1f}"
        if self.last_evaluation:
            rates = self.last_evaluation.get("subsets", {}).get(self.last_evaluation.get("subset"), {})
            said += (f"; last evaluation (epoch {self.last_evaluation.get('epoch')}): "
                     + ", ".join(f"{METRIC_LABELS[metric]} {rates[metric]:.1f}" for metric in ("paper_cer", "wer")
                                 if metric in rates))
        return said


class _SweepProgress(Progress):
    """Rich's progress bars with the sweep's status lines under them."""

    def __init__(self, extra_lines, *columns, **options):
        self._extra_lines = extra_lines  # before Progress starts rendering
        super().__init__(*columns, **options)

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        yield from self._extra_lines()


def _last_line(log: Path) -> str:
    """The run's latest output line, for the view: what the run is doing now."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    return "".join(character for character in lines[-1] if character.isprintable()) if lines else ""


def _latest_metrics(metrics: Path) -> tuple[dict | None, dict | None]:
    """The last batch and the last evaluation in the tail of a run's metrics.jsonl (None: not yet)."""
    try:
        with open(metrics, "rb") as handle:
            start = max(0, handle.seek(0, 2) - 32768)
            handle.seek(start)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None, None
    batch = evaluation = None
    for line in reversed(lines[1:] if start else lines):  # a seek into the file may cut its first line
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "batch" and batch is None:
            batch = record
        elif kind == "eval" and evaluation is None:
            evaluation = record
        if batch is not None and evaluation is not None:
            break
    return batch, evaluation
