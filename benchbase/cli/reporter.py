"""The terminal reporter: the one place that prints. A plugin on the lifecycle hooks that
shows a live rich view of the run and ends with the TTA table; and decode-sweep's view."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from benchbase import hookimpl
from benchbase.cli.titled import titled
from benchbase.harness.hook_payloads import BatchProgress, Evaluation
from benchbase.specs import RunResult

__all__ = ["DecodeSweepReporter", "RunReporter", "compute_line", "final_evaluation_table", "result_table"]

REFRESH_SECONDS = 0.25


class RunReporter:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task("epoch 1", total=None)
        self.status: dict[str, str] = {"loss": "-", "throughput": "-", "last eval": "-", "targets": "-"}
        self.live: Live | None = None
        self.last_refresh = 0.0
        self.targets: tuple[str, ...] = ()
        self.evaluating = 0
        """The epoch whose evaluation is under way."""

    @hookimpl
    def run_started(self, config, run_dir):
        self.targets = tuple(target.label for target in config.workload.tta.targets)
        self.status["targets"] = f"0/{len(self.targets)}"
        self.console.print(f"[bold]benchbase run[/] {config.workload.name} on {config.backend} / "
                           f"{config.hardware.name}, seed {config.seed} -> {run_dir}",
                           soft_wrap=not self.console.is_terminal)
        self.live = Live(self._view(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    @hookimpl
    def batch_completed(self, progress: BatchProgress):
        now = time.monotonic()
        if now - self.last_refresh < REFRESH_SECONDS and progress.batch_in_epoch != progress.batches_per_epoch:
            return
        self.last_refresh = now
        self.progress.update(self.task, description=f"epoch {progress.epoch}", completed=progress.batch_in_epoch,
                             total=progress.batches_per_epoch)
        self.status["loss"] = f"{progress.loss:.3f}"
        self.status["throughput"] = f"{progress.throughput:.1f} utt/s"
        self._refresh()

    @hookimpl
    def eval_started(self, epoch, batches):
        # The bar counts the dev batches until training goes on (off a terminal, as for training's
        # batches, the evaluation's line when it completes says what it took).
        self.evaluating = epoch
        self.progress.update(self.task, description=f"epoch {epoch}: evaluating", completed=0, total=batches)
        self._refresh()

    @hookimpl
    def eval_batch_completed(self, subset, done, batches):
        now = time.monotonic()
        if now - self.last_refresh < REFRESH_SECONDS and done != batches:
            return
        self.last_refresh = now
        self.progress.update(self.task, description=f"epoch {self.evaluating}: evaluating {subset}", completed=done,
                             total=batches)
        self._refresh()

    @hookimpl
    def eval_completed(self, evaluation: Evaluation):
        self.status["last eval"] = (f"{evaluation.subset}: CER {evaluation.paper_cer:.2f}%  WER {evaluation.wer:.2f}%  "
                                    f"(epoch {evaluation.epoch})")
        self.status["targets"] = f"{len(evaluation.reached)}/{len(self.targets)}: " + (
            ", ".join(evaluation.reached) or "none yet")
        others = "".join(f"; {subset} CER {rates['paper_cer']:.2f}% WER {rates['wer']:.2f}%"
                         for subset, rates in evaluation.subsets.items() if subset != evaluation.subset)
        self._line(f"epoch {evaluation.epoch}: {evaluation.subset} CER {evaluation.paper_cer:.2f}% "
                   f"WER {evaluation.wer:.2f}% loss {evaluation.loss:.2f}{others}; "
                   f"eval {evaluation.eval_seconds:.1f} s, clock {evaluation.seconds / 60:.2f} min")
        self._refresh()

    def _line(self, message: str) -> None:
        """One line of the run's record: on a terminal with rich's time and place, off one (a log
        file, a pipe) plain and whole, so that grep and a wider window read one event per line."""
        if self.console.is_terminal:
            self.console.log(message)
        else:
            self.console.print(message, soft_wrap=True, markup=False, highlight=False)

    @hookimpl
    def run_finished(self, result: RunResult):
        self.close()
        self.console.print()
        self.console.print(result_table(result))
        if result.time_breakdown:
            self.console.print(time_breakdown_line(result.time_breakdown), markup=False, highlight=False)
        if result.compute:
            self.console.print(compute_line(result.compute), markup=False, highlight=False)
        if result.final_evaluation:
            self.console.print(final_evaluation_table(result.final_evaluation))

    def close(self) -> None:
        """Stop the live view (also when a run ends with an error or Ctrl-C)."""
        if self.live is not None:
            self.live.stop()
            self.live = None
            if not self.console.is_terminal:
                # Rich ends the view's last line on a terminal only; off one (a log, a pipe) an
                # error's line would otherwise continue the view's "targets" row.
                self.console.line()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._view())

    def _view(self) -> Group:
        table = Table.grid(padding=(0, 2))
        for key, value in self.status.items():
            table.add_row(f"[dim]{key}[/]", value)
        return Group(self.progress, table)


def result_table(result: RunResult) -> Group:
    style = "green" if result.status == "success" else "yellow"
    table = Table()
    table.add_column("target")
    table.add_column("TTA (min)", justify="right")
    table.add_column("TTA (s)", justify="right")
    table.add_column("epoch", justify="right")
    for label, reached in result.tta.items():
        if reached is None:
            table.add_row(label, "not reached", "-", "-")
        else:
            table.add_row(label, f"{reached['minutes']:.2f}", f"{reached['seconds']:.1f}", str(reached["epoch"]))
    return titled(f"time to accuracy: [{style}]{result.status}[/] ({result.stop_reason}), "
                  f"{result.epochs} epochs, {result.run_seconds / 60:.2f} min", table)


def time_breakdown_line(breakdown: dict) -> str:
    """Where the wall time went, in percent of it, the parts nothing took left out."""
    parts = ", ".join(f"{part.replace('_', ' ')} {fraction:.1%}" for part, fraction in breakdown["fractions"].items()
                      if fraction > 0)
    phases = "" if breakdown["stages"] == "reported" else f" (step phases {breakdown['stages']})"
    return f"wall time {breakdown['wall_s']:.1f} s: {parts}{phases}"


def compute_line(compute: dict) -> str:
    """The run's training FLOPs, padding and MFU; "not known" where the devices' peak is not."""
    mfu = ("MFU not known (" + compute["peak_source"] + ")" if compute.get("mfu_hardware") is None else
           f"MFU {compute['mfu_hardware']:.3%} hardware, {compute['mfu_useful']:.3%} useful "
           f"of {compute['peak_flops'] / 1e12:.4g} TFLOP/s ({compute['peak_source']})")
    return (f"training {compute['flops_padded'] / 1e12:.4g} TFLOP padded, {compute['flops_valid'] / 1e12:.4g} "
            f"valid (padding {compute['padding_fraction']:.1%}): {mfu}")


def final_evaluation_table(final: dict) -> Group:
    """The untimed evaluation after run_stop, one row per subset (the paper's Table 5 for one run);
    for a run not in fp32, its weights' WER and CER evaluated in FP32 beside its own (the cost
    of its precision), or the caption says why they are missing."""
    precision = final.get("precision", "fp32")
    fp32 = final.get("fp32") or {}
    twin = fp32.get("subsets", {})
    table = Table()
    headers = ["subset", "WER (%)", "CER (%)", "CER/ref (%)", "loss", "utterances"]
    if twin:
        headers += ["FP32 WER (%)", "FP32 CER (%)"]
        table.caption = f"FP32: the same weights evaluated in fp32 ({fp32['seconds']:.0f} s)"
    elif "error" in fp32:
        table.caption = f"FP32 evaluation of the weights failed: {fp32['error']}"
    for header in headers:
        table.add_column(header, justify="left" if header == "subset" else "right")
    for subset, rates in final["subsets"].items():
        row = [subset, f"{rates['wer']:.2f}", f"{rates['paper_cer']:.2f}", f"{rates['cer']:.2f}",
               f"{rates['loss']:.2f}", str(rates["utterances"])]
        if twin:
            row += [f"{twin[subset]['wer']:.2f}", f"{twin[subset]['paper_cer']:.2f}"] if subset in twin else ["-", "-"]
        table.add_row(*row)
    return titled(f"final evaluation (not timed): {final['decoder']}, beam {final['beam_width']}, "
                  f"{final['seconds']:.0f} s" + ("" if precision == "fp32" else f", in {precision}"), table)


class DecodeSweepReporter:
    """`benchbase decode-sweep`'s terminal: what it is doing now (predicting, then each beam width
    batch by batch), each width's row the moment it is done, and the whole table at the end."""

    COLUMNS = ("beam width", "seconds", "WER %", "CER %", "CER/ref %")

    def __init__(self, console: Console) -> None:
        self.console = console
        # Off a terminal (a log file), the rows alone: a transient view would leave blank lines.
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
        self.task: TaskID | None = None
        self.table: Table | None = None

    def __enter__(self) -> DecodeSweepReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()
        if self.table is not None and self.table.rows:
            self.console.print(self.table)

    def predicting(self, subset: str, checkpoint: str) -> None:
        self._replace_task(f"predicting {subset} from {checkpoint}", None)

    def decoding(self, title: str) -> None:
        """The predictions are in: the table's title says what is decoded, the widths follow."""
        self._replace_task(None, None)
        self.table = Table(title=title)
        for column in self.COLUMNS:
            self.table.add_column(column, justify="right")

    def width_started(self, width: int, batches: int) -> None:
        self._replace_task(f"beam width {width}", batches)

    def batch_decoded(self) -> None:
        if self.task is not None:
            self.progress.advance(self.task)

    def width_finished(self, row: tuple[str, ...]) -> None:
        self._replace_task(None, None)
        if self.table is not None:
            self.table.add_row(*row)
        self.console.print(", ".join(f"{column} {cell}" for column, cell in zip(self.COLUMNS, row)))

    def _replace_task(self, description: str | None, total: int | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        if description is not None:
            self.task = self.progress.add_task(description, total=total)
