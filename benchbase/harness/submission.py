"""The submission record: the log lines, written during init, that say what the run is.

Everything the workload pins goes into the log, so `benchbase check` can compare it with the
workload without trusting result.json.
"""

from __future__ import annotations

from typing import Any

from benchbase import __version__
from benchbase.backend import CONTRACT_VERSION, DevicePlan
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.compliance.keys import constants
from benchbase.compliance.precision_keys import lowest_numerical_precisions
from benchbase.data.pipeline import BatchPipeline
from benchbase.data.registered import store_data_record
from benchbase.harness.devices import plan_record
from benchbase.specs import RunConfig
from benchbase.specs.strategy import DEFAULT_STRATEGY

__all__ = ["log_submission", "strategy_record", "submission_record"]


def submission_record(config: RunConfig, environment: dict, plan: DevicePlan, train_data: BatchPipeline,
                      dev_data: dict[str, BatchPipeline]) -> list[tuple[str, Any]]:
    """The submission's log keys and values, in the order the log states them."""
    workload, hardware = config.workload, config.hardware
    optimizer, evaluation = workload.optimizer, workload.evaluation
    return [
        (constants.SUBMISSION_ORG, config.submitter),
        (constants.SUBMISSION_PLATFORM, hardware.name),
        (constants.SUBMISSION_DIVISION, config.division),
        (constants.SUBMISSION_STATUS, constants.RESEARCH),
        (constants.SUBMISSION_BENCHMARK, workload.name),
        (constants.SUBMISSION_ENTRY, f"benchbase {__version__} backend={config.backend}"),
        (own_keys.BACKEND_CONTRACT, CONTRACT_VERSION),
        (own_keys.ENVIRONMENT, environment),
        (constants.SEED, config.seed),
        (constants.GLOBAL_BATCH_SIZE, hardware.pipeline.global_batch),
        (constants.GRADIENT_ACCUMULATION_STEPS, 1),
        (constants.TRAIN_SAMPLES, train_data.utterances),
        (constants.EVAL_SAMPLES, dev_data[workload.scored_subset].utterances),
        (own_keys.EVAL_SUBSETS, {subset: data.utterances for subset, data in dev_data.items()}),
        (own_keys.TTA_SUBSET, workload.scored_subset),
        (own_keys.VOCABULARY, train_data.store.tokens),
        (own_keys.DATA, store_data_record(train_data.store.description)),
        (constants.OPT_NAME, optimizer.name),
        (constants.OPT_BASE_LR, optimizer.learning_rate),
        *[(key, getattr(optimizer, field)) for key, field in own_keys.OPTIMIZER_KEYS[optimizer.name].items()],
        (constants.OPT_GRADIENT_CLIP_NORM, optimizer.gradient_clip_norm),
        (own_keys.PRECISION, workload.model.precision),
        *lowest_numerical_precisions(workload.model.precision, config.strategy.name).items(),
        (own_keys.EVAL_DECODER, evaluation.decoder),
        (own_keys.EVAL_BEAM_WIDTH, evaluation.beam_width),
        (own_keys.EVAL_LM_MODE, evaluation.lm_mode),
        (own_keys.EVAL_LM_ALPHA, evaluation.lm_alpha),
        (own_keys.EVAL_LM_BETA, evaluation.lm_beta),
        (own_keys.WORLD_SIZE, plan.world_size),
        (own_keys.DEVICE_PLAN, plan_record(plan, hardware)),
        (own_keys.OVERRIDES, list(config.overrides)),
        (own_keys.OPEN_CHANGES, list(config.open_changes)),
        (own_keys.STRATEGY, strategy_record(config)),
    ]


def strategy_record(config: RunConfig) -> dict[str, Any]:
    """The strategy as the log states it, with whose weights the run evaluates (docs/design.md,
    "Training strategies": under a strategy whose learners differ, rank 0's own)."""
    strategy = config.strategy
    return {"name": strategy.name, "parameters": strategy.parameters(),
            "evaluated": "the synchronized model" if strategy.name == DEFAULT_STRATEGY else "learner 0"}


def log_submission(log: ComplianceLog, config: RunConfig, environment: dict, plan: DevicePlan,
                   train_data: BatchPipeline, dev_data: dict[str, BatchPipeline]) -> None:
    for key, value in submission_record(config, environment, plan, train_data, dev_data):
        log.event(key, value=value)
