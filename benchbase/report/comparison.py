"""The report's comparison tables, one row per run group: TTA in minutes and in percent of a baseline
(the paper's Tables 4 and 6), final accuracy (Table 5), throughput and utilization, and the
cost and energy to reach each target (beyond the paper)."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from benchbase.errors import InputError
from benchbase.report.compute import compute_table
from benchbase.report.cost import CostModel, energy_kwh
from benchbase.report.paper import FINAL_WER, PLATFORMS
from benchbase.report.profile_table import across_workloads, profile_tables
from benchbase.report.report_table import ReportTable
from benchbase.report.runs import RunGroup, groups_by_shared_batch, groups_by_workload, loss_name
from benchbase.report.scoring import OlympicScore, score_group
from benchbase.report.throughput import THROUGHPUT_DIGITS, WARMUP_BATCHES, group_throughput
from benchbase.report.time_breakdown import time_breakdown_table
from benchbase.specs import RunResult

__all__ = ["OPEN_NOTE", "Scored", "pick_baseline", "report_tables", "score_table", "scored_groups", "workload_groups"]


@dataclass
class Scored:
    group: RunGroup
    scores: dict[str, OlympicScore]

    def minutes(self, label: str) -> float | None:
        score = self.scores.get(label)
        return None if score is None else score.minutes


def scored_groups(groups: list[RunGroup]) -> list[Scored]:
    return [Scored(group, score_group(group)) for group in groups]


def pick_baseline(scored: list[Scored], name: str | None) -> Scored:
    """The group called NAME (folder name, or its hardware profile's name); the first by default."""
    if name is None:
        return scored[0]
    for candidate in scored:
        if name in (candidate.group.name, candidate.group.hardware.get("name")):
            return candidate
    raise InputError(f"--baseline {name!r} names no run group; groups: {', '.join(s.group.name for s in scored)}")


def environment_table(groups: list[RunGroup]) -> ReportTable:
    """What each group measured: the software and the CPU its first run recorded."""
    rows = [[group.name, *_environment_cells(group.environment, group.runs[0].result.cpu, group.runs[0].result.backend)]
            for group in groups]
    notes = [] if all(group.environment for group in groups) else [
        "NA: the run predates the environment record (benchbase_environment, rule set 1.4)."]
    return ReportTable("software environment (the first run of each group)", ["group", "backend", "frameworks",
                       "python", "CPU", "GPU", "benchbase", "host"], rows, name="environment", notes=notes)


FRAMEWORK_WORDS = {"torch": {"torch", "pytorch"}, "tensorflow": {"tf", "tensorflow"},
                   "tensorflow-cpu": {"tf", "tensorflow"}, "jax": {"jax"}}
"""A framework's distribution -> the words that name it in a backend's name or distribution
(benchbase-torch-ds2, tf): the environment records every framework installed, a run used one."""


def frameworks_used(packages: dict, backend: str | None, distribution: str | None) -> str:
    """The frameworks the run's backend names, with their versions; every framework installed
    where the backend names none (a third-party backend of another name)."""
    words = set(re.split(r"[^a-z0-9]+", f"{backend} {distribution or ''}".lower()))
    installed = [name for name in FRAMEWORK_WORDS if name in packages]
    used = [name for name in installed if FRAMEWORK_WORDS[name] & words] or installed
    return ", ".join(f"{name} {packages[name]}" for name in used)


def _environment_cells(environment: dict, cpu: dict, backend: str | None) -> list[str | None]:
    if not environment:
        return [None] * 7
    frameworks = frameworks_used(environment.get("packages") or {}, backend, environment.get("backend_distribution"))
    recorded_cpu = environment.get("cpu") or cpu or {}
    extensions = recorded_cpu.get("vector_extensions") or []
    isa = f"{recorded_cpu.get('best_isa', '')}{' with BF16' if 'AVX-512 BF16' in extensions else ''}"
    caps = recorded_cpu.get("isa_caps") or {}
    gpus = (environment.get("accelerator") or {}).get("gpus") or {}
    gpu = (f"{gpus.get('count')}x {', '.join(dict.fromkeys(gpus.get('models', [])))} (driver {gpus.get('driver')})"
           if gpus.get("count") else "none")
    source = environment.get("benchbase") or {}
    commit = (source.get("commit") or "")[:10]
    revision = f"{source.get('version', '?')} {commit}{' (dirty)' if source.get('dirty') else ''}".strip()
    return [environment.get("backend_distribution"), frameworks, environment.get("python"),
            f"{recorded_cpu.get('model', '?')}, {isa}{' (capped)' if caps else ''}", gpu, revision,
            environment.get("host")]


def report_tables(scored: list[Scored], baseline: Scored, cost: CostModel) -> list[ReportTable]:
    """The environment table, then the comparison tables workload by workload: a target column
    holds one workload's target (NA: not reached), and each workload's percentages refer to a
    group of that workload (``baseline`` where it is one, else the workload's first group); then,
    for groups of two or more workloads, the performance profile across them."""
    by_workload = workload_groups(scored)
    tables = [environment_table([item.group for item in scored])]
    for workload, items in by_workload.items():
        labels = _labels(items)
        own = baseline if any(item is baseline for item in items) else items[0]
        # A group alone compares with nothing: its "TTA (% of itself)" would be a column of 100s.
        percent = [tta_percent_table(items, labels, own)] if len(items) > 1 else []
        part = [tta_minutes_table(items, labels), same_batch_table(items, labels), *percent, accuracy_table(items),
                final_evaluation_table(items), throughput_table(items),
                time_breakdown_table([item.group for item in items]), compute_table([item.group for item in items]),
                score_table(items),
                cost_table(items, labels, cost)]
        if own is not baseline and percent:
            percent[0].notes.append(f"{baseline.group.name} is a {baseline.group.workload_name} group: a "
                                    f"{workload} group is compared with {own.group.name}, the first of {workload}.")
        if any(item.group.open for item in items):
            for table in part:
                table.notes.append(OPEN_NOTE)
        if len(by_workload) > 1:
            for table in part:
                table.title, table.name = f"{workload}: {table.title}", f"{table.name}-{workload}"
        tables += part
    across = across_workloads([item.group for item in scored])
    return tables + ([] if across is None else profile_tables(across))


OPEN_NOTE = ("(open): a group with runs in the open division (a workload changed from the registered one, or a "
             "strategy other than sync): not comparable with closed results.")


def workload_groups(scored: list[Scored]) -> dict[str, list[Scored]]:
    """Workload name -> its scored groups, in the order they came."""
    return groups_by_workload(scored, lambda item: item.group)


def same_batch_table(scored: list[Scored], labels: list[str]) -> ReportTable:
    """The paper's Table 6: TTA of the groups that trained at the same global batch, batch by batch.

    The TTA table above is the paper's Table 4 (every platform at its own batch size). Here only
    batch sizes that at least two groups share appear, so that the comparison is of the
    platforms and frameworks, not of the batch size.
    """
    by_group = {id(item.group): item for item in scored}
    rows = [[group.shown_name, batch, *(by_group[id(group)].minutes(label) for label in labels)]
            for batch, shared in groups_by_shared_batch([item.group for item in scored]).items() for group in shared]
    # Without rows the sentence alone says it: a header over an empty grid reads as missing data.
    notes = [("The TTA table above is the paper's Table 4 (each group at its own batch size); here, the groups that "
              "share a global batch size (the paper's Table 6).") if rows else
             "No two groups trained at the same global batch size."]
    return ReportTable("TTA at the same global batch (minutes; the paper's Table 6)",
                       ["group", "global batch", *labels],
                       rows, name="tta-same-batch", notes=notes)


def tta_minutes_table(scored: list[Scored], labels: list[str]) -> ReportTable:
    rows = [[item.group.shown_name, len(item.group.runs), *(item.minutes(label) for label in labels)]
            for item in scored]
    subsets = sorted({str(_workload(run).get("tta", {}).get("subset") or "the first dev subset")
                      for item in scored for run in item.group.runs})
    notes = ["NA: not reached (or more than one run never reached it).",
             f"Scored on {', '.join(subsets)}; CER is the paper's (edits / the longer of hypothesis and reference), "
             "CER/ref jiwer's (edits / reference)."]
    return ReportTable("TTA (minutes, olympic score over runs)", ["group", "runs", *labels], rows, name="tta-minutes",
                       notes=notes + deviation_notes(scored))


def deviation_notes(scored: list[Scored]) -> list[str]:
    """Every deviation the runs' workloads declare from their reference, once per workload."""
    notes: list[str] = []
    workloads: dict[str, dict] = {}
    for item in scored:
        for run in item.group.runs:
            workload = _workload(run)
            workloads.setdefault(str(workload.get("name", "?")), workload)
    for name, workload in workloads.items():
        deviations = [item for item in workload.get("deviations") or () if isinstance(item, dict)]
        if deviations:
            notes.append(f"Workload {name} deviates from {workload.get('reference') or 'its reference'}:")
            notes += [f"- {item.get('field')}: {item.get('benchbase')} (reference: {item.get('reference')}). "
                      f"{item.get('why')}" for item in deviations]
    return notes


def tta_percent_table(scored: list[Scored], labels: list[str], baseline: Scored) -> ReportTable:
    rows = [[item.group.shown_name, *(_percent(item.minutes(label), baseline.minutes(label)) for label in labels)]
            for item in scored]
    return ReportTable(f"TTA (% of {baseline.group.name})", ["group", *labels], rows, digits=1,
                       name="tta-percent-of-baseline")


def accuracy_table(scored: list[Scored]) -> ReportTable:
    """The last evaluation during training, on the subset TTA is scored on."""
    rows = []
    for item in scored:
        lasts = [_last_evaluation(run.result) for run in item.group.runs]
        rows.append([item.group.shown_name, ", ".join(sorted({str(last.get("subset", "dev")) for last in lasts})),
                     *(_mean(last.get(metric) for last in lasts) for metric in ("wer", "paper_cer", "cer", "loss")),
                     _mean_count(last.get("epoch") for last in lasts)])
    loss = loss_name([run for item in scored for run in item.group.runs])
    return ReportTable("accuracy at the last evaluation (%, mean over runs)",
                       ["group", "subset", "WER", "CER", "CER/ref", loss, "epoch"], rows, name="last-evaluation")


def final_evaluation_table(scored: list[Scored]) -> ReportTable:
    """The paper's Table 5: the final model's WER on every dev and test subset, after run_stop."""
    subsets = _final_subsets(scored)
    rows = []
    for item in scored:
        finals = [run.result.final_evaluation or {} for run in item.group.runs]
        decoders = sorted({f"{final['decoder']} {final['beam_width']}" for final in finals if "decoder" in final})
        rows.append([item.group.shown_name, ", ".join(decoders) or None,
                     *(_mean(((final.get("subsets") or {}).get(subset) or {}).get("wer") for final in finals)
                       for subset in subsets)])
    notes = ["WER (%), mean over runs; NA: the run skipped its final evaluation (--no-final-eval) or has no such "
             "subset."]
    if any(_workload(run).get("name") == "ds2" for item in scored for run in item.group.runs):
        # The paper's val-* are LibriSpeech's dev-* subsets.
        paper_columns = [subset.replace("dev-", "val-") for subset in subsets]
        rows += [[f"paper {name}", "word_beam 512", *(FINAL_WER[name].get(column) for column in paper_columns)]
                 for name in PLATFORMS]
    return ReportTable("final WER on every subset (the paper's Table 5; not timed)",
                       ["group", "decoder, beam", *subsets], rows, name="final-evaluation", notes=notes)


def _final_subsets(scored: list[Scored]) -> list[str]:
    found = [subset for item in scored for run in item.group.runs
             for subset in ((run.result.final_evaluation or {}).get("subsets") or {})]
    # The paper's column order: clean before other, dev before test within each.
    return sorted(dict.fromkeys(found), key=lambda name: ("other" in name, not name.startswith("dev"), name))


def _last_evaluation(result: RunResult) -> dict:
    # Runs written before subsets existed called it final_evaluation and had no subset.
    last = result.last_evaluation or result.final_evaluation or {}
    return last if "subsets" not in last or "wer" in last else {}


def _workload(run) -> dict:
    workload = run.config.get("workload")
    return workload if isinstance(workload, dict) else {}


def throughput_table(scored: list[Scored]) -> ReportTable:
    rows = []
    for item in scored:
        results = [run.result for run in item.group.runs]
        rows.append([item.group.shown_name,
                     group_throughput(item.group),
                     _mean(_percent(result.data_wait.get("share_of_step_time"), 1) for result in results),
                     _mean(result.telemetry.get("cpu_percent_mean") for result in results),
                     _mean(result.telemetry.get("gpu_percent_mean") for result in results),
                     _mean(result.telemetry.get("sampler_cpu_seconds") for result in results),
                     _devices(results),
                     _mean(_percent(result.step_breakdown.get("communication_share_of_step"), 1)
                           for result in results)])
    return ReportTable("throughput and utilization (mean over runs)",
                       ["group", "utt/s (median)", "data wait %", "CPU %", "GPU %", "sampler CPU s", "devices",
                        "all-reduce % of step"], rows, digits=THROUGHPUT_DIGITS, name="throughput-utilization",
                       notes=[f"utt/s: each run's median per-batch throughput after {WARMUP_BATCHES} warm-up "
                              "batches, the median over the group's runs; the throughput figure shows the same "
                              "number.",
                              "devices: the plan trained on (kind x count, processes); * marks an override of the "
                              "profile's devices. all-reduce: the backend's measured gradient communication, which "
                              "may overlap the backward pass; NA where the backend measures none."])


def _devices(results: list[RunResult]) -> str:
    plans = {(plan.get("kind"), plan.get("count"), plan.get("world_size"), plan.get("overridden"))
             for plan in (result.device_plan for result in results) if plan}
    if len(plans) != 1:
        return "NA" if not plans else "mixed"
    kind, count, processes, overridden = plans.pop()
    return f"{kind} x{count}, {processes} proc{'' if processes == 1 else 's'}{' *' if overridden else ''}"


def cost_table(scored: list[Scored], labels: list[str], cost: CostModel) -> ReportTable:
    headers = ["group", "$/hour"] + [f"{label} $" for label in labels] + [f"{label} kWh" for label in labels]
    rows = []
    for item in scored:
        hardware = item.group.hardware
        dollars = [cost.cost(hardware, item.scores[label].seconds if label in item.scores else None)
                   for label in labels]
        rows.append([item.group.shown_name, cost.hourly(hardware), *dollars,
                     *(_energy(item, label) for label in labels)])
    notes = [f"Cost: {cost.describe()}, times the olympic TTA."]
    unpriced = [row[0] for row in rows if row[1] is None]
    if unpriced:
        notes.append(_price_hint(unpriced))
    notes.append("Energy: GPU power from NVML integrated up to TTA, mean over the runs that reached the target; NA "
                 "without NVML power readings.")
    return ReportTable("cost and energy to accuracy", headers, rows, digits=4, name="cost-energy", notes=notes)


def _price_hint(unpriced: list[str]) -> str:
    # An all-NA column with no way out reads as a bug; say where a price comes from.
    return (f"No price for {', '.join(unpriced)}: no price.total_usd (a purchase price, amortized over "
            "--lifetime-years) or price.hourly_usd (a rental price) in the hardware profile. Give one in the "
            "profile's YAML (hardware_profiles/, or your own --hw FILE) for later runs, or pass `benchbase report "
            "--price-per-hour` for these.")


def score_table(scored: list[Scored]) -> ReportTable:
    rows = []
    for item in scored:
        for label, score in item.scores.items():
            rows.append([item.group.shown_name, label, score.runs, score.converged, score.minutes,
                         _minutes(score.fastest), _minutes(score.slowest), _minutes(score.stdev),
                         None if score.coefficient_of_variation is None else 100 * score.coefficient_of_variation,
                         score.note])
    resumed = [f"{item.group.name}: {run.path.name} ({len(run.result.resumes)}x)" for item in scored
               for run in item.group.runs if run.result.resumes]
    notes = [f"Resumed runs (benchbase run --resume): {', '.join(resumed)}. Their TTA counts the time up to each "
             "interruption, the work lost since its checkpoint and the time after; the restart's init is not "
             "timed."] if resumed else []
    notes.append("CV: the kept runs' standard deviation over their mean (%), the run-to-run noise of the TTA.")
    return ReportTable("olympic score (minutes)", ["group", "target", "runs", "reached", "score", "fastest",
                                                   "slowest", "stdev (kept)", "CV %", "note"], rows,
                       name="olympic-scores", notes=notes)


def _energy(item: Scored, label: str) -> float | None:
    return _mean(energy_kwh(run.telemetry, run.tta_seconds(label)) for run in item.group.runs)


def _labels(scored: list[Scored]) -> list[str]:
    return list(dict.fromkeys(label for item in scored for label in item.group.targets))


def _percent(value: float | None, baseline: float | None) -> float | None:
    return None if value is None or not baseline else 100 * value / baseline


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 60


def _mean_count(values) -> int | float | None:
    """The mean of counts (epochs): an int when it is a whole number, so that 11 does not print as 11.00."""
    mean = _mean(values)
    return int(mean) if mean is not None and mean.is_integer() else mean


def _mean(values) -> float | None:
    present = [value for value in values if isinstance(value, int | float) and not isinstance(value, bool)]
    return statistics.fmean(present) if present else None
