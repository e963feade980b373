"""RunResult: result.json, what a finished run reports. The harness writes it; the report and
`benchbase check` read it back through the same model.

Unlike the specs a person writes, a result is read back from disk by later versions of
benchbase, so reading is lenient where history demands and strict where a value is used:

- Only ``status`` and ``tta`` are required: a run folder's result states its verdict and its
  times, which is what scoring and checking need. Every other field has the default an older
  harness implied by leaving it out (resumes, world_size, device_plan and step_breakdown came
  later; hand-written results in tests carry only a few fields). The harness sets every field.
- Unknown keys are kept (``extra="allow"``), so a result written by a newer version still reads
  and a rewrite loses nothing.
- The values read are validated strictly (``read_run_result``): a number written as a string,
  or a TTA that is not a finite number of seconds, is a problem to report, not to coerce.
- ``last_evaluation``, ``final_evaluation`` and the measurement records stay mappings: their
  shape changed between versions (an early final_evaluation held what last_evaluation holds now),
  and their readers already treat each key as optional.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError
from typing_extensions import TypedDict

__all__ = ["STAGES_NOT_REPORTED", "STEP_STAGES", "TIME_PARTS", "ResultProblem", "RunResult", "TargetReached",
           "read_run_result"]

STEP_STAGES = ("host_to_device", "forward", "backward", "optimizer")
"""The phases of a training step a backend may time in ``Backend.step_timings()`` (seconds, each optional)."""
TIME_PARTS = ("data_wait", *STEP_STAGES, "step", "evaluation", "checkpoint", "other")
"""The parts of ``time_breakdown``, in the order a figure stacks them: "step" is the steps' wall time
the backend did not split into phases (all of it for a backend that reports none), "other" what no
part covers."""
STAGES_NOT_REPORTED = "not reported"


class TargetReached(TypedDict):
    """When a target was reached; a mapping, as hooks and result.json have always had it."""

    seconds: FiniteFloat
    """Run-clock seconds at the end of the evaluation that reached it."""
    minutes: FiniteFloat
    epoch: int


class RunResult(BaseModel):
    # Field order is result.json's key order.
    model_config = ConfigDict(frozen=True, extra="allow", ser_json_inf_nan="constants")

    status: str = Field(description="success (every target reached) or aborted (max epochs or minutes first).")
    stop_reason: str = Field("", description="A StopReason value.")
    workload: str | None = Field(None, description="The workload's name.")
    backend: str | None = Field(None, description="The backend's name.")
    hardware: str | None = Field(None, description="The hardware profile's name.")
    seed: int | None = None
    tta: dict[str, TargetReached | None] = Field(
        description="Target label -> {seconds, minutes, epoch}, or None when never reached.")
    epochs: int = 0
    batches: int = 0
    train_samples: int = 0
    run_seconds: float = 0.0
    init_seconds: float = 0.0
    parameter_count: int = 0
    throughput: dict[str, float] = Field(default_factory=dict, description="Utterances per second: median, mean.")
    data_wait: dict[str, float] = Field(default_factory=dict,
                                        description="median_s, total_s and share_of_step_time.")
    last_evaluation: dict[str, Any] | None = Field(
        None, description="The last evaluation during training: epoch, the scored subset and its rates, and every "
        "subset's.")
    final_evaluation: dict[str, Any] | None = Field(
        None, description="After run_stop, untimed: decoder, beam_width, epoch, seconds, precision and subsets (every "
        "dev and test subset's wer, cer, paper_cer, loss, utterances), fp32 for a run not in fp32; None when skipped.")
    telemetry: dict[str, Any] = Field(default_factory=dict, description="The telemetry sampler's summary.")
    device: str = ""
    devices: list[str] = Field(default_factory=list, description="The devices the backend reported it trained on.")
    division: str = Field("open", description="MLPerf's division: closed (the registered workload but for its run "
                          "choices) or open.")
    resumes: list[dict[str, Any]] = Field(
        default_factory=list, description="One per resume (benchbase run --resume): segment, checkpoint, batch, "
        "interrupted_at_s, lost_s, host (the resuming machine's).")
    world_size: int = Field(1, description="Processes that trained (one per device for a process-per-device backend).")
    device_plan: dict[str, Any] = Field(
        default_factory=dict, description="The plan trained on and the profile's devices (the log's "
        "benchbase_device_plan).")
    step_breakdown: dict[str, float] = Field(
        default_factory=dict, description="data_wait_s, step_s and, where the backend measures it, communication_s "
        "and its share.")
    time_breakdown: dict[str, Any] = Field(
        default_factory=dict, description="Where the wall time went (benchbase.harness.time_breakdown): wall_s, "
        "seconds and fractions (adding up to one) of data_wait, the backend's step phases (host_to_device, forward, "
        "backward, optimizer), the rest of the steps (step), evaluation, checkpoint and other; stages: whether the "
        "backend reported its phases ('not reported' when not).")
    compute: dict[str, Any] = Field(
        default_factory=dict, description="What the run computed (benchbase.harness.compute): flops_padded and "
        "flops_valid (training FLOPs of the padded batches and of their valid frames, by the family's cost model), "
        "padding_fraction (1 - valid / padded), peak_flops and peak_source (the devices' dense peak in the run's "
        "precision; None and 'not known: ...' where no peak is known), mfu_hardware and mfu_useful (padded and "
        "valid FLOPs / (run seconds x peak); None where the peak is not known). Empty where the family has no "
        "cost model.")
    environment: dict[str, Any] = Field(
        default_factory=dict, description="The software environment and CPU the run measured: benchbase version and "
        "commit, Python, OS, host (hashed unless BENCHBASE_SHOW_HOST=1), package versions, the backend's distribution, "
        "accelerator builds and GPUs, cpu (benchbase.telemetry.environment).")
    cpu: dict[str, Any] = Field(
        default_factory=dict, description="cores_in_steps (process CPU s / wall s during train_step), thread_budget, "
        "within_budget; the CPU that ran it: model, vector_extensions, best_isa and isa_caps (environment variables "
        "that held a framework to a lower ISA).")


class ResultProblem(ValueError):
    """Why a text is no result.json, in one line that reads after the file's name and a colon."""


def read_run_result(text: str) -> RunResult:
    """A result.json's text as a RunResult; ResultProblem names the first thing wrong with it."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ResultProblem(f"not valid JSON: {str(error)[:100]}") from None
    if not isinstance(data, dict):
        raise ResultProblem("not a JSON object")
    try:
        return RunResult.model_validate(data, strict=True)
    except ValidationError as error:
        raise ResultProblem(f"not a run result: {_first_problem(error)}") from None


def _first_problem(error: ValidationError) -> str:
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"
