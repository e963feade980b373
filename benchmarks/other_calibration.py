"""How hard each condition of the synthetic "other" subsets is, measured on trained models.

    python benchmarks/other_calibration.py [--run RUN_DIR ...] [--utterances 90] [--points NAME ...]
        [--work /tmp/benchbase-other-calibration] [--workers 2]
    python benchmarks/other_calibration.py --store [--run RUN_DIR ...] [--cache /tmp/other-cache]

Grid mode (the default): for every grid point (accent set x speaking-rate range x pink-noise
SNR x reverberation), the same sentences are spoken by the same five voices (dev-clean's
accent+variant+pitch for the clean accents, dev-other's for the other accents), each voice at a
fixed quantile of the point's rate range, with the same per-utterance noise and room seeds.
Audio comes from the corpus's own planner and renderer (`plan_split`, `write_utterances`),
features from the store's own preparation (`prepare_store`), normalized with the statistics of
the store each run trained on; each run's exported final weights are scored the way `benchbase
verify` scores them (benchbase's NumPy reference, the workload's decoder, the harness's metrics).
Prints a markdown table: WER and CER per run and their ratios to the "clean" point.

Store mode (--store): builds (or reuses) each run's workload store under --cache with the
current conditions, exactly as a run would (`ensure_workload_data`), and scores each run's final
weights on its dev subsets: the numbers a run would report.

Rendered subsets and prepared stores are kept under --work, so a rerun only renders what is new.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np

from benchbase.data.prepare import prepare_store
from benchbase.data.store import FeatureStore
from benchbase.data.synth.conditions import NOISE, NORMAL_RATE_RANGE, REVERB, Acoustics, Noise, Reverb
from benchbase.data.synth.corpus import plan_split, write_utterances
from benchbase.data.synth.sentences import generate_sentences
from benchbase.data.synth.voices import Voice, cast_voices
from benchbase.data.workload_data import CORPUS_SEED, ensure_workload_data, store_key
from benchbase.decode import evaluation_decoder
from benchbase.families.agreement import ReferencePredictor
from benchbase.families.parts import family_parts
from benchbase.harness.evaluation import SubsetEvaluation, evaluate_subsets
from benchbase.harness.replay import load_run_config, replay_pipeline
from benchbase.run_folder import RunFolder
from benchbase.specs import RunConfig

RUNS = (Path("runs/rnnt-final"), Path("runs/sweep-strategies/torch-cpu2-sync-b32/seed-0"))
CORPUS_UTTERANCES = 3000   # the size of the workloads' corpus, whose dev voices the grid borrows
SENTENCE_SEED = 25         # not the corpus seed: the grid's sentences are drawn apart from the corpus's
# Each of the five voices speaks at this quantile of a point's rate range (shuffled, so that rate
# is not tied to accent or variant); the same voice keeps its quantile at every point.
RATE_QUANTILES = (0.5, 0.9, 0.1, 0.7, 0.3)


@dataclass(frozen=True)
class Point:
    accents: str                       # "clean" (dev-clean's voices) or "other" (dev-other's)
    rate: tuple[int, int]
    snr_db: float | None = None        # pink noise, NOISE's band; None: none
    rt60_s: float | None = None        # REVERB's direct-to-reverberant ratio; None: dry

    @property
    def name(self) -> str:
        snr = "none" if self.snr_db is None else f"{self.snr_db:g}"
        rt60 = "0" if self.rt60_s is None else f"{self.rt60_s:g}"
        return f"{self.accents}-r{self.rate[0]}-{self.rate[1]}-snr{snr}-rt{rt60}"

    @property
    def acoustics(self) -> Acoustics:
        noise = None if self.snr_db is None else Noise(NOISE.kind, self.snr_db, NOISE.band_hz)
        reverb = None if self.rt60_s is None else Reverb(self.rt60_s, REVERB.drr_db)
        return Acoustics(noise=noise, reverb=reverb)


NORMAL = NORMAL_RATE_RANGE
CLEAN_POINT = Point("clean", NORMAL)
# One factor at a time away from clean and from the old "other" (the last point), then the
# combinations around the candidates that the single factors pointed to.
GRID = (
    CLEAN_POINT,
    Point("clean", NORMAL, snr_db=20.0), Point("clean", NORMAL, snr_db=15.0), Point("clean", NORMAL, snr_db=10.0),
    Point("clean", NORMAL, rt60_s=0.3), Point("clean", (170, 210)), Point("clean", (200, 240)),
    Point("other", NORMAL), Point("other", (170, 210)), Point("other", (200, 240)),
    Point("other", NORMAL, snr_db=20.0), Point("other", NORMAL, snr_db=15.0), Point("other", NORMAL, rt60_s=0.3),
    Point("other", (170, 210), snr_db=20.0), Point("other", (170, 210), snr_db=15.0),
    Point("other", (170, 210), rt60_s=0.3), Point("other", (170, 210), snr_db=20.0, rt60_s=0.3),
    Point("other", NORMAL, snr_db=20.0, rt60_s=0.3),
    Point("other", (200, 240), snr_db=10.0, rt60_s=0.3),
    # Second round: noise and rooms far milder than the old ones, and rates between the candidates.
    Point("clean", NORMAL, snr_db=40.0), Point("clean", NORMAL, snr_db=30.0), Point("clean", NORMAL, rt60_s=0.15),
    Point("other", (170, 210), snr_db=40.0), Point("other", (170, 210), snr_db=30.0),
    Point("other", (170, 210), rt60_s=0.1), Point("other", (170, 210), rt60_s=0.15), Point("other", (185, 225)),
)


@dataclass(frozen=True)
class Scorer:
    """One finished run: its config (which names the store it trained on) and its exported final weights."""

    label: str
    config: RunConfig
    weights: dict[str, np.ndarray]

    @staticmethod
    def load(run_dir: Path) -> Scorer:
        config = load_run_config(run_dir)
        with np.load(RunFolder(run_dir).final_weights, allow_pickle=False) as archive:
            weights = {name: archive[name] for name in archive.files}
        return Scorer(f"{config.workload.name} ({run_dir.name})", config, weights)

    def score(self, store: FeatureStore, subsets: list[str]) -> dict[str, SubsetEvaluation]:
        """Each subset's rates, as `benchbase verify` would measure them."""
        model, evaluation = self.config.workload.model, self.config.workload.evaluation
        decoder = evaluation_decoder(evaluation, self.config.data, self.config.workload.data.train,
                                     blank=model.blank_index, beam_width=evaluation.beam_width)
        head = family_parts(model).evaluation_head(model, decoder, lambda: self.weights)
        pipelines = {subset: replay_pipeline(self.config, store, subset) for subset in subsets}
        return evaluate_subsets(ReferencePredictor(self.weights, model), pipelines, head)


# ---------------------------------------------------------------- the grid


def grid_voices(point: Point) -> list[Voice]:
    """dev-clean's or dev-other's five voices, each at its quantile of the point's rate range."""
    split = "dev-clean" if point.accents == "clean" else "dev-other"
    voices = cast_voices(CORPUS_UTTERANCES, CORPUS_SEED)[split]
    low, high = point.rate
    return [replace(voice, rate=low + round(RATE_QUANTILES[index % len(RATE_QUANTILES)] * (high - low)))
            for index, voice in enumerate(voices)]


def render_point(point: Point, sentences: list[str], root: Path, workers: int) -> None:
    """The point's utterances under root/<name>, unless a complete copy is there already."""
    done = root / point.name / "done"
    if done.is_file():
        return
    jobs = plan_split(point.name, grid_voices(point), sentences)
    # The same seeds at every point, by position: the points differ only in their conditions.
    seeds = random.Random(f"calibration:{SENTENCE_SEED}")
    jobs = [replace(job, noise_seed=seeds.randrange(2**31), acoustic_seed=seeds.randrange(2**31),
                    acoustics=point.acoustics) for job in jobs]
    if (root / point.name).exists():
        import shutil

        shutil.rmtree(root / point.name)  # a render that was killed half-way
    write_utterances(jobs, root, workers)
    done.write_text("")


def point_store(scorer: Scorer, point: Point, corpus: Path, stores: Path, workers: int) -> FeatureStore:
    """The point's features as the run's store computes them, normalized by the run's own store."""
    workload = scorer.config.workload
    out = stores / store_key(workload) / point.name
    if not FeatureStore.exists(out):
        prepare_store(corpus, {"train": (point.name,), "dev": (point.name,)}, workload.features, workload.model,
                      workload.data.max_duration, out, workers)
    store = FeatureStore(out)
    trained_on = FeatureStore(scorer.config.data)
    # The grid's own "train" statistics would normalize each point to itself; the run saw its store's.
    store.mean, store.std = trained_on.mean, trained_on.std
    return store


def run_grid(arguments: argparse.Namespace, scorers: list[Scorer]) -> None:
    points = [point for point in GRID if not arguments.points or point.name in arguments.points]
    if CLEAN_POINT not in points:
        points.insert(0, CLEAN_POINT)
    sentences = generate_sentences(arguments.utterances, SENTENCE_SEED)
    corpus, stores = arguments.work / "corpus", arguments.work / "stores"
    rates: dict[tuple[str, str], tuple[float, float]] = {}
    _header(scorers, arguments)
    for point in points:
        render_point(point, sentences, corpus, arguments.workers)
        cells = []
        for scorer in scorers:
            store = point_store(scorer, point, corpus, stores, arguments.workers)
            result = scorer.score(store, [point.name])[point.name]
            rates[scorer.label, point.name] = (result.wer, result.cer)
            clean_wer, clean_cer = rates[scorer.label, CLEAN_POINT.name]
            cells.append(f"{result.wer:.1f} | {result.cer:.1f} | {result.wer / clean_wer:.2f} | "
                         f"{result.cer / clean_cer:.2f}")
        print(f"| {_describe(point)} | " + " | ".join(cells) + " |", flush=True)


def _describe(point: Point) -> str:
    snr = "-" if point.snr_db is None else f"{point.snr_db:g} dB"
    rt60 = "-" if point.rt60_s is None else f"{point.rt60_s:g} s"
    return f"{point.accents} | {point.rate[0]}-{point.rate[1]} | {snr} | {rt60}"


def _cpu() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.machine()
    return f"{model}, {os.cpu_count()} cores"


def _header(scorers: list[Scorer], arguments: argparse.Namespace) -> None:
    print(f"{arguments.utterances} utterances per point; {_cpu()}; {date.today().isoformat()}\n")
    names = " | ".join(f"{s.label} WER | CER | WER x | CER x" for s in scorers)
    print(f"| accents | wpm | noise SNR | RT60 | {names} |")
    print("|---|---|---|---|" + "---:|---:|---:|---:|" * len(scorers))


# ---------------------------------------------------------------- the real store


def run_store(arguments: argparse.Namespace, scorers: list[Scorer]) -> None:
    """Each run scored on its workload's dev subsets of a store built now under --cache."""
    print(f"{_cpu()}; {date.today().isoformat()}\n")
    print("| run | store | subset | utterances | WER | CER |\n|---|---|---|---:|---:|---:|")
    for scorer in scorers:
        workload = scorer.config.workload
        root = ensure_workload_data(workload, None, arguments.cache)
        results = scorer.score(FeatureStore(root), list(workload.data.dev))
        for subset, result in results.items():
            print(f"| {scorer.label} | {root.name} | {subset} | {result.utterances} | {result.wer:.2f} | "
                  f"{result.cer:.2f} |", flush=True)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, action="append", help="a finished run folder (repeatable)")
    parser.add_argument("--utterances", type=int, default=90, help="utterances per grid point")
    parser.add_argument("--points", nargs="*", help="grid point names to measure (default: all)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/benchbase-other-calibration"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", action="store_true", help="score the dev subsets of a store built under --cache")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/other-cache"))
    return parser.parse_args()


def main() -> None:
    arguments = _arguments()
    scorers = [Scorer.load(run_dir) for run_dir in (arguments.run or RUNS)]
    (run_store if arguments.store else run_grid)(arguments, scorers)


if __name__ == "__main__":
    main()
