"""Conformance rules about training: checkpoints, what predict may see, seeding, threads.

Why each rule exists:

- checkpoint_round_trip: a run resumed from a checkpoint must continue exactly as if it had
  never stopped, so the checkpoint holds the weights, BatchNorm's statistics, the
  optimizer's state and the dropout random state (the rule trains with the spec's dropout),
  in exactly the file the harness names (it writes a temporary name and renames it);
  a file that does not fit is refused.
- predict_sees_only_features: accuracy is measured on what predict() returns from features
  alone; a backend that remembered the labels of batches it trained on, or read labels when
  handed a whole Batch, could score what it has not learned.
- prediction_matches_weights: a backend is arbitrary code in the process, and predict() could
  return log-probabilities made up from anything it finds (transcripts read from the feature
  store on disk, one symbol boosted), which no rule on fresh or imported weights would see.
  Its exported weights are a claim the reference can check: after a few training steps (the
  weights and BatchNorm's running statistics have moved), what predict() returns must be what
  the reference computes from ``export_weights()``, utterance by utterance within the error
  model's bound (``benchbase.families.agreement``). A run's harness asks the same at every
  evaluation (independent scoring); this rule shows a backend author the disagreement before
  a run is aborted for it.
- seed_determinism: seeded runs are the basis of the olympic score's spread; the same seed
  must give the same initial weights and the same losses, dropout included, and another
  seed another model.
- thread_budget: time-to-accuracy on a CPU compares frameworks on the cores the profile
  grants; a backend that computes on more threads than ``DevicePlan.threads`` buys its
  speed with cores the others were denied.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchbase.backend import Backend, BatchShape, Inputs
from benchbase.errors import BenchbaseError
from benchbase.families.agreement import Agreement, UtteranceOutputs, compare_with_reference
from benchbase.families.layout import differing_weights
from benchbase.kit.core import ConformanceFailure, Kit, describe_difference, describe_error
from benchbase.kit.model_rules import check_layout
from benchbase.kit.outputs import check_outputs, valid_frames
from benchbase.numerics.tolerances import same_kernels
from benchbase.run_folder import RunFolder

__all__ = [
    "THREAD_RATIO_BOUND",
    "check_checkpoint_round_trip",
    "check_predict_sees_only_features",
    "check_prediction_matches_weights",
    "check_seed_determinism",
    "check_thread_budget",
    "check_warm_up",
]

THREAD_RATIO_BOUND = 1.25
"""CPU seconds per wall second during train_step with a budget of one thread: one busy thread
is 1.0; the margin covers the interpreter's and the framework's housekeeping threads."""
TIMED_STEPS = 8
TRAINED_STEPS = 3
"""Steps prediction_matches_weights trains before it compares: every weight and running
statistic has moved from its initial value, so a predict() that kept an old copy of the model,
or one that never used the model, shows."""


def check_checkpoint_round_trip(kit: Kit) -> str | None:
    """Save after 2 steps, load into a backend built with another seed: same predictions, same next
    losses (the optimizer's schedule included); a file of garbage is refused."""

    def outputs(result: object, inputs: Inputs) -> np.ndarray:
        return check_outputs("checkpoint_round_trip", result, inputs, kit)

    spec, batches, probe = kit.data.spec_model, kit.data.batches, kit.data.small_inputs
    following = (batches[2], batches[0])
    with tempfile.TemporaryDirectory(prefix="benchbase-kit-") as folder:
        final = RunFolder.create(Path(folder) / "run").periodic_checkpoint(2)
        with kit.backend(model=spec) as original:
            for batch in batches[:2]:
                original.train_step(batch)
            save_as_the_harness_does(original, final)
            expected = outputs(original.predict(probe), probe)
            expected_losses = [original.train_step(batch) for batch in following]
        with kit.backend(seed=kit.seed + 1, model=spec) as restored:
            restored.load_checkpoint(final)
            found = outputs(restored.predict(probe), probe)
            losses = [restored.train_step(batch) for batch in following]
        compare_restored(found, expected, probe, losses, expected_losses)
        return expect_unfitting_file_refused(kit, Path(folder))


def check_predict_sees_only_features(kit: Kit) -> None:
    """After training on a batch, predict() equals a fresh backend's on the exported weights."""
    batch, rule = kit.data.batches[0], "predict_sees_only_features"
    with kit.backend() as trained:
        trained.train_step(batch)
        weights = trained.export_weights()
        from_inputs = check_outputs(rule, trained.predict(batch.inputs()), batch.inputs(), kit)
        from_batch = check_outputs(rule, trained.predict(batch), batch, kit)
    with kit.backend() as fresh:
        fresh.import_weights(weights)
        from_weights = check_outputs(rule, fresh.predict(batch.inputs()), batch.inputs(), kit)
    mask = valid_frames(batch, from_inputs.shape[1])
    _expect_close(from_inputs, from_weights, mask, "the backend that trained on the batch predicts it differently "
                  "from a fresh backend holding the same exported weights")
    _expect_close(from_batch, from_inputs, mask, "predict() of the training Batch differs from predict() of its "
                  "Inputs (labels must not reach predict)")


def check_prediction_matches_weights(kit: Kit) -> str:
    """After TRAINED_STEPS steps, predict() agrees with the family's reference on the backend's own
    export_weights(), utterance by utterance (``benchbase.families.agreement``); the note says how
    close the closest utterance came to its tolerance."""
    rule = "prediction_matches_weights"
    probes = {"the full batch": kit.data.impossible_batch.inputs(), "the small batch": kit.data.small_inputs}
    with kit.backend(model=kit.data.spec_model) as backend:  # trained as a run trains, dropout included
        for step in range(TRAINED_STEPS):
            backend.train_step(kit.data.batches[step % len(kit.data.batches)])
        predicted = {label: check_outputs(rule, backend.predict(inputs), inputs, kit)
                     for label, inputs in probes.items()}
        weights = backend.export_weights()  # after predicting: the weights those predictions claim to come from
    check_layout(rule, weights, kit.parts.weight_layout(kit.model, kit.data.feature_dimension))
    utterances = [utterance for label, inputs in probes.items()
                  for utterance in _utterance_outputs(label, inputs, predicted[label])]
    agreement = compare_with_reference(weights, kit.model, utterances)  # inference has no dropout
    if agreement.disagreeing:
        raise ConformanceFailure(rule, _describe_disagreement(agreement, kit.parts.outputs_name))
    return f"closest utterance at {agreement.worst_ratio:.2g} of its tolerance"


def check_seed_determinism(kit: Kit) -> None:
    """The same seed twice: identical weights and first 3 losses; another seed: other weights."""
    first_weights, first_losses = _weights_and_losses(kit, kit.seed)
    second_weights, second_losses = _weights_and_losses(kit, kit.seed)
    changed = differing_weights(first_weights, second_weights)
    if changed:
        raise ConformanceFailure("seed_determinism", f"two builds with seed {kit.seed} export different "
                                 f"{', '.join(changed[:6])}")
    if not all(abs(a - b) <= same_kernels(b) for a, b in zip(first_losses, second_losses)):
        raise ConformanceFailure("seed_determinism", f"two builds with seed {kit.seed} (dropout "
                                 f"{kit.data.spec_model.dropout}) trained to losses {_losses(first_losses)} and "
                                 f"{_losses(second_losses)}; expected equal (the same kernels run twice; "
                                 f"bound {same_kernels(max(second_losses)):.3g})")
    with kit.backend(seed=kit.seed + 1, model=kit.data.spec_model) as other:
        if not differing_weights(first_weights, other.export_weights()):
            raise ConformanceFailure("seed_determinism", f"seeds {kit.seed} and {kit.seed + 1} build identical "
                                     "weights; the seed must decide the initialization")


def check_warm_up(kit: Kit) -> str | None:
    """warm_up() (compiling before run_start, where a workload allows it) leaves the model as build()
    made it: the same exported weights, and the same losses on the kit's batches as a build that
    never warmed up (the same kernels run)."""
    if kit.backend_class.warm_up is Backend.warm_up:
        return "no warm_up(): a compiling backend compiles on the clock under every rule"
    first = kit.data.batches[0]  # one shape: the rule is about the state warm_up() leaves, not coverage
    shapes = [BatchShape(first.size, first.features.shape[1], first.labels.shape[1])]
    with kit.backend(model=kit.data.spec_model) as backend:
        built = {name: np.array(value, copy=True) for name, value in backend.export_weights().items()}  # not views
        backend.warm_up(shapes)
        changed = differing_weights(built, backend.export_weights())
        if changed:
            raise ConformanceFailure("warm_up", f"warm_up() changed {', '.join(changed[:6])}; it must compile on "
                                     "synthetic inputs and leave the model as build() made it")
        warmed = [backend.train_step(batch) for batch in kit.data.batches]
    _, cold = _weights_and_losses(kit, kit.seed)
    if not all(abs(a - b) <= same_kernels(b) for a, b in zip(warmed, cold)):
        raise ConformanceFailure("warm_up", f"after warm_up() the kit's batches trained to losses {_losses(warmed)}, "
                                 f"without it to {_losses(cold)}; expected equal (its optimizer or random state "
                                 "must be left as build() made it)")
    return None


def check_thread_budget(kit: Kit) -> str:
    """With a budget of one thread, train_step keeps the process at about one core (timed over
    TIMED_STEPS steps after one warm-up step per batch shape). A thread budget is a CPU device's: on a
    GPU the rule does not apply, and says so."""
    if kit.device != "cpu":
        return f"not applicable on {kit.device}: a thread budget bounds CPU devices"
    batches = kit.data.batches
    with kit.backend(model=kit.data.spec_model) as backend:
        for batch in batches:  # every shape once: a compiling backend compiles before the clock
            backend.train_step(batch)
        wall, cpu = time.perf_counter(), time.process_time()
        for step in range(TIMED_STEPS):
            backend.train_step(batches[step % len(batches)])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    ratio = cpu / wall
    if ratio > THREAD_RATIO_BOUND:
        raise ConformanceFailure("thread_budget", f"{TIMED_STEPS} train steps with DevicePlan.threads=1 used "
                                 f"{cpu:.2f} CPU seconds in {wall:.2f} s: {ratio:.2f} threads busy on average, "
                                 f"over the bound of {THREAD_RATIO_BOUND}")
    return f"{ratio:.2f} CPU s per wall s{_busy_machine_note()}"


def _busy_machine_note() -> str:
    """Other processes competing for the cores lower the ratio: a pass then proves less."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load <= cores - 1 + THREAD_RATIO_BOUND:
        return ""
    return f" (the machine was busy, load {load:.1f} on {cores} cores: extra threads may not have shown)"


def save_as_the_harness_does(backend, final: Path) -> None:
    """save_checkpoint to a temporary name beside the final one, then rename (the harness's way)."""
    temporary = final.with_name(f".{final.name}.tmp")
    backend.save_checkpoint(temporary)
    written = sorted(path.name for path in final.parent.iterdir())
    if written != [temporary.name]:
        raise ConformanceFailure("checkpoint_round_trip", f"save_checkpoint({temporary.name}) wrote {written}; "
                                 "expected exactly that path (the harness renames it and keeps nothing else)")
    temporary.replace(final)


def compare_restored(found, expected, probe, losses, expected_losses) -> None:
    mask = valid_frames(probe, expected.shape[1])
    worst, where = describe_difference(found[:, : expected.shape[1]], expected, mask)
    allowed = same_kernels(np.where(mask, expected, 0.0))
    if not worst <= allowed:
        raise ConformanceFailure("checkpoint_round_trip", f"predictions after load_checkpoint differ from the saved "
                                 f"backend's by {worst:.3g} (the same kernels: bound {allowed:.3g}) {where}: weights "
                                 "or BatchNorm statistics not restored")
    for step, (loss, wanted) in enumerate(zip(losses, expected_losses)):
        if not abs(loss - wanted) <= same_kernels(wanted):
            cause = ("the weights or the dropout random state" if step == 0
                     else "the optimizer's state or the dropout random state")
            raise ConformanceFailure("checkpoint_round_trip", f"training on after load_checkpoint gave losses "
                                     f"{_losses(losses)}, the saved backend {_losses(expected_losses)}: step "
                                     f"{step + 1} differs, so {cause} was not restored")


def expect_unfitting_file_refused(kit: Kit, folder: Path) -> str | None:
    """load_checkpoint of a file that is no checkpoint raises, ideally a BenchbaseError naming it."""
    garbage = folder / "not-a-checkpoint.ckpt"
    garbage.write_bytes(b"benchbase conformance kit: this is not a checkpoint\n" * 8)
    try:
        with kit.backend(model=kit.data.spec_model) as backend:
            backend.load_checkpoint(garbage)
    except BenchbaseError as error:
        return None if garbage.name in str(error) else f"the BenchbaseError for a bad file does not name it: {error}"
    except Exception as error:  # noqa: BLE001  (refused, though not as the contract asks)
        return (f"a bad checkpoint file raised {describe_error(error, method=False)}, "
                "not a BenchbaseError naming the path")
    raise ConformanceFailure("checkpoint_round_trip", "load_checkpoint() accepted a file that is no checkpoint; "
                             "expected a BenchbaseError naming the path")


def _expect_close(found: np.ndarray, expected: np.ndarray, mask: np.ndarray, what: str) -> None:
    if found.shape != expected.shape:
        raise ConformanceFailure("predict_sees_only_features", f"{what}: shapes {found.shape} and {expected.shape}")
    worst, where = describe_difference(found, expected, mask)
    if not worst <= same_kernels(np.where(mask, expected, 0.0)):
        raise ConformanceFailure("predict_sees_only_features", f"{what}, by up to {worst:.3g} {where}")


def _utterance_outputs(label: str, inputs: Inputs, log_probs: np.ndarray) -> list[UtteranceOutputs]:
    """Each row of a prediction without its padding: its feature frames and its valid output frames."""
    return [UtteranceOutputs.of_row(f"{label}, row {row}", inputs, log_probs, row) for row in range(inputs.size)]


def _describe_disagreement(agreement: Agreement, what: str) -> str:
    worst = int(np.argmax(agreement.differences / np.maximum(agreement.tolerances, np.finfo(np.float64).tiny)))
    return (f"after {TRAINED_STEPS} training steps, predict() is not what the backend's own export_weights() "
            f"predict: {len(agreement.disagreeing)} of {len(agreement.utterance_ids)} utterances differ from the "
            f"reference, worst by {agreement.differences[worst]:.3g} ({agreement.utterance_ids[worst]}; tolerance "
            f"{agreement.tolerances[worst]:.3g}, {agreement.worst_ratio:.3g} times over); predict() must compute "
            f"the {what} from the weights it exports")


def _weights_and_losses(kit: Kit, seed: int) -> tuple[dict[str, np.ndarray], list[float]]:
    with kit.backend(seed=seed, model=kit.data.spec_model) as backend:
        weights = backend.export_weights()
        return weights, [backend.train_step(batch) for batch in kit.data.batches]


def _losses(losses: list[float]) -> str:
    return "[" + ", ".join(f"{loss:.7g}" for loss in losses) + "]"
