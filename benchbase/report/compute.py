"""What each group's runs computed: hardware and useful MFU and the padding fraction, as means over
the runs that recorded them (result.json's ``compute``; benchbase.harness.compute)."""

from __future__ import annotations

from benchbase.report.report_table import ReportTable
from benchbase.report.runs import RunGroup
from benchbase.telemetry.peak_flops import NOT_KNOWN

__all__ = ["TABLE_NAME", "compute_table"]

TABLE_NAME = "compute"
NOT_RECORDED = "not recorded"


def compute_table(groups: list[RunGroup]) -> ReportTable:
    """Per group: mean training TFLOP per run, padding %, hardware and useful MFU % and the peak's source;
    "not known" where the devices' peak is not, "not recorded" for runs from before the count existed."""
    rows = []
    for group in groups:
        recorded = [run.result.compute for run in group.runs if run.result.compute]
        if not recorded:
            rows.append([group.shown_name, None, NOT_RECORDED, NOT_RECORDED, NOT_RECORDED, NOT_RECORDED])
            continue
        known = [compute for compute in recorded if compute.get("mfu_hardware") is not None]
        rows.append([group.shown_name, _mean([compute["flops_padded"] / 1e12 for compute in recorded]),
                     _mean([100 * compute["padding_fraction"] for compute in recorded]),
                     _mean([100 * compute["mfu_hardware"] for compute in known]) if known else NOT_KNOWN,
                     _mean([100 * compute["mfu_useful"] for compute in known]) if known else NOT_KNOWN,
                     recorded[0]["peak_source"]])
    return ReportTable("what the runs computed (mean over runs)",
                       ["group", "training TFLOP", "padding (%)", "MFU hardware (%)", "MFU useful (%)", "peak"],
                       rows, digits=3, name=TABLE_NAME,
                       notes=["training FLOPs by the model family's cost model (the forward count x 3); padding: "
                              "the share of them spent on padded frames and labels; MFU: FLOPs / (run clock x the "
                              "devices' dense peak in the run's precision), hardware on the padded batches, useful "
                              f"on the valid frames alone; {NOT_KNOWN}: no published or declared peak."])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
