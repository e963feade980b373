"""`benchbase check`'s account of a run's FLOPs and MFU: result.json's ``compute`` re-derived from
the log's per-epoch FLOP totals, its run clock and the peak of the run's own hardware profile in
its precision (benchbase.harness.compute, benchbase.telemetry.peak_flops)."""

from __future__ import annotations

from pydantic import ValidationError

from benchbase.compliance import keys
from benchbase.compliance import rules as r
from benchbase.compliance.check_registry import check
from benchbase.compliance.evidence import Evidence, Skip
from benchbase.compliance.keys import constants
from benchbase.specs import HardwareProfile
from benchbase.specs.numbers import is_number
from benchbase.telemetry.peak_flops import device_peak

__all__ = ["compute"]

ROUNDING = 1e-5
"""result.json keeps the padding fraction to six decimals and MFU to six significant digits."""


@check(r.ComputeRule)
def compute(rule: r.ComputeRule, evidence: Evidence) -> list[str]:
    if evidence.result is None:
        raise Skip("no result.json beside the log, or none that holds a run result")
    claimed, logged = evidence.result.compute, evidence.log.keyed(keys.EPOCH_FLOPS)
    if not claimed:
        return [f"result.json has no compute, but the log has {len(logged)} {keys.EPOCH_FLOPS}"] if logged else []
    if evidence.result.resumes:
        raise Skip("a resumed run: the interrupted epoch's FLOPs before the resume are in no epoch total")
    totals = [event.value for event in logged if isinstance(event.value, dict)]
    padded, valid = (sum(total.get(part, 0) for total in totals) for part in ("padded", "valid"))
    messages = [f"result.json's flops_{part} is {claimed.get(f'flops_{part}')!r}, the log's {keys.EPOCH_FLOPS} "
                f"add up to {logged_total}" for part, logged_total in (("padded", padded), ("valid", valid))
                if claimed.get(f"flops_{part}") != logged_total]
    if messages or padded <= 0:
        return messages or [f"result.json's compute counts FLOPs, but the log has no {keys.EPOCH_FLOPS} total"]
    if not _close(claimed.get("padding_fraction"), 1 - valid / padded, ROUNDING):
        messages.append(f"result.json's padding_fraction {claimed.get('padding_fraction')!r} is not 1 - valid / "
                        f"padded = {1 - valid / padded:.6f}")
    return messages + _peak_messages(claimed, evidence) + _mfu_messages(rule, claimed, evidence, padded, valid)


def _peak_messages(claimed: dict, evidence: Evidence) -> list[str]:
    """The peak is the run's own profile's in its precision, where config.json holds the profile."""
    hardware = (evidence.config or {}).get("hardware")
    precision = evidence.value_of(keys.PRECISION)
    try:
        profile = HardwareProfile.model_validate(hardware)
    except ValidationError:
        return []  # no profile to hold it to (an old or hand-made folder): the MFU check below still runs
    peak = device_peak(profile, precision if isinstance(precision, str) else "fp32")
    if claimed.get("peak_flops") != peak.flops_per_second:
        return [f"result.json's peak_flops is {claimed.get('peak_flops')!r}, but the run's profile "
                f"{profile.name!r} in {precision} has {peak.flops_per_second!r} ({peak.source})"]
    return []


def _mfu_messages(rule: r.ComputeRule, claimed: dict, evidence: Evidence, padded: int, valid: int) -> list[str]:
    stops = evidence.log.keyed(constants.RUN_STOP)
    # The run clock at run_stop: the off-clock intervals (independent scoring) are not in the run time.
    seconds = evidence.log.run_clock(stops[-1].time_ms) if stops else None
    if seconds is None:
        return [f"no {constants.RUN_START} and {constants.RUN_STOP}: the run time MFU divides by is not in the log"]
    peak = claimed.get("peak_flops")
    if not is_number(peak) or peak <= 0 or seconds <= 0:
        return [f"result.json's mfu_{kind} is {claimed.get(f'mfu_{kind}')!r} without a known peak"
                for kind in ("hardware", "useful") if claimed.get(f"mfu_{kind}") is not None]
    # The log's clock is whole milliseconds of wall time, the harness's perf_counter: MFU scales by their ratio.
    allowed = rule.allowed(seconds) / seconds + ROUNDING
    messages = []
    for kind, flops in (("hardware", padded), ("useful", valid)):
        expected = flops / (seconds * peak)
        if not _close(claimed.get(f"mfu_{kind}"), expected, allowed * expected):
            messages.append(f"result.json's mfu_{kind} {claimed.get(f'mfu_{kind}')!r} is not the log's FLOPs / "
                            f"({seconds:.3f} s run x {peak:.4g} FLOP/s) = {expected:.6g}")
    return messages


def _close(value: object, expected: float, allowed: float) -> bool:
    return is_number(value) and abs(float(value) - expected) <= allowed
