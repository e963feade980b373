"""What `benchbase run` prints: the terminal reporter, fed what a run records or emits."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from benchbase.cli.reporter import RunReporter
from benchbase.cli.run_command import _prepare_data
from benchbase.harness.hook_payloads import BatchProgress, Evaluation
from benchbase.specs import RunConfig, RunResult

RECORDED = Path(__file__).parent / "data" / "rcp" / "jax-cpu" / "seed-0" / "result.json"


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    shown = io.StringIO()
    return Console(file=shown, width=200, force_terminal=terminal, color_system=None), shown


def _recorded_result(final_evaluation: dict) -> RunResult:
    """A recorded run's result.json with the final evaluation a run in another precision records."""
    recorded = json.loads(RECORDED.read_text())
    return RunResult.model_validate({**recorded, "final_evaluation": final_evaluation})


def _final(precision: str, fp32: dict | None) -> dict:
    """result.json's final_evaluation as FinalEvaluation.run writes it."""
    subsets = {"dev-clean": {"wer": 67.6233, "cer": 18.3706, "paper_cer": 18.3866, "loss": 26.5893, "utterances": 180},
               "dev-other": {"wer": 99.9271, "cer": 82.1904, "paper_cer": 82.3263, "loss": 187.813, "utterances": 180}}
    final = {"decoder": "greedy", "beam_width": 1, "epoch": 10, "seconds": 4.2, "precision": precision,
             "subsets": subsets}
    if fp32 is not None:
        final["fp32"] = fp32
    return final


def _finished(result: RunResult) -> str:
    console, shown = _console(terminal=False)
    RunReporter(console).run_finished(result)
    return shown.getvalue()


def test_a_bf16_runs_summary_shows_the_fp32_accuracy_of_its_weights():
    fp32 = {"seconds": 3.9, "subsets": {
        "dev-clean": {"wer": 66.1111, "cer": 17.9, "paper_cer": 17.9123, "loss": 26.1, "utterances": 180},
        "dev-other": {"wer": 99.5, "cer": 81.0, "paper_cer": 81.4567, "loss": 186.9, "utterances": 180}}}
    shown = _finished(_recorded_result(_final("bf16", fp32)))
    assert "in bf16" in shown and "FP32 WER (%)" in shown and "FP32 CER (%)" in shown
    clean = next(line for line in shown.splitlines() if "dev-clean" in line)
    assert "67.62" in clean and "66.11" in clean and "17.91" in clean
    other = next(line for line in shown.splitlines() if "dev-other" in line)
    assert "99.50" in other and "81.46" in other


def test_a_failed_fp32_evaluation_is_said_and_an_fp32_run_has_no_fp32_columns():
    shown = _finished(_recorded_result(_final("int8-emulated", {"error": "RuntimeError: twin broke"})))
    assert "FP32 evaluation of the weights failed: RuntimeError: twin broke" in shown
    assert "FP32 WER" not in shown
    shown = _finished(_recorded_result(_final("fp32", None)))
    assert "FP32" not in shown and "in fp32" not in shown and "67.62" in shown


def test_a_title_longer_than_its_table_stays_one_line_on_an_80_column_terminal():
    console = Console(file=io.StringIO(), width=80, color_system=None)
    RunReporter(console).run_finished(_recorded_result(_final("fp32", None)))
    lines = console.file.getvalue().splitlines()
    title = next(line for line in lines if line.startswith("time to accuracy: "))
    assert title.endswith(" min") and len(title) > len(lines[lines.index(title) + 1])  # wider than the table
    assert any(line.startswith("final evaluation (not timed): greedy, beam 1, 4 s") for line in lines)


def test_building_a_store_says_so_in_one_line_on_a_terminal_or_not_and_a_second_familys_too(tmp_path, registry):
    cache = tmp_path / "cache"
    stores = {}
    for name in ("ds2-mini", "rnnt-mini", "rnnt-mini"):
        workload = registry.workload(name)
        workload = workload.model_copy(update={"data": workload.data.model_copy(update={"synthetic_utterances": 10})})
        console, shown = _console(terminal=name == "ds2-mini")  # the line beside a terminal's progress bars too
        stores.setdefault(name, []).append(_prepare_data(console, workload, None, cache))
        lines = shown.getvalue().splitlines()
        if name == "ds2-mini":  # the first run speaks the corpus too
            said = [line for line in lines if "building the feature store" in line]
            assert len(said) == 1, lines
            assert f"building the feature store for ds2-mini in {stores[name][0]} (about " in said[0]
            assert "MB, 10 utterances; first synthesizing the speech corpus in " in said[0]
            assert "extracting features" in shown.getvalue()  # the progress bars
        elif len(stores[name]) == 1:  # another family: its own store, from the corpus already spoken
            assert lines == [f"building the feature store for rnnt-mini in {stores[name][0]} (about "
                             f"{_megabytes(cache):.1f} MB, 10 utterances); later runs reuse it"], lines
        else:  # built once: nothing to say
            assert lines == [] and stores[name][0] == stores[name][1]
    assert stores["ds2-mini"][0] != stores["rnnt-mini"][0]


def _megabytes(cache: Path) -> float:
    """The size estimate from the spoken corpus's seconds, as 80 log-mel + 13 MFCC float16 values per 10 ms."""
    (corpus,) = cache.glob("synthetic-*")
    seconds = sum(json.loads((corpus / "corpus.json").read_text())["summary"]["seconds"].values())
    return seconds * 100 * 93 * 2 / 1e6


def test_an_evaluation_shows_its_dev_batches_on_a_terminal_and_adds_no_line_off_one():
    for terminal in (True, False):
        console, shown = _console(terminal)
        reporter = RunReporter(console)
        reporter.batch_completed(BatchProgress(epoch=3, batch_in_epoch=71, batches_per_epoch=71, batch_index=213,
                                               seconds=60.0, loss=1.5, throughput=40.0, data_wait=0.01))
        reporter.eval_started(epoch=3, batches=6)
        if terminal:  # the epoch's bar becomes the evaluation's (the live view draws reporter.progress)
            console.print(reporter.progress)
            assert "epoch 3: evaluating" in shown.getvalue() and "0/6" in shown.getvalue()
        for done in range(1, 7):
            reporter.eval_batch_completed(subset="dev-clean" if done <= 3 else "dev-other", done=done, batches=6)
        if terminal:  # the last batch is always shown (the others at most four times a second)
            console.print(reporter.progress)
            assert "epoch 3: evaluating dev-other" in shown.getvalue() and "6/6" in shown.getvalue()
        else:  # as for training's batches, nothing until the evaluation's line when it completes
            assert shown.getvalue() == ""


def test_a_stopped_view_ends_its_line_so_that_an_error_starts_its_own():
    """A run stopped by an error or a signal: on a terminal rich ends the view's last line; off one
    (a log file, a pipe) the reporter does, or `benchbase: error: ...` continued its "targets" row."""
    config = RunConfig.model_validate_json((RECORDED.parent / "config.json").read_text())
    for terminal in (True, False):
        console, shown = _console(terminal)
        reporter = RunReporter(console)
        reporter.run_started(config, Path("runs/stopped"))
        reporter.batch_completed(BatchProgress(epoch=1, batch_in_epoch=27, batches_per_epoch=71, batch_index=27,
                                               seconds=40.0, loss=154.4, throughput=64.7, data_wait=0.01))
        reporter.close()
        shown_text = shown.getvalue().removesuffix("\x1b[?25h")  # a terminal's cursor is shown again
        assert shown_text.endswith("\n") and shown_text.splitlines()[-1].startswith("targets"), (terminal, shown_text)


def test_an_epochs_line_off_a_terminal_is_one_plain_line_whatever_the_width():
    """In a log file or a pipe: no rich source location (reporter.py:NN) and no wrap at 80 columns."""
    shown = io.StringIO()
    reporter = RunReporter(Console(file=shown, width=80, color_system=None))
    scored = {"wer": 61.25, "cer": 17.5, "paper_cer": 17.75, "loss": 25.5, "utterances": 180}
    reporter.eval_completed(Evaluation(subset="dev-clean", **scored, epoch=4, seconds=600.0, eval_seconds=3.25,
                                       reached={}, targets=("CER 40",),
                                       subsets={"dev-other": {**scored, "wer": 98.5, "paper_cer": 80.25}}))
    assert shown.getvalue() == ("epoch 4: dev-clean CER 17.75% WER 61.25% loss 25.50; dev-other CER 80.25% WER "
                                "98.50%; eval 3.2 s, clock 10.00 min\n")
