"""benchbase's own compliance-log keys, beside mlperf-logging's master list of constants.

Every key the harness writes and the checker reads comes from here or from ``constants``
(mllog's), so a key is spelled once.
"""

from __future__ import annotations

from enum import StrEnum

from mlperf_logging.mllog import constants

__all__ = [
    "BACKEND_CONTRACT",
    "BATCH",
    "CHECKPOINT",
    "DATA",
    "RESUME",
    "OVERRIDES",
    "OPEN_CHANGES",
    "STRATEGY",
    "COMMUNICATION",
    "CPU_CORES_IN_STEPS",
    "DECODED",
    "DEVICES",
    "DEVICE_PLAN",
    "ENVIRONMENT",
    "EPOCH_FLOPS",
    "ERROR",
    "EVAL_BEAM_WIDTH",
    "EVAL_DECODER",
    "EVAL_LM_ALPHA",
    "EVAL_LM_BETA",
    "EVAL_LM_MODE",
    "EVAL_SUBSETS",
    "EXPORTED_WEIGHTS",
    "FINAL",
    "FINAL_ACCURACY",
    "FINAL_ACCURACY_FP32",
    "INDEPENDENT_SCORE",
    "OFF_CLOCK",
    "OPTIMIZER_REPLAY",
    "REPLAY_NOT_THE_LAYOUT",
    "REPLAY_SKIP_REASONS",
    "OPT_ADADELTA_EPSILON",
    "OPT_ADADELTA_RHO",
    "OPTIMIZER_KEYS",
    "OPT_LR_DECAY_EVERY_STEPS",
    "OPT_LR_HOLD_STEPS",
    "OPT_LR_MIN",
    "OPT_SGD_MOMENTUM",
    "PRECISION",
    "RANK_CHECKPOINTS",
    "STARTUP",
    "STOP_REASON",
    "StopReason",
    "SUBSET",
    "THREAD_BUDGET",
    "TTA_SUBSET",
    "UTTERANCES",
    "VOCABULARY",
    "WARM_UP",
    "WORLD_SIZE",
    "constants",
]

# Hyperparameters the workload pins and mllog has no name for.
OPT_ADADELTA_RHO = "opt_adadelta_rho"
OPT_ADADELTA_EPSILON = "opt_adadelta_epsilon"
OPT_LR_HOLD_STEPS = "opt_learning_rate_hold_steps"
OPT_LR_DECAY_EVERY_STEPS = "opt_learning_rate_decay_every_steps"
OPT_LR_MIN = "opt_learning_rate_min"
OPT_SGD_MOMENTUM = "opt_sgd_momentum"

OPTIMIZER_KEYS: dict[str, dict[str, str]] = {
    "adadelta": {OPT_ADADELTA_RHO: "rho", OPT_ADADELTA_EPSILON: "epsilon"},
    "adamw": {constants.OPT_ADAMW_BETA_1: "beta1", constants.OPT_ADAMW_BETA_2: "beta2",
              constants.OPT_ADAMW_EPSILON: "epsilon", constants.OPT_ADAMW_WEIGHT_DECAY: "weight_decay",
              constants.OPT_LR_WARMUP_STEPS: "warmup_steps", OPT_LR_HOLD_STEPS: "hold_steps",
              OPT_LR_DECAY_EVERY_STEPS: "decay_every_steps", constants.OPT_LR_DECAY_FACTOR: "decay_factor",
              OPT_LR_MIN: "min_learning_rate", constants.OPT_LR_DECAY_SCHEDULE: "decay",
              constants.OPT_LR_DECAY_STEPS: "decay_steps"},
    "sgd": {OPT_SGD_MOMENTUM: "momentum", constants.OPT_WEIGHT_DECAY: "weight_decay"},
}
"""Per optimizer (``OptimizerSpec.name``), its own log keys beside opt_name, opt_base_learning_rate and
opt_gradient_clip_norm, and the spec field each states."""
EVAL_DECODER = "eval_decoder"
EVAL_BEAM_WIDTH = "eval_beam_width"
EVAL_LM_MODE = "eval_lm_mode"
EVAL_LM_ALPHA = "eval_lm_alpha"
EVAL_LM_BETA = "eval_lm_beta"
PRECISION = "precision"

# Evaluation on named subsets.
SUBSET = "subset"
"""eval_accuracy and FINAL_ACCURACY metadata: the subset the rates are of."""
DECODED = "decoded"
"""eval_accuracy metadata: the run-folder path of the decoded outputs the rates come from."""
UTTERANCES = "utterances"
"""eval_accuracy and FINAL_ACCURACY metadata: how many utterances the subset's evaluation decoded."""
CHECKPOINT = "benchbase_checkpoint"
"""Value: the run-folder path of a checkpoint just written (metadata epoch_num, BATCH; FINAL: true
for the one written after run_stop)."""
BATCH = "batch"
"""CHECKPOINT metadata: the batches trained when it was written."""
FINAL = "final"
"""CHECKPOINT metadata: true for the checkpoint of the final weights, written after run_stop."""
RANK_CHECKPOINTS = "rank_checkpoints"
"""CHECKPOINT metadata of a periodic checkpoint in a run of several processes: the run-folder paths
of the other ranks' own checkpoints written beside it at the same batch (their learners' state)."""
TTA_SUBSET = "benchbase_tta_subset"
"""Value: the dev subset the TTA rule is scored on."""
DATA = "benchbase_data"
"""Value: the data the store holds (benchbase.data.registered.store_data_record): its corpus and each
subset's listed and kept utterances with a digest of the listed ids; the division rule holds a closed
run's to the workload's registered data."""
VOCABULARY = "benchbase_vocabulary"
"""Value: what the store's labels are in: {kind: characters}, or a sentencepiece vocabulary's
settings, symbols and model file with its SHA-256 (store.json's ``vocabulary``)."""
EVAL_SUBSETS = "benchbase_eval_subsets"
"""Value: {dev subset: utterances evaluated}."""
FINAL_ACCURACY = "benchbase_final_accuracy"
"""After run_stop, one per dev and test subset: the final model's rates (metadata SUBSET,
EVAL_DECODER, EVAL_BEAM_WIDTH, utterances); not timed."""
FINAL_ACCURACY_FP32 = "benchbase_final_accuracy_fp32"
"""After FINAL_ACCURACY, for a run whose precision is not fp32: the same weights evaluated in fp32
(metadata as FINAL_ACCURACY's, PRECISION "fp32"), so the cost of the precision shows; not timed."""
INDEPENDENT_SCORE = "benchbase_independent_score"
"""After each evaluation (metadata epoch_num, SUBSET) and after the final one (metadata FINAL):
benchbase's reference model re-scored a sample of the subset from the backend's exported weights
and compared with predict(). Value: {utterances, seed (of the sample, drawn after the backend
was built and kept from it), disagreeing (utterance ids), worst_ratio (largest difference over
its tolerance), texts_differ, seconds, agree}."""
OPTIMIZER_REPLAY = "benchbase_optimizer_replay"
"""Once per fresh run, after its first step (metadata epoch_num): the step replayed from the exported
weights with the workload's optimizer in float64 (benchbase.harness.optimizer_replay). Value:
{optimizer, probe, worst_ratio (largest difference over its bound), seconds, agree}, or {agree:
false, error} before the run stopped for it, or {skipped: reason} where it cannot be exact: one of
REPLAY_SKIP_REASONS, or REPLAY_NOT_THE_LAYOUT (with the layout's error after it) for weights the
reference cannot read, which only an open run may log."""
REPLAY_SKIP_REASONS = ("multi-process", "a strategy other than sync", "a precision below fp32",
                       "no sgd or adadelta to probe with", "dropout masks differ from the twin's")
"""Every reason a closed run may log for not replaying its first step (OPTIMIZER_REPLAY)."""
REPLAY_NOT_THE_LAYOUT = "the exported weights are not the family's layout"
OFF_CLOCK = "benchbase_off_clock"
"""An interval (INTERVAL_START, INTERVAL_END) inside the timed run that the run clock leaves out,
the independent scoring's (metadata epoch_num, why). The checker subtracts each one from the
wall time of the events after it (ParsedLog.run_clock), from the log's own times."""
EXPORTED_WEIGHTS = "benchbase_exported_weights"
"""After run_stop: value {path (run-folder path of the final weights as export_weights() gave
them, an .npz in the framework-neutral layout), sha256}; `benchbase verify` re-scores them
with the reference model alone."""

RESUME = "benchbase_resume"
"""A resumed run (benchbase run --resume): value {checkpoint, batch, epoch, segment,
interrupted_at_s (the run clock when the interrupted segment ended), lost_s (the run-clock
seconds trained since the checkpoint, lost and counted), skipped (why newer checkpoints were
passed over), host (the resuming machine's, as benchbase_environment's)}. Events after it are
on the run clock at their wall time less every resume's downtime, which the checker computes
from the log's own times (ParsedLog.resumes): the log does not state it."""

OVERRIDES = "benchbase_overrides"
"""Value: the run's --set overrides as given (a list of strings; empty when none)."""
OPEN_CHANGES = "benchbase_open_changes"
"""Value: what puts the run in the open division ("path: registered -> used"); empty when closed."""
STRATEGY = "benchbase_strategy"
"""Value: the training strategy {name, parameters, evaluated} (``evaluated``: whose weights rank 0
scores; "learner 0" for a strategy whose learners' weights differ). Absent from logs written before
strategies existed: such a run trained sync. Only sync is in the closed division."""
COMMUNICATION = "benchbase_communication"
"""At each epoch_stop of a distributed run: what rank 0's learner communicated in that epoch's steps,
as its backend measured it: value {bytes_per_step (payload handed to collectives and point-to-point
sends), seconds_per_step (waiting for them), steps}."""
EPOCH_FLOPS = "benchbase_epoch_flops"
"""At each epoch_stop: the training FLOPs of that epoch's steps (on every device together) by the
model family's cost model (``FamilyParts.batch_flops``): value {padded (the padded batches the
steps computed), valid (the utterances' own frames and labels), steps}; metadata epoch_num. Absent
where the family has no cost model."""

# What the run was made of and how it behaved.
ENVIRONMENT = "benchbase_environment"
"""Value: the software environment and CPU the run measured (benchbase.telemetry.environment):
benchbase version and commit, Python, OS, host, package versions, the backend's distribution,
accelerator builds, and "cpu" (model, vector extensions, best ISA, ISA caps)."""
BACKEND_CONTRACT = "benchbase_backend_contract"
DEVICES = "benchbase_devices"
"""Value: the devices the backend reports it trains on (list of strings)."""
DEVICE_PLAN = "benchbase_device_plan"
"""Value: the plan the run trained on (kind, count, batch_per_device, world_size) and the profile's
own device kind and count; ``overridden`` when --device or --devices departed from the profile."""
WORLD_SIZE = "benchbase_world_size"
"""Value: the processes that trained (1, or one per device under torch.distributed)."""
STARTUP = "benchbase_startup"
"""After the first training step of a process's segment (a fresh run's, or a resumed one's): where
the run clock went before training began. Value {build_s (backend.build(), compilation included
for a framework that compiles there), first_batch_wait_s (the pipeline's first batch),
first_step_s (the first train_step, where XLA and tf.function compile), first_step_end_s (the
run clock when that step ended)}."""
WARM_UP = "benchbase_warm_up"
"""In init, where the workload's TTA rule says ``compilation: before_run_start`` (also after a resume):
the model built and compiled off the clock. Value {build_s, warm_up_s (backend.warm_up()), shapes
(the distinct batch shapes it was given)}; under ``on_clock`` the log holds none."""
CPU_CORES_IN_STEPS = "benchbase_cpu_cores_in_steps"
"""Value: process CPU seconds / wall seconds over every train_step; metadata THREAD_BUDGET."""
THREAD_BUDGET = "thread_budget"

# run_stop metadata beside mllog's status.
STOP_REASON = "stop_reason"
"""Value: a StopReason."""
ERROR = "error"


class StopReason(StrEnum):
    """Why a run stopped (run_stop's stop_reason, result.json's): a closed set."""

    TARGETS_REACHED = "targets_reached"
    """Every target reached: status success."""
    MAX_EPOCHS = "max_epochs"
    MAX_MINUTES = "max_minutes"
    ERROR = "error"
    """The backend, a plugin or the harness raised; the error is in run_stop's metadata."""
    INTERRUPTED = "interrupted"
    """Ctrl-C, SIGTERM (or another KeyboardInterrupt / SystemExit) stopped the run."""
    NON_FINITE = "non_finite"
    """A loss or log-probability was NaN or infinite; the batch is named in run_stop's error."""
    PREDICTION_MISMATCH = "prediction_mismatch"
    """predict() disagreed with the backend's exported weights (independent scoring); the
    utterances are named in run_stop's error."""

    @property
    def succeeded(self) -> bool:
        return self is StopReason.TARGETS_REACHED

    @property
    def finished(self) -> bool:
        """The run ran to its end: every target, or a limit of the workload (status aborted, yet a
        result, its unreached targets counted as such). The others (an error, an interruption, NaN,
        a predict() that disagrees) stop a run before its end: its log is no result."""
        return self in (StopReason.TARGETS_REACHED, StopReason.MAX_EPOCHS, StopReason.MAX_MINUTES)
