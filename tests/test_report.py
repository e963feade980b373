"""`benchbase score` and `benchbase report` on three hand-built run groups with known eval
timelines: exact TTA tables, percentages, olympic scores, cost, energy, and the figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import run_benchbase

from benchbase.errors import InputError
from benchbase.metrics import TargetTracker
from benchbase.report import CostModel, energy_kwh, load_groups, olympic_score
from benchbase.report.comparison import environment_table, pick_baseline, report_tables, scored_groups
from benchbase.report.paper import TTA_OWN_BATCH, paper_tables
from benchbase.specs import RunResult, TTARule

CER, WER = "CER/ref 40", "WER 80"  # a "cer" target: jiwer's CER over reference characters
RULE = {"targets": [{"metric": "cer", "value": 40}, {"metric": "wer", "value": 80}], "window": 3,
        "aggregation": "median"}
STEP = 5.0  # seconds between evaluations
DEVIATION = {"field": "model", "reference": "600 channels", "benchbase": "96 channels", "why": "a CPU"}
FINAL_WER = {"test-other": 44.0, "dev-clean": 21.0, "dev-other": 40.0, "test-clean": 22.0}
WATTS = 360.0  # constant GPU power: energy to T seconds is T / 10,000 kWh
HARDWARE = {"name": "sys-test", "price": {"total_usd": 3 * 8760.0}}  # $1 per hour over 3 years


def _series(reached_at: float | None, last: float) -> list[float]:
    """Error rates on the eval grid: 100 until one eval before reached_at, then 30, so that the
    median of the last 3 first falls below the target at reached_at exactly."""
    count = int(last / STEP)
    drop = count + 10 if reached_at is None else int(reached_at / STEP) - 1
    return [30.0 if index >= drop else 100.0 for index in range(1, count + 1)]


def write_run(folder: Path, cer_at: float | None, wer_at: float | None, workload: str = "ds2-mini",
              family: str | None = None, division: str = "closed", rule: dict = RULE) -> None:
    """A run folder whose result.json follows from its eval timeline by the harness's TTA rule
    (``rule``: a CER target, then a WER target)."""
    folder.mkdir(parents=True)
    last = max(at for at in (cer_at, wer_at, 60.0) if at is not None) + 4 * STEP
    times = [STEP * index for index in range(1, int(last / STEP) + 1)]
    evals = list(zip(times, _series(cer_at, last), _series(wer_at, last), strict=True))
    tracker = TargetTracker(TTARule.model_validate(rule))
    for epoch, (t, cer, wer) in enumerate(evals, start=1):
        tracker.update(epoch, t, {"wer": wer, "cer": cer})
    batches = [{"kind": "batch", "epoch": 1, "batch": i, "t": i * 1.0, "loss": 100.0 / i, "throughput": 50.0 + i % 7,
                "utterances": 32} for i in range(1, int(last) + 1)]
    metrics = batches + [{"kind": "eval", "epoch": e, "t": t, "wer": w, "cer": c} for e, (t, c, w) in
                         enumerate(evals, start=1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    telemetry = [{"t": float(t), "cpu": 80.0, "gpus": [{"util": 90, "power_w": WATTS / 2}] * 2}
                 for t in range(int(last) + 1)]
    (folder / "telemetry.jsonl").write_text("".join(json.dumps(s) + "\n" for s in telemetry))
    model = {} if family is None else {"model": {"family": family}}
    (folder / "config.json").write_text(json.dumps({"workload": {"name": workload, "tta": rule, **model,
                                                                 "reference": "ds2", "deviations": [DEVIATION]},
                                                    "hardware": HARDWARE, "division": division}))
    tta = {label: {"seconds": tracker.reached[label], "minutes": tracker.reached[label] / 60,
                   "epoch": tracker.reached_epoch[label]} if label in tracker.reached else None
           for label in (target.label for target in tracker.rule.targets)}
    result = RunResult(
        status="success" if None not in tta.values() else "aborted", tta=tta, seed=0,
        last_evaluation={"epoch": len(evals), "subset": "dev-clean", "wer": evals[-1][2], "cer": evals[-1][1],
                         "paper_cer": 31.0, "loss": 12.0},
        final_evaluation={"decoder": "greedy", "beam_width": 1, "epoch": len(evals), "seconds": 2.0,
                          "subsets": {subset: {"wer": wer, "cer": 1.0, "paper_cer": 1.0, "loss": 1.0,
                                               "utterances": 10} for subset, wer in FINAL_WER.items()}},
        throughput={"median": 52.0}, data_wait={"share_of_step_time": 0.01},
        telemetry={"cpu_percent_mean": 80.0, "gpu_percent_mean": 90.0, "sampler_cpu_seconds": 1.5})
    (folder / "result.json").write_text(result.model_dump_json())


@pytest.fixture
def groups_root(tmp_path) -> Path:
    """base: five runs (one never reaches WER 80); fast: one run; bad: three runs, two of
    which never reach CER 40."""
    for index, (cer_at, wer_at) in enumerate([(100, 200), (120, None), (110, 180), (130, 220), (90, 210)]):
        write_run(tmp_path / "base" / f"run-{index}", cer_at, wer_at)
    write_run(tmp_path / "fast", 55, 105)
    for index, (cer_at, wer_at) in enumerate([(60, 300), (None, 330), (None, 360)]):
        write_run(tmp_path / "bad" / f"run-{index}", cer_at, wer_at)
    return tmp_path


def _paths(root: Path) -> list[Path]:
    return [root / "base", root / "fast", root / "bad"]


def test_the_hand_built_timelines_reach_their_targets_when_planned(groups_root):
    result = json.loads((groups_root / "base" / "run-1" / "result.json").read_text())
    assert result["tta"][CER]["seconds"] == 120 and result["tta"][WER] is None


@pytest.mark.parametrize(("times", "seconds", "kept", "note"), [
    ([100, 120, 110, 130, 90], 110, (100, 110, 120), "dropped the fastest and the slowest"),
    ([200, None, 180, 220, 210], 210, (200, 210, 220), "one run that never reached it"),
    ([60, None, None], None, (), "2 of 3 runs never reached it"),
    ([55], 55, (55,), "mean of 1 run(s)"),
    ([50, None], None, (), "1 of 2 runs never reached it"),
    ([], None, (), "no runs"),
])
def test_the_olympic_score_drops_fastest_and_slowest(times, seconds, kept, note):
    score = olympic_score(times)
    assert score.seconds == seconds and score.kept == kept and note in score.note


def test_the_tta_tables_are_exact(groups_root):
    scored = scored_groups(load_groups(_paths(groups_root)))
    tables = {table.name: table for table in report_tables(scored, pick_baseline(scored, None), CostModel())}
    minutes, percent, accuracy, final, throughput, cost = (tables[name] for name in (
        "tta-minutes", "tta-percent-of-baseline", "last-evaluation", "final-evaluation", "throughput-utilization",
        "cost-energy"))
    assert minutes.headers == ["group", "runs", CER, WER]
    assert minutes.rows == [["base", 5, 110 / 60, 210 / 60], ["fast", 1, 55 / 60, 105 / 60], ["bad", 3, None, 330 / 60]]
    assert percent.title == "TTA (% of base)"
    assert percent.rows == [["base", 100.0, 100.0], ["fast", 50.0, 50.0], ["bad", None, pytest.approx(330 / 210 * 100)]]
    assert percent.formatted_rows()[2] == ["bad", "NA", "157.1"]
    assert accuracy.rows[1] == ["fast", "dev-clean", 30.0, 31.0, 30.0, 12.0, 25]  # evals every 5 s to 105 + 20
    assert accuracy.formatted_rows()[1][-1] == "25"  # an epoch, not 25.00
    # Table 5: the paper's column order (clean before other, dev before test), whatever the run's order.
    assert final.headers == ["group", "decoder, beam", "dev-clean", "test-clean", "dev-other", "test-other"]
    assert final.rows[0] == ["base", "greedy 1", 21.0, 22.0, 40.0, 44.0]
    assert len(final.rows) == 3  # the paper's rows only beside ds2 runs
    assert any("96 channels (reference: 600 channels). a CPU" in note for note in minutes.notes)
    # utt/s: the median of the batches after warm-up (50 + i % 7), as the figure's; result.json says 52.
    assert throughput.rows[0] == ["base", 53.0, 1.0, 80.0, 90.0, 1.5, "NA", None]  # results without a device plan


def test_percentages_follow_the_named_baseline(groups_root):
    scored = scored_groups(load_groups(_paths(groups_root)))
    percent = _table(report_tables(scored, pick_baseline(scored, "fast"), CostModel()), "tta-percent-of-baseline")
    assert percent.rows == [["base", 200.0, 200.0], ["fast", 100.0, 100.0],
                            ["bad", None, pytest.approx(330 / 105 * 100)]]
    with pytest.raises(InputError, match="--baseline 'sys9' names no run group; groups: base, fast, bad"):
        pick_baseline(scored, "sys9")


def test_cost_and_energy_to_accuracy(groups_root):
    scored = scored_groups(load_groups(_paths(groups_root)))
    cost = _table(report_tables(scored, scored[0], CostModel(lifetime_years=3)), "cost-energy")
    assert cost.headers == ["group", "$/hour", f"{CER} $", f"{WER} $", f"{CER} kWh", f"{WER} kWh"]
    base = cost.rows[0]
    assert base[1:4] == [pytest.approx(1.0), pytest.approx(110 / 3600), pytest.approx(210 / 3600)]
    # Energy averages the runs that reached the target (CER: all five; WER: four of them).
    assert base[4] == pytest.approx(110 / 10_000) and base[5] == pytest.approx((200 + 180 + 220 + 210) / 4 / 10_000)
    assert cost.rows[2][2] is None and cost.rows[2][4] == pytest.approx(60 / 10_000)
    hourly = _table(report_tables(scored, scored[0], CostModel(price_per_hour=3.0)), "cost-energy")
    assert hourly.rows[1][1:4] == [3.0, pytest.approx(3 * 55 / 3600), pytest.approx(3 * 105 / 3600)]


def test_energy_needs_nvml_power():
    assert energy_kwh([{"t": 0.0, "cpu": 50}, {"t": 1.0, "cpu": 50}], 1.0) is None
    assert energy_kwh([{"t": 0.0, "gpus": [{"power_w": 100}]}, {"t": 36.0, "gpus": [{"power_w": 100}]}], 40) \
        == pytest.approx(0.001)


def test_the_paper_reference_matches_design():
    assert TTA_OWN_BATCH["sys10"]["CER 7"] is None and TTA_OWN_BATCH["sys2"]["WER 20.2"] == 1980
    titles = [table.title for table in paper_tables()]
    assert titles[0].startswith("paper Table 4") and any("Table 5" in title for title in titles)


def test_a_folder_without_results_is_unusable(tmp_path):
    with pytest.raises(InputError, match="no result.json"):
        load_groups([tmp_path])


_benchbase = run_benchbase


def test_score_prints_the_olympic_scores_as_json(groups_root):
    finished = _benchbase("score", "--json", *map(str, _paths(groups_root)))
    assert finished.returncode == 0, finished.stderr
    scores = json.loads(finished.stdout)
    assert scores["base"][CER]["score_seconds"] == 110 and scores["base"][WER]["kept_seconds"] == [200, 210, 220]
    assert scores["bad"][CER]["valid"] is False and scores["fast"][WER]["score_minutes"] == 1.75


def test_report_writes_markdown_csv_and_figures(groups_root, tmp_path):
    from matplotlib.image import imread

    out = tmp_path / "report"
    finished = _benchbase("report", *map(str, _paths(groups_root)), "--baseline", "base", "--paper", "--out", str(out))
    assert finished.returncode == 0, finished.stderr
    assert "TTA (% of base)" in finished.stdout and "paper Table 4" in finished.stdout
    markdown = (out / "report.md").read_text()
    assert "| fast | 1 | 0.92 | 1.75 |" in markdown and "| bad | NA | 157.1 |" in markdown
    assert "paper sys10" in markdown and "![accuracy-over-time](figures/accuracy-over-time.png)" in markdown
    assert (out / "tta-minutes.csv").read_text().splitlines()[3] == "bad,3,NA,5.5"
    assert (out / "tta-percent-of-baseline.csv").read_text().splitlines()[2] == "fast,50.0,50.0"
    # The groups record no global batch: nothing to compare at one batch, so no bars and no empty table.
    assert "throughput-same-batch" not in markdown and not (out / "figures" / "throughput-same-batch.png").exists()
    assert "### TTA at the same global batch (minutes; the paper's Table 6)\n\nNo two groups" in markdown
    for name in ("accuracy-over-time", "utilization", "throughput-over-time"):
        png = out / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        image = imread(png)
        assert image.shape[0] > 300 and image.shape[1] > 600 and image.std() > 0.05  # not a blank canvas


def test_report_needs_runs_or_the_paper(tmp_path):
    finished = _benchbase("report", cwd=tmp_path)
    assert finished.returncode == 2 and "name at least one RUN_DIR" in finished.stderr
    paper_only = _benchbase("report", "--paper", "--out", str(tmp_path / "paper"))
    assert paper_only.returncode == 0 and (tmp_path / "paper" / "report.md").is_file()


def test_table_5_sets_ds2_runs_beside_the_papers_numbers(groups_root):
    config = groups_root / "fast" / "config.json"
    config.write_text(config.read_text().replace('"name": "ds2-mini"', '"name": "ds2"'))
    scored = scored_groups(load_groups(_paths(groups_root)))
    tables = report_tables(scored, scored[0], CostModel())
    assert len(_table(tables, "final-evaluation-ds2-mini").rows) == 2  # the paper's rows beside ds2 runs only
    final = _table(tables, "final-evaluation-ds2")
    assert final.rows[1:] == [["paper sys1", "word_beam 512", 17.90, 17.32, 41.85, 45.04],
                              ["paper sys2", "word_beam 512", 18.50, 18.68, 44.31, 48.15],
                              ["paper sys10", "word_beam 512", 19.86, 19.45, 45.86, 49.43]]


def test_score_reports_the_runs_it_left_out(groups_root):
    from cli_helpers import run_benchbase

    killed = groups_root / "base" / "run-9"
    killed.mkdir()
    (killed / "mllog.log").write_text("")  # a run killed before it wrote result.json
    # Wide enough for the temporary folder's path on one line (rich wraps at 80 columns otherwise).
    scored = run_benchbase("score", str(groups_root / "base"), env={"COLUMNS": "250"})
    assert scored.returncode == 0, scored.stderr
    assert "left out of base:" in scored.stdout and "run-9 has no result.json" in " ".join(scored.stdout.split())
    document = json.loads(run_benchbase("score", "--json", str(groups_root / "base")).stdout)
    assert document["base"]["left_out"] == [str(killed)]


def _table(tables, name):
    return next(table for table in tables if table.name == name)


def test_the_score_states_the_coefficient_of_variation():
    score = olympic_score([100.0, 110.0, 120.0, 130.0, 200.0])  # 100 and 200 dropped
    assert score.kept == (110.0, 120.0, 130.0)
    assert score.coefficient_of_variation == pytest.approx(10.0 / 120.0)
    assert olympic_score([100.0]).coefficient_of_variation is None


def test_groups_at_the_same_batch_make_the_papers_table_6(groups_root):
    import shutil

    from benchbase.report.comparison import same_batch_table

    # "base" and "fast" at one global batch, "bad" at another: only the first two are compared.
    for name, batch in (("base", 32), ("fast", 32), ("bad", 16)):
        for config_path in (groups_root / name).rglob("config.json"):
            config = json.loads(config_path.read_text())
            config["hardware"] = {**config["hardware"], "pipeline": {"global_batch": batch}}
            config_path.write_text(json.dumps(config))
    scored = scored_groups(load_groups(_paths(groups_root)))
    table = same_batch_table(scored, [CER, WER])
    assert [row[:2] for row in table.rows] == [["base", 32], ["fast", 32]]
    assert table.rows[1][2:] == [55 / 60, 105 / 60]
    shutil.rmtree(groups_root / "fast")
    lonely = same_batch_table(scored_groups(load_groups([groups_root / "base", groups_root / "bad"])), [CER, WER])
    assert lonely.rows == [] and lonely.notes == ["No two groups trained at the same global batch size."]
    # The sentence alone: no header over an empty grid.
    assert lonely.to_markdown() == f"### {lonely.title}\n\nNo two groups trained at the same global batch size.\n"


def test_an_epoch_prints_as_an_integer_and_a_mean_of_epochs_only_when_whole(groups_root):
    fast = scored_groups(load_groups([groups_root / "fast"]))  # one run, evaluated 25 times
    accuracy = _table(report_tables(fast, fast[0], CostModel()), "last-evaluation")
    assert accuracy.rows[0][-1] == 25 and isinstance(accuracy.rows[0][-1], int)
    assert accuracy.formatted_rows()[0][-1] == "25" and accuracy.to_csv().splitlines()[1].endswith(",25")
    base = scored_groups(load_groups([groups_root / "base"]))  # 44, 28, 40, 48 and 46 evaluations
    assert _table(report_tables(base, base[0], CostModel()), "last-evaluation").rows[0][-1] == pytest.approx(41.2)


def test_the_cost_table_says_how_to_give_a_price(groups_root):
    for config_path in (groups_root / "fast").rglob("config.json"):
        config = json.loads(config_path.read_text())
        config["hardware"] = {"name": "cpu", "price": {"total_usd": None, "hourly_usd": None}}
        config_path.write_text(json.dumps(config))
    scored = scored_groups(load_groups(_paths(groups_root)))
    cost = _table(report_tables(scored, scored[0], CostModel()), "cost-energy")
    assert cost.rows[1][1:4] == [None, None, None]
    hints = [note for note in cost.notes if note.startswith("No price for")]
    assert hints == [hints[0]] and hints[0].startswith("No price for fast:")
    assert "price.total_usd" in hints[0] and "price.hourly_usd" in hints[0] and "--price-per-hour" in hints[0]
    priced = _table(report_tables(scored, scored[0], CostModel(price_per_hour=2.0)), "cost-energy")
    assert not any(note.startswith("No price") for note in priced.notes)


def test_a_copied_run_is_scored_once_and_named(groups_root, tmp_path):
    copies = tmp_path / "copies"
    shutil.copytree(groups_root / "base" / "run-0", copies / "run-0")
    shutil.copytree(groups_root / "base" / "run-0", copies / "run-1")
    shutil.copytree(groups_root / "base" / "run-2", copies / "run-2")  # the same seed, another measurement
    [group] = load_groups([copies])
    assert [run.path.name for run in group.runs] == ["run-0", "run-2"]
    assert group.duplicates == [(copies / "run-1", copies / "run-0")]


def test_a_score_says_how_many_runs_a_spread_needs():
    three = olympic_score([100.0, 110.0, 120.0])
    assert three.stdev is None and "no spread from 1 kept run: it needs 4 runs (5 if one may miss)" in three.note
    assert "a spread 4" in olympic_score([100.0, 110.0]).note
    assert olympic_score([100.0, 110.0, 120.0, 130.0]).stdev is not None


def test_two_machines_folders_of_one_name_are_told_apart_by_host(tmp_path):
    for machine, host in (("a", "sha256:aaaaaaaaaaaa"), ("b", "sha256:bbbbbbbbbbbb")):
        write_run(tmp_path / machine / "torch-cpu" / "run-0", 100, 200)
        result = tmp_path / machine / "torch-cpu" / "run-0" / "result.json"
        environment = {"host": host, "python": "3.11.7", "packages": {"torch": "2.13.0+cpu"},
                       "benchbase": {"version": "0.1.0", "commit": "abc", "dirty": False},
                       "backend_distribution": "benchbase-torch-ds2 0.1.0",
                       "cpu": {"model": "AMD EPYC", "best_isa": "avx512", "vector_extensions": ["AVX-512 BF16"],
                               "isa_caps": {}}}
        recorded = RunResult.model_validate_json(result.read_text()).model_copy(update={"environment": environment})
        result.write_text(recorded.model_dump_json())
    groups = load_groups([tmp_path / "a" / "torch-cpu", tmp_path / "b" / "torch-cpu"])
    assert [group.name for group in groups] == ["torch-cpu", "torch-cpu @sha256:bbbbbbbbbbbb"]
    table = environment_table(groups)
    assert table.rows[0][1:] == ["benchbase-torch-ds2 0.1.0", "torch 2.13.0+cpu", "3.11.7",
                                 "AMD EPYC, avx512 with BF16", "none", "0.1.0 abc", "sha256:aaaaaaaaaaaa"]
    assert table.notes == []


def test_a_folder_of_several_experiments_is_one_group_per_experiment(tmp_path):
    """`runs/` after `make run` and a run of another workload: never scored as seeds of one
    experiment (the conformer's run would count as a ds2-mini run that missed every target).
    The group's name adds what tells its experiment apart; a killed run is listed once."""
    runs = tmp_path / "runs"
    write_run(runs / "ds2-0", 100, 200)
    write_run(runs / "conformer-0", 80, 150, workload="conformer-mini", family="conformer")
    write_run(runs / "ds2-1", 110, 210)
    (runs / "killed").mkdir()
    (runs / "killed" / "mllog.log").write_text("")  # killed before its result
    groups = load_groups([runs])
    assert [(group.name, [run.path.name for run in group.runs]) for group in groups] == [
        ("runs (conformer-mini)", ["conformer-0"]), ("runs (ds2-mini)", ["ds2-0", "ds2-1"])]
    assert [group.left_out for group in groups] == [[runs / "killed"], []]
    assert {group.folder for group in groups} == {"runs"}
    scored = run_benchbase("score", str(runs))
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "runs (ds2-mini)" in scored.stdout and "runs (conformer-mini)" in scored.stdout
    config = json.loads((runs / "ds2-1" / "config.json").read_text())
    config["workload"]["model"] = {"precision": "bf16"}
    (runs / "ds2-1" / "config.json").write_text(json.dumps(config))
    assert [group.name for group in load_groups([runs])] == [
        "runs (conformer-mini, fp32)", "runs (ds2-mini, fp32)", "runs (ds2-mini, bf16)"]
    assert [group.name for group in load_groups([runs / "ds2-0"])] == ["ds2-0"]  # one experiment: as it was


def test_score_names_a_copied_run_and_leaves_it_out(groups_root, tmp_path):
    copies = tmp_path / "copies"
    for name in ("run-0", "run-1"):
        shutil.copytree(groups_root / "base" / "run-0", copies / name)
    printed = run_benchbase("score", str(copies))
    assert printed.returncode == 0 and "run-1 repeats" in printed.stdout.replace("\n", "")
    as_json = json.loads(run_benchbase("score", "--json", str(copies)).stdout)
    assert as_json["copies"]["duplicates"] == [{"run": str(copies / "run-1"), "repeats": str(copies / "run-0")}]
    assert as_json["copies"][CER]["runs"] == 1


# --- `benchbase score` on a narrow terminal or a pipe ---------------------------------------------------

RCP_RUNS = Path(__file__).parent / "data" / "rcp" / "torch-cpu"


@pytest.mark.parametrize("columns", ["80", None], ids=["80-columns", "piped"])
def test_score_reads_at_80_columns_and_in_a_pipe_one_line_or_so_per_target(capsys, monkeypatch, columns):
    from cli_helpers import benchbase_in_process

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: rich assumes 80 columns
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, err = benchbase_in_process(capsys, "score", str(RCP_RUNS))
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    assert "…" not in out  # no header or cell cut short
    targets = ["CER 40", "CER 30", "CER 25", "WER 90", "WER 80"]
    starts = [next(index for index, line in enumerate(lines) if line.lstrip().startswith(target))
              for target in targets]
    assert all(later - earlier <= 3 for earlier, later in zip(starts, starts[1:])), out
    block = " ".join(" ".join(lines[starts[0]:starts[1]]).split())
    for header in ("runs 10", "reached 10", "score ", "fastest ", "slowest ", "stdev (kept) ", "CV % ", "RCP NA",
                   "note: dropped the fastest and the slowest"):
        assert header in block, block
    assert "torch-cpu" in lines[:4] or any(line.strip() == "torch-cpu" for line in lines), out


def test_score_on_a_wide_terminal_keeps_the_table(capsys, monkeypatch):
    from cli_helpers import benchbase_in_process

    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = benchbase_in_process(capsys, "score", str(RCP_RUNS))
    assert code == 0, err
    assert "┃ group" in out and "│ torch-cpu │ CER 40" in out


# --- runs of two workloads, and open runs -----------------------------------------------------------------

RNNT_RULE = {"targets": [{"metric": "cer", "value": 35}, {"metric": "wer", "value": 70}], "window": 3,
             "aggregation": "median"}
RNNT_CER, RNNT_WER = "CER/ref 35", "WER 70"


def _with_rnnt(groups_root: Path) -> list[Path]:
    """base, fast and bad (ds2-mini) and rnnt: an open rnnt-mini run of another target set."""
    write_run(groups_root / "rnnt" / "run-0", 50, 100, workload="rnnt-mini", family="rnnt", division="open",
              rule=RNNT_RULE)
    return [groups_root / "base", groups_root / "rnnt", groups_root / "fast", groups_root / "bad"]


def test_each_workload_has_its_own_tables_and_target_columns(groups_root):
    scored = scored_groups(load_groups(_with_rnnt(groups_root)))
    tables = {table.name: table for table in report_tables(scored, pick_baseline(scored, None), CostModel())}
    ds2, rnnt = tables["tta-minutes-ds2-mini"], tables["tta-minutes-rnnt-mini"]
    assert ds2.title.startswith("ds2-mini: ") and rnnt.title.startswith("rnnt-mini: ")
    assert ds2.headers == ["group", "runs", CER, WER] and [row[0] for row in ds2.rows] == ["base", "fast", "bad"]
    assert rnnt.headers == ["group", "runs", RNNT_CER, RNNT_WER]
    assert rnnt.rows == [["rnnt (open)", 1, 50 / 60, 100 / 60]]  # no NA for the other workload's targets
    assert tables["cost-energy-rnnt-mini"].headers[2:4] == [f"{RNNT_CER} $", f"{RNNT_WER} $"]
    assert {row[1] for row in tables["olympic-scores-rnnt-mini"].rows} == {RNNT_CER, RNNT_WER}
    assert "tta-minutes" not in tables  # one set of target columns for all workloads no longer


def test_a_run_is_compared_with_a_baseline_of_its_own_workload(groups_root):
    scored = scored_groups(load_groups(_with_rnnt(groups_root)))
    tables = {table.name: table for table in report_tables(scored, pick_baseline(scored, "fast"), CostModel())}
    ds2 = tables["tta-percent-of-baseline-ds2-mini"]
    assert ds2.title == "ds2-mini: TTA (% of fast)" and ds2.rows[1] == ["fast", 100.0, 100.0]
    # rnnt-mini's one group would be "TTA (% of rnnt)", a row of 100s: a group alone gets no such table.
    assert "tta-percent-of-baseline-rnnt-mini" not in tables and "tta-minutes-rnnt-mini" in tables


def test_the_loss_is_named_by_the_runs_model_family(groups_root):
    scored = scored_groups(load_groups(_with_rnnt(groups_root)))
    tables = {table.name: table for table in report_tables(scored, scored[0], CostModel())}
    assert tables["last-evaluation-ds2-mini"].headers[5] == "CTC loss"
    assert tables["last-evaluation-rnnt-mini"].headers[5] == "transducer loss"
    from benchbase.report.runs import loss_name

    assert loss_name([run for item in scored for run in item.group.runs]) == "loss"  # two families


def test_open_groups_are_marked_in_the_tables(groups_root):
    for path in (groups_root / "fast").rglob("config.json"):
        path.write_text(path.read_text().replace('"division": "closed"', '"division": "open"'))
    scored = scored_groups(load_groups(_paths(groups_root)))
    tables = report_tables(scored, scored[0], CostModel())
    minutes = _table(tables, "tta-minutes")
    assert [row[0] for row in minutes.rows] == ["base", "fast (open)", "bad"]
    assert any(note.startswith("(open): ") for note in minutes.notes)
    for name in ("tta-percent-of-baseline", "last-evaluation", "throughput-utilization", "cost-energy"):
        assert _table(tables, name).rows[1][0] == "fast (open)", name
    closed = scored_groups(load_groups([groups_root / "base"]))
    assert not any(note.startswith("(open)") for note in _table(report_tables(closed, closed[0], CostModel()),
                                                                  "tta-minutes").notes)


def test_the_loss_panel_is_labelled_by_the_runs_model_family(groups_root):
    from benchbase.report.figures import draw_accuracy

    paths = _with_rnnt(groups_root)
    ds2, rnnt = load_groups([paths[0]]), load_groups([paths[1]])
    assert draw_accuracy(ds2).axes[0].get_ylabel() == "CTC loss"
    assert draw_accuracy(rnnt).axes[0].get_ylabel() == "transducer loss"


def test_the_environment_table_lists_the_framework_the_run_used_not_every_one_installed():
    from benchbase.report.comparison import frameworks_used

    installed = {"torch": "2.5.1", "tensorflow": "2.18.0", "jax": "0.4.38", "numpy": "2.1.3"}
    assert frameworks_used(installed, "torch", "benchbase-torch-ds2 0.1.0") == "torch 2.5.1"
    assert frameworks_used(installed, "tf", "benchbase-tf-ds2 0.1.0") == "tensorflow 2.18.0"
    assert frameworks_used(installed, "jax", None) == "jax 0.4.38"
    # A backend whose names say nothing of its framework: every framework installed, as recorded.
    assert frameworks_used(installed, "linear-ctc", None) == "torch 2.5.1, tensorflow 2.18.0, jax 0.4.38"
