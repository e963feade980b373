"""The report's figures drawn the way the paper draws them, from hand-built run folders in the
old metrics format (eval records with wer and cer only) and the new one (paper_cer, the
validation loss, the scored subset and every subset's scores)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.image import imread

from benchbase.metrics.tta import TargetTracker
from benchbase.report import load_groups
from benchbase.report.figures import (
    LOSS_SIGMA_BATCHES,
    SMOOTHING_SECONDS,
    UTILIZATION_WINDOW_SECONDS,
    draw_accuracy,
    draw_same_batch_throughput,
    draw_utilization,
    same_batch_groups,
    smooth_loss,
    utilization_window,
    write_figures,
)
from benchbase.report.throughput import group_throughput
from benchbase.specs import TTARule

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
    # A group's runs (a/run-0, a/run-1) share the hardware profile the group is named after, each
    # with a seed of its own (runs of one seed and config are copies of one measurement).
    profile, seed = (folder.parent.name, int(folder.name[4:])) if folder.name.startswith("run-") else (folder.name, 0)
    config = {"workload": {"name": "ds2-mini", "tta": {"targets": NEW_TARGETS if new else OLD_TARGETS, "window": 3,
                                                       "aggregation": "median"}},
              "hardware": {"name": profile, **pipeline}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "result.json").write_text(json.dumps({"status": "aborted", "tta": {}, "seed": seed}))
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
    # The panels draw dev-other too (fainter): the label says so, not "on dev-clean" alone.
    assert all(("dev-other" in axis.get_ylabel()) is new for axis in (cer, wer)), cer.get_ylabel()
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
        assert any("run: validation loss, dev-clean" == text.get_text() for text in loss.get_legend().get_texts())
    else:
        assert markers == []


def test_figure_8_shows_cpu_and_each_gpu_over_25_seconds_after_warm_up(tmp_path):
    groups = load_groups([write_run(tmp_path / "gpu", new=True, gpus=3),
                          write_run(tmp_path / "cpu", new=False, gpus=0)])
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


def test_figure_8_of_a_resumed_run_reads_its_segments_telemetry(tmp_path):
    """A resume moves the interrupted segment's telemetry to segments/K/ and the clock goes on from
    there: a window in an earlier segment draws its samples, and the CPUs are counted from them."""
    run = write_run(tmp_path / "run", new=True)
    samples = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    for number, part in ((1, samples[:40]), (2, samples[40:80])):  # t 0-19.5 and 20-39.5 s
        (run / "segments" / str(number)).mkdir(parents=True)
        (run / "segments" / str(number) / "telemetry.jsonl").write_text("".join(json.dumps(s) + "\n" for s in part))
    (run / "telemetry.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples[80:]))
    [group] = load_groups([run])
    assert [sample["t"] for sample in group.runs[0].telemetry] == [sample["t"] for sample in samples]
    figure = draw_utilization([group], (5.0, 15.0))
    texts = [text.get_text() for axis in figure.axes for text in axis.texts]
    assert "no telemetry in this window" not in texts
    assert "of all 2 logical CPUs" in figure.axes[0].get_ylabel()
    assert figure.get_suptitle().startswith("ds2-mini: CPU and GPU utilization")  # the workload named


def test_figure_8_breaks_its_lines_at_a_resume_and_marks_it(tmp_path):
    """The interrupted segment's last sample and the resumed one's first are apart on the run clock:
    no line or shaded range spans the gap, and a line marks where the run went on."""
    run = write_run(tmp_path / "run", new=True)
    samples = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    kept = [sample for sample in samples if not 20.0 < sample["t"] < 24.0]  # down for 4 s: nothing sampled
    (run / "segments" / "1").mkdir(parents=True)
    (run / "segments" / "1" / "telemetry.jsonl").write_text(
        "".join(json.dumps(s) + "\n" for s in kept if s["t"] <= 20.0))
    (run / "telemetry.jsonl").write_text("".join(json.dumps(s) + "\n" for s in kept if s["t"] > 20.0))
    [group] = load_groups([run])
    assert group.runs[0].resumed_at == [24.0]
    axis = draw_utilization([group], (10.0, 35.0)).axes[0]
    for line in axis.lines:
        times = line.get_xdata()
        if len(times) > 1:
            assert not (min(times) <= 20.0 and max(times) >= 24.0), line.get_label()
    for band in axis.collections:
        xs = band.get_paths()[0].vertices[:, 0] if band.get_paths() else []
        assert not (len(xs) and min(xs) <= 20.0 and max(xs) >= 24.0)
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend.count("CPU") == 1 and any(label.startswith("resumed after an interruption") for label in legend)


def test_figure_10_bars_the_median_throughput_after_warm_up(tmp_path):
    write_run(tmp_path / "a" / "run-0", new=True, throughput=40.0)
    write_run(tmp_path / "a" / "run-1", new=True, throughput=60.0)
    write_run(tmp_path / "a" / "run-2", new=True, throughput=70.0)
    write_run(tmp_path / "b", new=False, throughput=100.0)
    groups = load_groups([tmp_path / "a", tmp_path / "b"])
    assert [group_throughput(group) for group in groups] == [60.0, 100.0]  # warm-up batches (at 10 %) left out
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


# Issue 23: figures that show the TTA, label their axes, draw every subset and say what 100% means ---------

def _reach_targets_as_the_harness_does(folder: Path) -> dict:
    """Writes result.json's tta from the run's eval records by the harness's own rule (TargetTracker)."""
    config = json.loads((folder / "config.json").read_text())
    tracker = TargetTracker(TTARule.model_validate(config["workload"]["tta"]))
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for record in (record for record in records if record["kind"] == "eval"):
        tracker.update(record["epoch"], record["t"], {metric: record[metric] for metric in ("wer", "cer", "paper_cer")})
    tta = {target.label: {"seconds": tracker.reached[target.label], "minutes": tracker.reached[target.label] / 60,
                          "epoch": tracker.reached_epoch[target.label]} if target.label in tracker.reached else None
           for target in tracker.rule.targets}
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "tta": tta}))
    return tta


def test_figure_7_stars_each_tta_where_the_median_of_the_last_3_reaches_the_target(tmp_path):
    folder = write_run(tmp_path / "run", new=True)
    tta = _reach_targets_as_the_harness_does(folder)
    # paper_cer falls 33.3, 16.7, 11.1, ...: the curve is under 25 at 40 s, the median of 3 only at 60 s.
    assert tta["CER 25"]["seconds"] == 60 and tta["WER 60"]["seconds"] == 60
    _, cer, wer = draw_accuracy(load_groups([folder])).axes
    for axis, label, median in ((cer, "CER 25", 100 / 6), (wer, "WER 60", 50.0)):
        stars = [line for line in axis.lines if line.get_marker() == "*"]
        assert len(stars) == 1 and list(stars[0].get_xdata()) == [1.0]
        assert list(stars[0].get_ydata()) == pytest.approx([median])  # on the median, not on the curve
        assert f"{label}: 1.00 min" in [text.get_text() for text in axis.texts]
        running = next(line for line in axis.lines if line.get_linestyle() == ":")
        assert list(running.get_xdata())[0] == 1.0  # the rule has no median before the third evaluation
        assert "run: median of the last 3" in [text.get_text() for text in axis.get_legend().get_texts()]
    curve = next(line for line in cer.lines if line.get_marker() == "o")
    first_crossing = next(t for t, value in zip(curve.get_xdata(), curve.get_ydata(), strict=True) if value <= 25)
    assert first_crossing < 1.0
    assert "median of the last 3 evaluations" in cer.figure.texts[0].get_text()


def test_figure_7_draws_dev_other_lighter_than_the_scored_subset(tmp_path):
    _, cer, wer = draw_accuracy(load_groups([write_run(tmp_path / "run", new=True)])).axes
    for axis, offset in ((cer, 5.0), (wer, 5.0)):
        scored = next(line for line in axis.lines if line.get_label() == "run, dev-clean")
        other = next(line for line in axis.lines if line.get_label() == "run, dev-other")
        assert scored.get_alpha() is None and 0 < other.get_alpha() < 1
        assert list(other.get_ydata()) == pytest.approx([value + offset for value in scored.get_ydata()])
        assert other.get_color() == scored.get_color()


def test_figure_7_legends_show_the_curves_colors(tmp_path):
    folders = [write_run(tmp_path / "one", new=True), write_run(tmp_path / "two", new=True)]
    for folder in folders:
        _reach_targets_as_the_harness_does(folder)
    figure = draw_accuracy(load_groups(folders))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"][:2]
    for axis in figure.axes:
        legend = axis.get_legend()
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            group = text.get_text().split(":")[0].split(",")[0]
            assert handle.get_color() == colors[["one", "two"].index(group)], text.get_text()
    assert "one: TTA reached" in [text.get_text() for text in figure.axes[1].get_legend().get_texts()]


@pytest.mark.parametrize(("low", "high", "expected"), [
    # Less than a decade: the ends (two significant digits) and every round number between them but
    # 30, which would overprint 28.
    (27.6, 101.2, [28, 40, 50, 60, 70, 80, 90, 100]),
    (1.67, 210.0, [1.7, 5, 10, 20, 50, 100, 210]),  # over two decades: 1-2-5, again the ends
    (40.0, 44.0, [40, 44]),  # a sliver of a decade: at least both ends
])
def test_log_ticks_label_the_datas_ends(low, high, expected):
    from benchbase.report.figure_parts import log_ticks

    ticks = log_ticks(low, high)
    assert ticks == pytest.approx(expected)


@pytest.mark.parametrize("new", [False, True], ids=["old-records", "new-records"])
def test_figure_7_labels_each_log_axis_at_the_lowest_and_highest_value(tmp_path, new):
    figure = draw_accuracy(load_groups([write_run(tmp_path / "run", new=new)]))
    figure.canvas.draw()
    for axis in figure.axes:
        values = [value for line in axis.lines for value in line.get_ydata() if value > 0]
        low, high = axis.get_ylim()
        labelled = [float(text.get_text()) for text in axis.get_yticklabels()
                    if text.get_text() and low <= text.get_position()[1] <= high]
        assert min(labelled) == pytest.approx(min(values), rel=0.05)
        assert max(labelled) == pytest.approx(max(values), rel=0.05)


def _comb_run(folder: Path) -> Path:
    """A run whose sampler read 35 % and 65 % in turn every 30 ms (the kernel's 10 ms ticks on a steady
    50 % load), on a 2-CPU machine with a 1-thread budget, evaluating from 19 s to 20 s."""
    write_run(folder, new=True, gpus=0)
    samples = [{"t": round(0.03 * step, 4), "cpu": 35.0 if step % 2 else 65.0, "cores": [70.0, 0.0] if step % 2
                else [100.0, 30.0], "proc_cpu": 35.0 if step % 2 else 65.0} for step in range(2000)]
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "cpu": {"thread_budget": 1, "cores_in_steps": 1.0}}))
    return folder


def test_figure_8_smooths_the_samples_and_shades_their_range(tmp_path):
    axis = draw_utilization(load_groups([_comb_run(tmp_path / "run")])).axes[0]
    cpu = next(line for line in axis.lines if line.get_label() == "CPU")
    assert max(abs(value - 50.0) for value in cpu.get_ydata()) < 2.0  # the comb's mean, not its teeth
    band = axis.collections[0].get_paths()[0].vertices[:, 1]
    assert min(band) == 35.0 and max(band) == 65.0
    assert f"{SMOOTHING_SECONDS:g} s means" in axis.figure.texts[0].get_text()


def test_figure_8_states_what_100_percent_means_and_marks_the_evaluations(tmp_path):
    axis = draw_utilization(load_groups([_comb_run(tmp_path / "run")])).axes[0]
    assert "of all 2 logical CPUs" in axis.get_ylabel()
    budget = next(line for line in axis.lines if line.get_label().startswith("thread budget"))
    assert budget.get_label() == "thread budget: 1 of 2 logical CPUs" and list(budget.get_ydata()) == [50.0, 50.0]
    right = next(child for child in axis.get_children() if type(child).__name__ == "SecondaryAxis")
    assert right.get_ylabel() == "CPU, % of the 1-thread budget"
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert "evaluation" in legend and "CPU" in legend
    evaluated = [(patch.get_x(), patch.get_x() + patch.get_width()) for patch in axis.patches]
    assert evaluated == [pytest.approx((19.0, 20.0))]  # the window 5-30 s holds the evaluation that ended at 20 s


def test_figure_10_is_drawn_only_for_groups_that_share_a_global_batch(tmp_path):
    alone = write_figures(load_groups([write_run(tmp_path / "alone", new=True)]), tmp_path / "one")
    assert "throughput-same-batch.png" not in [path.name for path in alone]
    apart = load_groups([write_run(tmp_path / "small", new=True, global_batch=16),
                         write_run(tmp_path / "large", new=True, global_batch=32)])
    assert same_batch_groups(apart) == []
    assert not (tmp_path / "apart" / "throughput-same-batch.png").exists()
    write_figures(apart, tmp_path / "apart")
    assert not (tmp_path / "apart" / "throughput-same-batch.png").exists()
    mixed = load_groups([write_run(tmp_path / "a", new=True), write_run(tmp_path / "b", new=False),
                         write_run(tmp_path / "c", new=True, global_batch=64)])
    assert [group.name for group in same_batch_groups(mixed)] == ["a", "b"]
    axis = draw_same_batch_throughput(same_batch_groups(mixed)).axes[0]
    assert len(axis.patches) == 2 and "all at global batch 32" in axis.get_title()
