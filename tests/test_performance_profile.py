"""AlgoPerf's performance profile across workloads: the ratios, rho and the score on hand-made
times (a miss, a tie, a ratio beyond 4), then `benchbase score` and `benchbase report` on run
folders of two workloads and two backends, hand-built by test_report's writer (no model trains)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_helpers import run_benchbase
from test_report import RULE, write_run

from benchbase.report import load_groups
from benchbase.report.performance_profile import (
    MAX_TAU,
    benchmark_score,
    counted_ratio,
    exact_score,
    performance_ratios,
    profile_steps,
    rho,
    tau_grid,
)
from benchbase.report.profile_table import across_workloads, profile_tables, workload_score

# Seconds to target: a and b tie on w1; c misses w2; on w3 c is 5x the fastest (beyond 4: never).
TIMES = {"a": {"w1": 100.0, "w2": 300.0, "w3": 50.0},
         "b": {"w1": 100.0, "w2": 150.0, "w3": 100.0},
         "c": {"w1": 250.0, "w2": None, "w3": 250.0}}


def test_ratios_are_to_the_fastest_on_each_workload():
    ratios = performance_ratios(TIMES)
    assert ratios == {"a": {"w1": 1.0, "w2": 2.0, "w3": 1.0},
                      "b": {"w1": 1.0, "w2": 1.0, "w3": 2.0},
                      "c": {"w1": 2.5, "w2": None, "w3": 5.0}}


def test_a_workload_without_a_time_is_a_miss_and_one_nobody_reached_has_no_fastest():
    ratios = performance_ratios({"a": {"w1": 10.0}, "b": {"w1": 20.0, "w2": None}})
    assert ratios == {"a": {"w1": 1.0, "w2": None}, "b": {"w1": 2.0, "w2": None}}


def test_a_miss_and_a_ratio_beyond_4_count_as_never():
    assert counted_ratio(None) == math.inf and counted_ratio(5.0) == math.inf
    assert counted_ratio(MAX_TAU) == MAX_TAU and counted_ratio(1.0) == 1.0


@pytest.mark.parametrize(("submitter", "at_1", "at_2", "at_4"), [
    ("a", 2 / 3, 1.0, 1.0),   # fastest on w1 (tied) and w3, twice the fastest on w2
    ("b", 2 / 3, 1.0, 1.0),
    ("c", 0.0, 0.0, 1 / 3),   # 2.5x on w1; w2 missed and w3 at 5x never count
])
def test_rho_is_the_fraction_of_workloads_within_tau(submitter, at_1, at_2, at_4):
    ratios = list(performance_ratios(TIMES)[submitter].values())
    assert (rho(ratios, 1.0), rho(ratios, 2.0), rho(ratios, 4.0)) == pytest.approx((at_1, at_2, at_4))
    assert rho(ratios, 1000.0) == rho(ratios, MAX_TAU)  # nothing beyond 4 ever counts


def test_the_grid_is_algoperfs_100_linear_taus_from_1_to_4():
    grid = tau_grid()
    assert len(grid) == 100 and grid[0] == 1.0 and grid[-1] == 4.0
    assert grid[1] - grid[0] == pytest.approx(3 / 99)


def test_the_score_is_1_for_the_fastest_everywhere_and_0_for_never_within_4x():
    assert benchmark_score([1.0, 1.0]) == 1.0 and exact_score([1.0, 1.0]) == 1.0
    assert benchmark_score([None, 4.5]) == 0.0 and exact_score([None, 4.5]) == 0.0
    assert benchmark_score([]) == 0.0


def test_the_score_is_the_normalised_area_under_the_step():
    # (4 - 1) / 3 for the tie, (4 - 2) / 3 at 2x, nothing for the miss and 5x: the exact areas.
    ratios = performance_ratios(TIMES)
    assert exact_score(list(ratios["a"].values())) == pytest.approx((1 + 1 + 2 / 3) / 3)
    assert exact_score(list(ratios["c"].values())) == pytest.approx((1.5 / 3) / 3)
    # The trapezoids on the grid are within half a grid step per workload of the exact area.
    for row in ratios.values():
        assert benchmark_score(list(row.values())) == pytest.approx(exact_score(list(row.values())), abs=0.5 / 99)
    # A step between two grid points (2.5 = 1 + 49.5 grid steps): the trapezoids split the difference.
    assert benchmark_score([2.5]) == pytest.approx(0.5, abs=0.5 / 99)


def test_the_steps_have_a_corner_at_each_counted_ratio():
    taus, heights = profile_steps([1.0, 2.0, None, 5.0])
    assert taus == [1.0, 2.0, 4.0] and heights == [0.25, 0.5, 0.5]


# Run folders: two workloads, two backends --------------------------------------------------------------

OTHER_RULE = {**RULE, "targets": [{"metric": "cer", "value": 35}, {"metric": "wer", "value": 70}]}


def _as(folder: Path, backend: str, hardware: str = "sys-test") -> None:
    """The run folder made a run of ``backend`` on ``hardware`` (result.json and config.json)."""
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**result, "backend": backend, "hardware": hardware}))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "backend": backend}))


def _runs(root: Path, backend: str, workload: str, every_target_at: list[tuple[float, float | None]]) -> Path:
    rule = RULE if workload == "ds2-mini" else OTHER_RULE
    folder = root / f"{backend}-{workload}"
    for index, (cer_at, wer_at) in enumerate(every_target_at):
        write_run(folder / f"run-{index}", cer_at, wer_at, workload=workload, rule=rule)
        _as(folder / f"run-{index}", backend)
    return folder


@pytest.fixture
def two_workloads(tmp_path) -> list[Path]:
    """torch: ds2-mini at 200 s (olympic of 190/200/210), conformer-mini at 100 s; tf: ds2-mini at
    400 s (2x), conformer-mini missed (two of three runs never reach WER 70)."""
    return [_runs(tmp_path, "torch", "ds2-mini", [(50, 190), (50, 200), (50, 210)]),
            _runs(tmp_path, "torch", "conformer-mini", [(60, 100)]),
            _runs(tmp_path, "tf", "ds2-mini", [(50, 400)]),
            _runs(tmp_path, "tf", "conformer-mini", [(60, 100), (60, None), (70, None)])]


def test_a_workloads_time_is_the_olympic_score_of_each_runs_time_to_every_target(two_workloads):
    groups = load_groups(two_workloads)
    assert workload_score(groups[0]).seconds == 200.0 and workload_score(groups[0]).kept == (200.0,)
    missed = workload_score(groups[3])
    assert missed.seconds is None and missed.runs == 3 and missed.converged == 1


def test_submitters_are_the_backend_and_profile_across_workloads(two_workloads):
    across = across_workloads(load_groups(two_workloads))
    assert across.workloads == ["ds2-mini", "conformer-mini"]
    assert {submitter.name: submitter.ratios for submitter in across.submitters} == {
        "torch on sys-test": {"ds2-mini": 1.0, "conformer-mini": 1.0},
        "tf on sys-test": {"ds2-mini": 2.0, "conformer-mini": None}}
    ratios, profile = profile_tables(across)
    assert profile.rows[0] == ["torch on sys-test", "2 of 2", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert profile.rows[1][:7] == ["tf on sys-test", "1 of 2", 0.0, 0.0, 0.5, 0.5, 0.5]
    assert profile.rows[1][7] == pytest.approx(exact_score([2.0, None]), abs=0.5 / 99)
    assert ratios.rows[3] == ["tf on sys-test", "conformer-mini", "tf-conformer-mini", None, None]
    without = profile_tables(across_workloads(load_groups(two_workloads[:3])))  # tf ran no conformer-mini
    assert without[0].rows[3] == ["tf on sys-test", "conformer-mini", "no runs", None, None]
    assert without[1].rows[1][:2] == ["tf on sys-test", "1 of 2"]


def test_the_figure_draws_each_submitters_steps_and_score(two_workloads):
    import matplotlib.pyplot as plt

    from benchbase.report.profile_figure import draw_performance_profile

    axis = draw_performance_profile(across_workloads(load_groups(two_workloads))).axes[0]
    try:
        steps = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in axis.lines}
        assert steps["torch on sys-test: score 1.000"] == ([1.0, 4.0], [1.0, 1.0])
        assert steps["tf on sys-test: score 0.336"] == ([1.0, 2.0, 4.0], [0.0, 0.5, 0.5])
        assert axis.get_xlim() == (1.0, 4.0)
    finally:
        plt.close("all")


def test_one_workload_has_no_profile_and_two_groups_of_one_submitter_and_workload_have_none(two_workloads, tmp_path):
    assert across_workloads(load_groups(two_workloads[::2])) is None  # ds2-mini only
    again = _runs(tmp_path / "again", "torch", "ds2-mini", [(50, 300)])
    across = across_workloads(load_groups([*two_workloads, again]))
    assert across.submitters == [] and "torch-ds2-mini, torch-ds2-mini-2 are all torch on sys-test's" in across.problem
    (table,) = profile_tables(across)
    assert table.empty and table.notes == [across.problem]


def test_score_prints_the_profile_of_two_workloads_and_two_backends(two_workloads):
    printed = run_benchbase("score", *map(str, two_workloads), env={"COLUMNS": "200"})
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "performance profile across workloads" in printed.stdout
    assert "torch on sys-test" in printed.stdout and "1 of 2" in printed.stdout
    document = json.loads(run_benchbase("score", "--json", *map(str, two_workloads)).stdout)
    profile = document["performance_profile"]
    assert profile["workloads"] == ["ds2-mini", "conformer-mini"] and profile["max_tau"] == 4.0
    tf = profile["submitters"]["tf on sys-test"]
    assert tf["workloads"]["ds2-mini"] == {"group": "tf-ds2-mini", "seconds": 400.0, "ratio": 2.0}
    assert tf["workloads"]["conformer-mini"]["ratio"] is None and tf["rho"]["2"] == 0.5
    assert profile["submitters"]["torch on sys-test"]["score"] == 1.0
    one = json.loads(run_benchbase("score", "--json", str(two_workloads[0])).stdout)
    assert "performance_profile" not in one  # one workload: nothing to aggregate


def test_report_shows_the_profile_table_and_its_figure(two_workloads, tmp_path):
    from matplotlib.image import imread

    out = tmp_path / "report"
    finished = run_benchbase("report", *map(str, two_workloads), "--out", str(out))
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert (out / "performance-profile.csv").read_text().splitlines()[1].startswith("torch on sys-test,2 of 2,1.0")
    ratios = (out / "performance-ratios.csv").read_text().splitlines()
    assert ratios[3] == "tf on sys-test,ds2-mini,tf-ds2-mini,6.666667,2.0"
    png = out / "figures" / "performance-profile.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and imread(png).std() > 0.05
    markdown = (out / "report.md").read_text()
    table_at = markdown.index("### performance profile across workloads")
    assert markdown.index("![performance-profile](figures/performance-profile.png)") > table_at  # under its table
    page = (out / "report.html").read_text()
    home = page.index('<section id="performance-profile"')
    assert home < page.index('<figure id="figure-performance-profile"') < page.index("</section>", home)


def test_report_from_the_results_database_shows_the_profile(two_workloads, tmp_path):
    database = tmp_path / "results.sqlite"
    added = run_benchbase("results", "add", "--db", str(database), *map(str, two_workloads))
    assert added.returncode == 0, added.stderr[-2000:]
    out = tmp_path / "from-db"
    finished = run_benchbase("report", "--from-db", str(database), "--out", str(out), "--no-figures")
    assert finished.returncode == 0, finished.stderr[-2000:]
    rows = (out / "performance-profile.csv").read_text().splitlines()[1:]
    assert sorted(row.split(",")[:2] for row in rows) == [["tf on sys-test", "1 of 2"], ["torch on sys-test", "2 of 2"]]
