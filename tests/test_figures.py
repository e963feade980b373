"""The report's figures drawn the way the paper draws them, from hand-built run folders in the
old metrics format (eval records with wer and cer only) and the new one (paper_cer, the
validation loss, the scored subset and every subset's scores)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.image import imread

from benchbase.report import load_groups
from benchbase.report.figures import (
    LOSS_SIGMA_BATCHES,
    UTILIZATION_WINDOW_SECONDS,
    batch_throughput,
    draw_accuracy,
    draw_same_batch_throughput,
    draw_utilization,
    smooth_loss,
    utilization_window,
    write_figures,
)

OLD_TARGETS = [{"metric": "cer", "value": 40.0}, {"metric": "wer", "value": 80.0}]
NEW_TARGETS = [{"metric": "paper_cer", "value": 25.0}, {"metric": "wer", "value": 60.0}]
BATCHES = 120  # one batch a second
EVAL_EVERY = 20.0  # seconds


def _old_eval(t: float, error: float) -> dict:
    return {"kind": "eval", "epoch": int(t // EVAL_EVERY), "t": t, "wer": error, "cer": error / 2,
            "eval_s": 1.0, "utterances": 180}


def _new_eval(t: float, error: float) -> dict:
    subsets = {"dev-clean": {"wer": error, "cer": error / 2, "paper_cer": error / 3, "loss": error, "utterances": 90},
               "dev-other": {"wer": error + 5, "cer": error / 2 + 5, "paper_cer": error / 3 + 5, "loss": error + 5,
                             "utterances": 90}}
    return {"kind": "eval", "epoch": int(t // EVAL_EVERY), "t": t, **subsets["dev-clean"], "subset": "dev-clean",
            "subsets": subsets, "eval_s": 1.0}


def write_run(folder: Path, *, new: bool, global_batch: int | None = 32, gpus: int = 2,
              throughput: float = 50.0) -> Path:
    """A run folder as the harness writes it: metrics, telemetry (every 0.5 s), config and result."""
    folder.mkdir(parents=True)
    batches = [{"kind": "batch", "epoch": 1, "batch": i, "t": float(i), "loss": 200.0 / i, "step_s": 1.0,
                "wait_s": 0.0, "throughput": throughput * (0.1 if i <= 5 else 1.0), "utterances": 32}
               for i in range(1, BATCHES + 1)]
    make_eval = _new_eval if new else _old_eval
    evals = [make_eval(t, 100.0 * EVAL_EVERY / t) for t in range(int(EVAL_EVERY), BATCHES + 1, int(EVAL_EVERY))]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in batches + evals))
    telemetry = [{"t": step / 2, "cpu": 40.0 + step % 10, "cores": [40.0, 50.0],
                  **({"gpus": [{"util": 90 - 10 * index, "power_w": 100.0} for index in range(gpus)]} if gpus else {})}
                 for step in range(2 * BATCHES)]
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in telemetry))
    pipeline = {} if global_batch is None else {"pipeline": {"global_batch": global_batch, "batch_per_device": 16}}
    config = {"workload": {"name": "ds2-mini", "tta": {"targets": NEW_TARGETS if new else OLD_TARGETS, "window": 3,
                                                       "aggregation": "median"}},
              "hardware": {"name": folder.name, **pipeline}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "result.json").write_text(json.dumps({"status": "aborted", "tta": {}, "seed": 0}))
    return folder


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_the_loss_smoothing_is_a_gaussian_of_sigma_10_batches():
    step = [0.0] * 100 + [1.0] * 100
    smoothed = smooth_loss(step)
    assert LOSS_SIGMA_BATCHES == 10 and len(smoothed) == len(step)
    # A unit step convolved with a Gaussian rises from 16 % to 84 % over two sigmas: 20 batches.
    rising = [value for value in smoothed if 0.16 < value < 0.84]
    assert 19 <= len(rising) <= 21
    assert smoothed[110] == pytest.approx(0.853, abs=0.01) and smoothed[89] == pytest.approx(0.147, abs=0.01)
    assert smoothed[0] == pytest.approx(0.0) and smoothed[-1] == pytest.approx(1.0)  # the ends do not bend
    assert smooth_loss([]) == []


@pytest.mark.parametrize("new", [False, True], ids=["old-records", "new-records"])
def test_figure_7_has_three_log_panels_and_the_targets(tmp_path, new):
    groups = load_groups([write_run(tmp_path / "run", new=new)])
    figure = draw_accuracy(groups)
    loss, cer, wer = figure.axes
    assert [axis.get_yscale() for axis in (loss, cer, wer)] == ["log"] * 3
    # The tables' names: the paper's CER is plain "CER", jiwer's reference-length CER "CER/ref".
    metric, target = ("CER", 25.0) if new else ("CER/ref", 40.0)
    assert cer.get_ylabel().startswith(f"{metric} (%)")
    assert ("dev-clean" in cer.get_ylabel()) is new
    dashed = {axis: [line.get_ydata()[0] for line in axis.lines if line.get_linestyle() == "--"] for axis in (cer, wer)}
    assert dashed == {cer: [target], wer: [60.0 if new else 80.0]}
    labels = [text.get_text() for text in cer.texts]
    assert ("CER 25" if new else "CER/ref 40") in labels
    # The CER panel plots the metric the targets use: paper_cer is a third of the WER here, cer half.
    points = next(line for line in cer.lines if line.get_marker() == "o").get_ydata()
    assert points[0] == pytest.approx(100 / 3 if new else 50)


@pytest.mark.parametrize("new", [False, True], ids=["old-records", "new-records"])
def test_figure_7_smooths_the_training_loss_and_marks_the_validation_loss(tmp_path, new):
    groups = load_groups([write_run(tmp_path / "run", new=new)])
    loss = draw_accuracy(groups).axes[0]
    solid = [line for line in loss.lines if line.get_marker() in ("None", None, "") and line.get_alpha() is None]
    expected = smooth_loss([200.0 / i for i in range(1, BATCHES + 1)])
    assert list(solid[0].get_ydata()) == pytest.approx(expected)
    markers = [line for line in loss.lines if line.get_marker() == "s"]
    if new:  # the dev-clean loss, one marker per evaluation
        assert list(markers[0].get_ydata()) == pytest.approx([100.0, 50.0, 100 / 3, 25.0, 20.0, 100 / 6])
        assert any("validation loss (dev-clean)" == text.get_text() for text in loss.get_legend().get_texts())
    else:
        assert markers == []


def test_figure_8_shows_cpu_and_each_gpu_over_25_seconds_after_warm_up(tmp_path):
    groups = load_groups([write_run(tmp_path / "gpu", new=True, gpus=3), write_run(tmp_path / "cpu", new=False, gpus=0)])
    assert UTILIZATION_WINDOW_SECONDS == 25
    assert utilization_window(groups[0].runs[0]) == (5.0, 30.0)  # batch 5 ends the warm-up at 5 s
    with_gpus, cpu_only = draw_utilization(groups).axes
    assert with_gpus.get_xlim() == (5.0, 30.0)
    lines = {line.get_label(): line for line in with_gpus.lines}
    assert list(lines) == ["CPU", "GPU 0", "GPU 1", "GPU 2"]
    assert lines["CPU"].get_linestyle() == "-" and all(lines[f"GPU {i}"].get_linestyle() == "--" for i in range(3))
    times = lines["CPU"].get_xdata()
    assert times[0] == 5.0 and times[-1] == 30.0
    assert list(lines["GPU 2"].get_ydata()[:2]) == [70, 70]
    assert [line.get_label() for line in cpu_only.lines] == ["CPU"]
    assert "NVML unavailable" in cpu_only.get_legend().get_title().get_text()
    assert with_gpus.get_legend().get_title().get_text() == ""


def test_figure_8_follows_a_chosen_window(tmp_path):
    groups = load_groups([write_run(tmp_path / "run", new=True)])
    axis = draw_utilization(groups, (40.0, 50.0)).axes[0]
    assert axis.get_xlim() == (40.0, 50.0)
    times = axis.lines[0].get_xdata()
    assert times[0] == 40.0 and times[-1] == 50.0


def test_figure_10_bars_the_median_throughput_after_warm_up(tmp_path):
    write_run(tmp_path / "a" / "run-0", new=True, throughput=40.0)
    write_run(tmp_path / "a" / "run-1", new=True, throughput=60.0)
    write_run(tmp_path / "a" / "run-2", new=True, throughput=70.0)
    write_run(tmp_path / "b", new=False, throughput=100.0)
    groups = load_groups([tmp_path / "a", tmp_path / "b"])
    assert [batch_throughput(group) for group in groups] == [60.0, 100.0]  # warm-up batches (at 10 %) left out
    axis = draw_same_batch_throughput(groups).axes[0]
    assert [bar.get_height() for bar in axis.patches] == [60.0, 100.0]
    assert "all at global batch 32" in axis.get_title()
    assert [tick.get_text() for tick in axis.get_xticklabels()] == ["a\nbatch 32", "b\nbatch 32"]


def test_figure_10_says_when_the_batch_sizes_differ(tmp_path):
    groups = load_groups([write_run(tmp_path / "small", new=True, global_batch=64),
                          write_run(tmp_path / "large", new=False, global_batch=32),
                          write_run(tmp_path / "unknown", new=False, global_batch=None)])
    title = draw_same_batch_throughput(groups).axes[0].get_title()
    assert "batch sizes differ: 32, 64, ?" in title


@pytest.mark.parametrize("new", [False, True], ids=["old-records", "new-records"])
def test_write_figures_writes_the_four_pngs(tmp_path, new):
    groups = load_groups([write_run(tmp_path / "one", new=new), write_run(tmp_path / "two", new=new, gpus=0)])
    paths = write_figures(groups, tmp_path / "figures")
    names = [path.name for path in paths]
    assert names == ["accuracy-over-time.png", "utilization.png", "throughput-over-time.png",
                     "throughput-same-batch.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = imread(path)
        assert image.shape[1] >= 600 and image.std() > 0.05  # not a blank canvas
    assert sorted(path.name for path in (tmp_path / "figures").iterdir()) == sorted(names)  # no temporary files left
    assert plt.get_fignums() == []  # every figure closed once written


def test_figure_8_of_a_short_run_shows_its_last_25_seconds(tmp_path):
    folder = write_run(tmp_path / "short", new=True)
    telemetry = folder / "telemetry.jsonl"
    samples = [json.loads(line) for line in telemetry.read_text().splitlines()]
    telemetry.write_text("".join(json.dumps(sample) + "\n" for sample in samples if sample["t"] <= 12.0))
    run = load_groups([folder])[0].runs[0]
    assert utilization_window(run) == (0.0, 25.0)  # 25 s after warm-up would start past its end
