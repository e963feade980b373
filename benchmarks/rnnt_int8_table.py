"""What int8 costs a transducer, and what training aware of it wins back.

    python benchmarks/rnnt_int8_table.py --fp32 RUN_DIR --qat RUN_DIR [--qat RUN_DIR ...] \
        [--subsets dev-clean dev-other] [--calibration-batches 16]

Finished rnnt runs of the same workload and seed: one trained in fp32, and one or more trained
int8-emulated (quantization-aware), each at its own ``model.quantization.bits`` (8, or fewer
with ``--set workload.model.quantization.bits=4``). Every row is scored the way `benchbase verify`
scores a run, with no backend code: benchbase's NumPy reference of the family on the exported
weights, the harness's greedy search and metrics, on the workload's dev subsets:

- fp32-trained, evaluated in fp32: the baseline.
- fp32-trained, quantized after training (PTQ) at each QAT run's bits: the same weights
  evaluated int8-emulated, the activation ranges calibrated as a training pass would set them
  (the moving average of max|x| over ``--calibration-batches`` training batches, the spec's
  momentum, weights untouched).
- each quantization-aware run (QAT), evaluated as it trained: as its run scored it.
- each quantization-aware run evaluated in fp32 (its ranges dropped): what the fake
  quantization changed.

Prints a markdown table (WER and CER per subset).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchbase.data.store import FeatureStore
from benchbase.decode import evaluation_decoder
from benchbase.families.agreement import ReferencePredictor
from benchbase.families.parts import family_parts
from benchbase.families.rnnt.quantization import Quantizer, input_range_names
from benchbase.families.rnnt.reference import encoder_forward, joint, prediction_forward
from benchbase.harness.evaluation import evaluate_subsets
from benchbase.harness.replay import load_run_config, replay_pipeline
from benchbase.run_folder import RunFolder


def main() -> None:
    arguments = _arguments()
    fp32_config = load_run_config(arguments.fp32)
    store = FeatureStore(fp32_config.data)
    subsets = arguments.subsets or [fp32_config.workload.scored_subset]
    fp32_model, fp32_weights = fp32_config.workload.model, _weights(arguments.fp32)
    rows = [(f"fp32-trained ({_epochs(arguments.fp32)} epochs)", "fp32", fp32_weights, fp32_model)]
    for run_dir in arguments.qat:
        model, weights = load_run_config(run_dir).workload.model, _weights(run_dir)
        bits = model.quantization.bits
        ptq_model = _quantized(fp32_model, model.quantization)
        calibrated = _calibrated_ranges(fp32_weights, ptq_model, fp32_config, store, arguments.calibration_batches)
        rows += [
            (f"fp32-trained ({_epochs(arguments.fp32)} epochs)", f"{bits}-bit, quantized after training",
             fp32_weights | calibrated, ptq_model),
            (f"{bits}-bit quantization-aware ({_epochs(run_dir)} epochs)", f"{bits}-bit", weights, model),
            (f"{bits}-bit quantization-aware ({_epochs(run_dir)} epochs)", "fp32 (ranges dropped)",
             {name: value for name, value in weights.items() if not name.endswith("input_range")}, fp32_model),
        ]
    header = " | ".join(f"{subset} WER | {subset} CER" for subset in subsets)
    print(f"| weights | evaluated as | {header} |\n|---|---|" + "---:|---:|" * len(subsets))
    for trained, evaluated_as, weights, model in rows:
        scores = _scores(weights, model, fp32_config, store, subsets)
        cells = " | ".join(f"{scores[subset].wer:.2f} | {scores[subset].cer:.2f}" for subset in subsets)
        print(f"| {trained} | {evaluated_as} | {cells} |", flush=True)


def _quantized(model, quantization):
    """``model`` int8-emulated with ``quantization``'s scheme (its bits)."""
    return type(model).model_validate(model.model_dump() | {"precision": "int8-emulated",
                                                            "quantization": quantization.model_dump()})


def _scores(weights, model, config, store, subsets):
    evaluation = config.workload.evaluation
    decoder = evaluation_decoder(evaluation, config.data, config.workload.data.train,
                                 blank=model.blank_index, beam_width=evaluation.beam_width)
    head = family_parts(model).evaluation_head(model, decoder, lambda: weights)
    pipelines = {subset: replay_pipeline(config, store, subset) for subset in subsets}
    return evaluate_subsets(ReferencePredictor(weights, model), pipelines, head)


def _calibrated_ranges(weights, model, config, store, batches: int) -> dict[str, np.ndarray]:
    """The ranges a training pass of the int8 model over ``batches`` training batches leaves,
    from zero (no weight changes): post-training calibration by the spec's own moving average."""
    quantizer = Quantizer(weights | {name: np.zeros((), np.float32) for name in input_range_names(model)},
                          model, training=True)
    for count, batch in enumerate(replay_pipeline(config, store, config.workload.data.train[0]).epoch(0)):
        if count == batches:
            break
        encoded, _ = encoder_forward(weights, model, batch.features, batch.feature_lengths, quantizer)
        frames = int(batch.output_lengths.max(initial=0))
        predicted = prediction_forward(weights, model, batch.labels, batch.label_lengths, quantizer)
        joint(weights, model, encoded[:, :frames], predicted, quantizer, (batch.output_lengths, batch.label_lengths))
    return {name: np.asarray(value, dtype=np.float32) for name, value in quantizer.ranges.items()}


def _weights(run_dir: Path) -> dict[str, np.ndarray]:
    with np.load(RunFolder(run_dir).final_weights, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _epochs(run_dir: Path) -> str:
    return str(json.loads((run_dir / "result.json").read_text()).get("epochs", "?"))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp32", type=Path, required=True, help="a finished fp32 rnnt run folder")
    parser.add_argument("--qat", type=Path, action="append", required=True,
                        help="a finished int8-emulated run of the same workload (repeatable)")
    parser.add_argument("--subsets", nargs="*", help="dev subsets (default: the workload's scored subset)")
    parser.add_argument("--calibration-batches", type=int, default=16)
    return parser.parse_args()


if __name__ == "__main__":
    main()
