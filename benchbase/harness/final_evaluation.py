"""The final evaluation: after run_stop, off the clock (as MLPerf and the paper do), the trained
model on every dev and test subset at the final decoder's width, the paper's Table 5, in the
run's precision; for a run not in fp32, the same weights once more by an FP32 twin. The
scored subset's predictions are checked against the exported weights by the reference model
(independent scoring; ``benchbase.harness.independent_scoring``).

It goes into the log as ``benchbase_final_accuracy`` events and into result.json as
``final_evaluation``.
"""

from __future__ import annotations

import time

from benchbase.backend import Backend
from benchbase.compliance import ComplianceLog
from benchbase.compliance import keys as own_keys
from benchbase.data.pipeline import BatchPipeline
from benchbase.decode import evaluation_decoder
from benchbase.decode.factory import Decoder
from benchbase.errors import PredictionMismatch
from benchbase.families.parts import EvaluationHead, family_parts
from benchbase.harness.assembly import fp32_context, run_pipeline
from benchbase.harness.evaluation import evaluate_subsets, subset_records
from benchbase.harness.independent_scoring import UtteranceSample, score_sample
from benchbase.harness.initialization import RunInputs
from benchbase.harness.recorder import RunRecorder
from benchbase.specs import RunConfig

__all__ = ["FinalEvaluation"]


class FinalEvaluation:
    def __init__(self, config: RunConfig, inputs: RunInputs, backend: Backend, backend_class: type[Backend],
                 log: ComplianceLog, recorder: RunRecorder) -> None:
        """``backend``: the trained one; ``backend_class`` builds the FP32 twin."""
        evaluation = config.workload.evaluation
        self.config = config
        self.inputs = inputs
        self.backend = backend
        self.backend_class = backend_class
        self.log = log
        self.recorder = recorder
        self.decoder_name = evaluation.final_decoder or evaluation.decoder
        self.beam_width = evaluation.final_beam_width or evaluation.beam_width

    def run(self, epoch: int) -> dict:
        """Evaluate the model trained for ``epoch`` epochs; returns result.json's ``final_evaluation``."""
        workload = self.config.workload
        decoder = evaluation_decoder(workload.evaluation.model_copy(update={"decoder": self.decoder_name}),
                                     self.config.data, workload.data.train, blank=workload.model.blank_index,
                                     beam_width=self.beam_width, tokens=workload.data.tokens)
        # A store prepared without some test subset still gets the others; `benchbase check`
        # reports the missing ones (rule final_evaluation).
        subsets = [subset for subset in workload.data.dev + workload.data.test if self.inputs.store.has(subset)]
        pipelines = {subset: run_pipeline(self.config, self.inputs.store, (subset,), training=False)
                     for subset in subsets}
        started = time.perf_counter()
        scored_subset = workload.scored_subset
        sample = None
        if workload.evaluation.independent_utterances > 0:  # 0: off (open division)
            sample = UtteranceSample(scored_subset, workload.evaluation.independent_final_utterances)
        head = family_parts(workload.model).evaluation_head(workload.model, decoder, self.backend.export_weights)
        results = evaluate_subsets(self.backend, pipelines, head, observe=sample)
        seconds = time.perf_counter() - started
        for subset, result in results.items():
            self.log.event(own_keys.FINAL_ACCURACY, value=result.rates(),
                           metadata={own_keys.SUBSET: subset, own_keys.EVAL_DECODER: self.decoder_name,
                                     own_keys.EVAL_BEAM_WIDTH: self.beam_width, own_keys.UTTERANCES: result.utterances})
            self.recorder.decoded(self.recorder.folder.decoded_final(subset), result.references, result.hypotheses)
        record = {"decoder": self.decoder_name, "beam_width": self.beam_width, "epoch": epoch,
                  "seconds": round(seconds, 3), "precision": workload.model.precision,
                  "subsets": subset_records(results)}
        if sample is not None and scored_subset in results:
            record["independent"] = self._score_independently(sample, results[scored_subset].hypotheses, head)
        if workload.model.precision != "fp32":
            record["fp32"] = self._in_fp32(pipelines, decoder)
        return record

    def _score_independently(self, sample: UtteranceSample, hypotheses: list[str], head: EvaluationHead) -> dict:
        """The reference re-scores the scored subset (or the workload's sample of it) from the final
        weights. The run has stopped, so a disagreement is recorded, not raised: `benchbase check`
        fails the run (rule independent_scoring)."""
        try:
            record = score_sample(sample, self.backend.export_weights(), self.config.workload.model, head,
                                  hypotheses).record()
        except PredictionMismatch as error:
            record = {"agree": False, "error": str(error)}
        self.log.event(own_keys.INDEPENDENT_SCORE, value=record,
                       metadata={own_keys.SUBSET: sample.subset, own_keys.FINAL: True})
        return record

    def _in_fp32(self, pipelines: dict[str, BatchPipeline], decoder: Decoder) -> dict:
        """The cost of the run's precision made visible: the same weights evaluated in FP32 by a
        second instance of the backend, built with the run's context at fp32 (every backend
        implements fp32), given the exported weights less the quantizer's ranges."""
        started = time.perf_counter()
        context = fp32_context(self.inputs.context)
        twin = self.backend_class()
        try:
            weights = self.backend.export_weights()
            twin.build(context)
            parts = family_parts(context.model)
            twin.import_weights({name: weights[name] for name in parts.weight_layout(context.model,
                                                                                     context.feature_dimension)})
            head = parts.evaluation_head(context.model, decoder, twin.export_weights)
            results = evaluate_subsets(twin, pipelines, head)
        except Exception as error:  # noqa: BLE001  (the timed run stands; result.json says why this is missing)
            return {"error": f"{type(error).__name__}: {str(error)[:500]}"}
        finally:
            twin.close()
        for subset, result in results.items():
            self.log.event(own_keys.FINAL_ACCURACY_FP32, value=result.rates(),
                           metadata={own_keys.SUBSET: subset, own_keys.PRECISION: "fp32",
                                     own_keys.EVAL_DECODER: self.decoder_name,
                                     own_keys.EVAL_BEAM_WIDTH: self.beam_width, own_keys.UTTERANCES: result.utterances})
            self.recorder.decoded(self.recorder.folder.decoded_final(subset, fp32=True), result.references,
                                  result.hypotheses)
        return {"seconds": round(time.perf_counter() - started, 3), "subsets": subset_records(results)}
