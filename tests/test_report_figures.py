"""The report's figures against its tables: TTA labels that do not print over each other, one
figure per workload, and the throughput figure stating the throughput table's number.

The run folders are hand-built by test_figures' writer (no model is trained)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from test_figures import _reach_targets_as_the_harness_does, write_run

from benchbase.report import CostModel, load_groups
from benchbase.report.comparison import pick_baseline, report_tables, scored_groups
from benchbase.report.figures import draw_accuracy, draw_same_batch_throughput, draw_throughput, write_figures
from benchbase.report.runs import groups_by_workload
from benchbase.report.throughput import group_throughput, run_throughput

CLOSE_TARGETS = [{"metric": "paper_cer", "value": 25.0}, {"metric": "paper_cer", "value": 24.0},
                 {"metric": "wer", "value": 60.0}, {"metric": "wer", "value": 59.0}]
RNNT_TARGETS = [{"metric": "wer", "value": 70.0}, {"metric": "paper_cer", "value": 30.0}]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _as_workload(folder: Path, workload: str, targets: list[dict]) -> Path:
    """The run folder's config.json made a run of another workload, with these targets."""
    config = json.loads((folder / "config.json").read_text())
    config["workload"] = {**config["workload"], "name": workload,
                          "tta": {**config["workload"]["tta"], "targets": targets}}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _set_result(folder: Path, **fields) -> None:
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, **fields}))


# Labels ---------------------------------------------------------------------------------------------------

def _overlapping(figure) -> list[tuple[str, str]]:
    renderer = figure.canvas.get_renderer()
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for axis in figure.axes for text in axis.texts]
    return [(first, second) for (first, a), (second, b) in itertools.combinations(boxes, 2) if a.overlaps(b)]


def test_tta_and_target_labels_do_not_overlap_where_runs_and_targets_are_close(tmp_path):
    # Three runs that reach two targets a point apart at the same evaluation: six TTA labels
    # anchored at one star per panel, and two target labels at the same height on the left.
    folders = [_as_workload(write_run(tmp_path / name, new=True), "ds2-mini", CLOSE_TARGETS)
               for name in ("one", "two", "three")]
    for folder in folders:
        tta = _reach_targets_as_the_harness_does(folder)
        assert {label: reached["seconds"] for label, reached in tta.items()} == {
            "CER 25": 60, "CER 24": 60, "WER 60": 60, "WER 59": 60}
    figure = draw_accuracy(load_groups(folders))
    _, cer, wer = figure.axes
    for axis, names in ((cer, ("CER 25", "CER 24")), (wer, ("WER 60", "WER 59"))):
        texts = [text.get_text() for text in axis.texts]
        assert sorted(texts) == sorted([*names, *(f"{name}: 1.00 min" for name in names for _ in folders)])
        anchors = [text.xy for text in axis.texts if text.get_text().endswith("min")]
        assert len(set(anchors)) == 1  # every star on one spot: the labels start on top of each other
    assert _overlapping(figure) == []
    figure.canvas.draw()  # as drawn, and at the PNG's resolution
    assert _overlapping(figure) == []
    figure.set_dpi(120)
    assert _overlapping(figure) == []
    page = figure.bbox
    for axis in (cer, wer):  # moved, but still on the figure
        for text in axis.texts:
            box = text.get_window_extent(figure.canvas.get_renderer())
            assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1


def test_a_lone_label_stays_where_it_was_placed(tmp_path):
    folder = write_run(tmp_path / "run", new=True)
    _reach_targets_as_the_harness_does(folder)
    _, cer, _ = draw_accuracy(load_groups([folder])).axes
    offsets = {text.get_text(): text.xyann for text in cer.texts}
    assert offsets == {"CER 25": (0, 0), "CER 25: 1.00 min": (6, -11)}


# One figure per workload ----------------------------------------------------------------------------------

def _two_workloads(root: Path) -> list[Path]:
    """ds2-mini: groups a and b; rnnt-mini: group c, with other targets; all at global batch 32."""
    return [write_run(root / "a", new=True), write_run(root / "b", new=True, throughput=60.0),
            _as_workload(write_run(root / "c", new=True, throughput=80.0), "rnnt-mini", RNNT_TARGETS)]


def test_a_report_over_two_workloads_draws_each_workloads_figures_apart(tmp_path):
    folders = _two_workloads(tmp_path)
    for folder in folders:
        _reach_targets_as_the_harness_does(folder)
    groups = load_groups(folders)
    names = [path.name for path in write_figures(groups, tmp_path / "figures")]
    assert names == [f"{figure}-{workload}.png" for workload in ("ds2-mini", "rnnt-mini")
                     for figure in ("accuracy-over-time", "utilization", "throughput-over-time",
                                    "throughput-same-batch")][:-1] + [  # rnnt-mini has one group: no bars
        "performance-profile.png"]  # the one figure across workloads
    assert sorted(path.name for path in (tmp_path / "figures").iterdir()) == sorted(names)
    expected = {"ds2-mini": ({"a", "b"}, {25.0}, {60.0}), "rnnt-mini": ({"c"}, {30.0}, {70.0})}
    for workload, members in groups_by_workload(groups).items():
        figure = draw_accuracy(members)
        assert figure.texts[0].get_text().startswith(f"{workload}: ")
        own, cer_targets, wer_targets = expected[workload]
        _, cer, wer = figure.axes
        for axis, values in ((cer, cer_targets), (wer, wer_targets)):
            assert {line.get_ydata()[0] for line in axis.lines if line.get_linestyle() == "--"} == values
            drawn = {text.get_text().split(":")[0].split(",")[0] for text in axis.get_legend().get_texts()}
            assert drawn == own
        throughput = draw_throughput(members).axes[0]
        assert {text.get_text() for text in throughput.get_legend().get_texts()} == own
    with pytest.raises(ValueError, match="ds2-mini, rnnt-mini"):
        draw_accuracy(groups)
    with pytest.raises(ValueError, match="ds2-mini, rnnt-mini"):
        draw_throughput(groups)
    with pytest.raises(ValueError, match="ds2-mini, rnnt-mini"):
        draw_same_batch_throughput(groups)


def test_one_workloads_figures_keep_their_names(tmp_path):
    groups = load_groups(_two_workloads(tmp_path)[:2])
    names = [path.name for path in write_figures(groups, tmp_path / "figures")]
    assert names == ["accuracy-over-time.png", "utilization.png", "throughput-over-time.png",
                     "throughput-same-batch.png"]


def test_the_report_embeds_each_workloads_figures(tmp_path):
    from cli_helpers import run_benchbase

    folders = _two_workloads(tmp_path)
    out = tmp_path / "report"
    done = run_benchbase("report", *map(str, folders), "--out", str(out))
    assert done.returncode == 0, done.stderr
    markdown = (out / "report.md").read_text()
    for workload in ("ds2-mini", "rnnt-mini"):
        assert f"![accuracy-over-time-{workload}](figures/accuracy-over-time-{workload}.png)" in markdown
    assert "figures/accuracy-over-time.png" not in markdown


# Throughput: one number in the table and the figure -------------------------------------------------------

def test_the_throughput_table_and_figure_state_one_number(tmp_path):
    # Group a's runs: 130.7123, 131.2 and 120 utterances per second after warm-up: its median rounds to
    # 130.71, not to the 131.2 of one run, and result.json's own median (999) is not what either shows.
    for index, throughput in enumerate((130.7123, 131.2, 120.0)):
        _set_result(write_run(tmp_path / "a" / f"run-{index}", new=True, throughput=throughput),
                    throughput={"median": 999.0})
    write_run(tmp_path / "b", new=True, throughput=99.995)
    groups = load_groups([tmp_path / "a", tmp_path / "b"])
    scored = scored_groups(groups)
    table = next(table for table in report_tables(scored, pick_baseline(scored, None), CostModel())
                 if table.name == "throughput-utilization")
    column = table.headers.index("utt/s (median)")
    axis = draw_same_batch_throughput(groups).axes[0]
    assert [row[column] for row in table.rows] == [bar.get_height() for bar in axis.patches]
    assert [row[column] for row in table.rows] == [pytest.approx(130.7123), pytest.approx(99.995)]
    shown = [row[column] for row in table.formatted_rows()]
    assert shown == [text.get_text() for text in axis.texts] == ["130.71", "100.00"]
    assert [group_throughput(group) for group in groups] == [bar.get_height() for bar in axis.patches]


def test_a_run_without_its_batch_records_gives_result_json_s_median(tmp_path):
    folder = write_run(tmp_path / "stored", new=True)
    _set_result(folder, throughput={"median": 42.5})
    (folder / "metrics.jsonl").unlink()  # as a results database's run whose folder is gone
    run = load_groups([folder])[0].runs[0]
    assert run_throughput(run) == 42.5
