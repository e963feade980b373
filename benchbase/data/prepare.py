"""Feature preparation: a LibriSpeech-layout tree -> a sharded feature store.

Runs once, before the run clock starts. Every shard is an independent job on a process
pool; a shard's summary (kept utterances with their manifest rows, drops, problems, feature
sums) is written beside it after the shard itself, so a preparation that is killed resumes
where it stopped and never trusts a half-written shard. store.json, written last, marks the
store complete; manifest.jsonl and report.json are written just before it.

Bad input never stops a preparation: an utterance that cannot be used is skipped, counted
by reason and listed with its file in report.json. Only a store with no usable training
utterance is an error.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import soundfile
from threadpoolctl import threadpool_limits

from benchbase.atomic import atomic_write_bytes
from benchbase.data.alphabet import UnknownCharacterError, normalize_transcript
from benchbase.data.features import extract_features
from benchbase.data.integrity import check_identity, shard_checksums
from benchbase.data.librispeech import SubsetListing, UtteranceSource, list_subset
from benchbase.data.registered import corpus_record, ids_digest
from benchbase.data.store import FORMAT_VERSION, SHARD_SIZE, STATS_FILE, STORE_FILE, Utterance, write_shard
from benchbase.data.vocabulary import (
    VOCABULARY_FILE,
    CharacterVocabulary,
    PieceVocabulary,
    Vocabulary,
    ctc_path_length,
    model_digest,
    train_pieces,
)
from benchbase.errors import InputError
from benchbase.process_guard import end_with_parent
from benchbase.specs import FeatureSpec, ModelSpec, WorkloadSpec
from benchbase.specs.vocabulary import CharactersSpec, TokensSpec

__all__ = ["MANIFEST_FILE", "REPORT_FILE", "given_vocabulary", "prepare_store", "prepare_workload_store"]

Progress = Callable[[int, int], None]
"""Called with (utterances done, utterances in all)."""
MANIFEST_FILE = "manifest.jsonl"
REPORT_FILE = "report.json"


@dataclass(frozen=True)
class ShardJob:
    path: Path
    sources: tuple[UtteranceSource, ...]
    features: FeatureSpec
    model: ModelSpec
    max_duration: float
    pieces: bytes | None = None
    """The store's sentencepiece model the labels are encoded with; None: characters."""

    def vocabulary(self) -> Vocabulary:
        return CharacterVocabulary() if self.pieces is None else PieceVocabulary(self.pieces)


@dataclass
class ShardSummary:
    kept: int = 0
    seconds: float = 0.0
    resampled: int = 0
    rows: list[dict] = field(default_factory=list)
    """Manifest rows of the kept utterances (id, speaker, seconds, frames, transcript, offset)."""
    dropped: dict[str, int] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    frames: int = 0
    feature_sum: list[float] = field(default_factory=list)
    feature_sum_squares: list[float] = field(default_factory=list)
    checksums: dict[str, str] = field(default_factory=dict)
    """SHA-256 of the shard's index and features files (empty when nothing was kept)."""


def prepare_store(
    corpus_root: Path,
    subsets: dict[str, tuple[str, ...]],
    features: FeatureSpec,
    model: ModelSpec,
    max_duration: float,
    out: Path,
    workers: int | None = None,
    progress: Progress | None = None,
    tokens: TokensSpec | None = None,
    given_pieces: bytes | None = None,
) -> dict:
    """Extract features of every subset into ``out``; returns the store description.

    ``subsets`` maps a split role ("train", "dev", "test") to LibriSpeech subset names;
    normalization statistics come from the train role only, and so does a sentencepiece
    vocabulary (``tokens``; default: characters), unless ``given_pieces`` is a sentencepiece model
    to label with instead (as ``given_vocabulary`` reads and checks one).
    """
    tokens = tokens or CharactersSpec()
    listings = {name: _listed(corpus_root, name) for name in sorted({name for names in subsets.values()
                                                                     for name in names})}
    jobs_by_subset = _plan_jobs(listings, features, model, max_duration, out)
    identity = _identity(corpus_root, subsets, jobs_by_subset, features, model, max_duration, tokens)
    if given_pieces is not None:  # a store labelled with other pieces is another store
        identity["given_vocabulary_sha256"] = model_digest(given_pieces)
    check_identity(out, identity)
    pieces = _write_vocabulary(out, jobs_by_subset, subsets.get("train", ()), tokens, given_pieces)
    if pieces is not None:
        jobs_by_subset = {name: [replace(job, pieces=pieces) for job in jobs] for name, jobs in jobs_by_subset.items()}
    all_jobs = [job for jobs in jobs_by_subset.values() for job in jobs]
    summaries = _run_jobs(all_jobs, workers, progress)
    description = _describe(corpus_root, subsets, jobs_by_subset, listings, summaries, out)
    if pieces is not None:  # a store of characters says nothing: its description reads as before pieces
        description["vocabulary"] = {**tokens.model_dump(), "symbols": tokens.symbols, "file": VOCABULARY_FILE,
                                     "sha256": model_digest(pieces)}
        if given_pieces is not None:  # the settings above are the workload's; these pieces were trained elsewhere
            description["vocabulary"]["given"] = True
    train_subsets = set(subsets.get("train", ()))
    train = [summaries[job.path] for name in train_subsets for job in jobs_by_subset[name]]
    _write_statistics(out, train, features.dimension)
    _write_manifest_and_report(out, jobs_by_subset, listings, summaries, description)
    atomic_write_bytes(out / STORE_FILE, lambda handle: handle.write(json.dumps(description, indent=2).encode()))
    return description


def prepare_workload_store(corpus_root: Path, workload: WorkloadSpec, out: Path, workers: int | None = None,
                           progress: Progress | None = None) -> dict:
    """``prepare_store`` with everything a workload pins: its train/dev/test subsets, features, model, durations."""
    data = workload.data
    return prepare_store(corpus_root, {"train": data.train, "dev": data.dev, "test": data.test}, workload.features,
                         workload.model, data.max_duration, out, workers, progress, data.tokens)


def given_vocabulary(path: Path, tokens: TokensSpec) -> bytes:
    """The sentencepiece model at ``path`` to label a store with instead of training one, once it
    serves ``tokens``: a sentencepiece model of their size (pieces and the blank at 0).

    For pieces that the training transcripts cannot make (too few of them), or one set of pieces
    shared by several preparations; the store records the model's SHA-256 like a trained one's,
    and that it was given."""
    if tokens.kind == "characters":
        raise InputError(f"--vocabulary {path}: the workload's tokens are characters; a sentencepiece model "
                         "needs tokens of kind sentencepiece")
    try:
        model = path.read_bytes()
    except OSError as error:
        raise InputError(f"--vocabulary {path}: cannot read it ({error.strerror or error})") from None
    symbols = PieceVocabulary(model, str(path)).symbols
    if symbols != tokens.symbols:
        raise InputError(f"{path}: {symbols} symbols, the workload's tokens have {tokens.symbols} "
                         f"({tokens.size} pieces and the blank)")
    return model


def _write_vocabulary(out: Path, jobs_by_subset: dict[str, list[ShardJob]], train: tuple[str, ...],
                      tokens: TokensSpec, given: bytes | None = None) -> bytes | None:
    """The store's sentencepiece vocabulary, written into it: ``given``, or trained on the training
    subsets' transcripts (in the listing's order); None for characters. Trained again when a
    preparation resumes: the same transcripts and settings give the same bytes, which the shards
    already made rely on."""
    if tokens.kind == "characters":
        return None
    if given is not None:
        pieces = given
    else:
        transcripts = [source.transcript for name in train for job in jobs_by_subset[name]
                       for source in job.sources if _spelled(source.transcript)]
        pieces = train_pieces(transcripts, tokens)
    path = out / VOCABULARY_FILE
    if path.is_file() and path.read_bytes() != pieces:
        raise InputError(f"{path}: another vocabulary than these transcripts and settings make; remove the store "
                         "or choose another --out")
    atomic_write_bytes(path, lambda handle: handle.write(pieces))
    return pieces


def _spelled(transcript: str) -> bool:
    """Whether the alphabet can spell it (the others are dropped as bad transcripts, and left out here)."""
    try:
        normalize_transcript(transcript)
    except UnknownCharacterError:
        return False
    return True


def _listed(root: Path, name: str) -> SubsetListing:
    if not (root / name).is_dir():
        raise InputError(f"{root / name}: subset folder not found")
    return list_subset(root, name)


def _plan_jobs(listings: dict[str, SubsetListing], features, model, max_duration, out) -> dict[str, list[ShardJob]]:
    jobs: dict[str, list[ShardJob]] = {}
    for name, listing in listings.items():
        sources = listing.utterances
        jobs[name] = [
            ShardJob(out / name / f"shard-{index:05d}.npz", tuple(sources[start : start + SHARD_SIZE]),
                     features, model, max_duration)
            for index, start in enumerate(range(0, len(sources), SHARD_SIZE))
        ]
    return jobs


def _run_jobs(jobs: list[ShardJob], workers: int | None, progress: Progress | None) -> dict[Path, ShardSummary]:
    summaries = {job.path: summary for job in jobs if (summary := _finished_summary(job.path)) is not None}
    pending = [job for job in jobs if job.path not in summaries]
    total = sum(len(job.sources) for job in jobs)
    done = total - sum(len(job.sources) for job in pending)
    if progress:
        progress(done, total)
    if pending:
        # spawn, not fork: the caller may already hold threads (torch, the sampler).
        context = multiprocessing.get_context("spawn")
        with context.Pool(min(workers or os.cpu_count() or 1, len(pending)), initializer=_start_worker,
                          initargs=(os.getpid(),)) as pool:
            for job, summary in zip(pending, pool.imap(_prepare_shard, pending)):
                summaries[job.path] = summary
                done += len(job.sources)
                if progress:
                    progress(done, total)
    return summaries


def _start_worker(parent_pid: int) -> None:
    """Parallelism comes from the worker processes; a BLAS thread pool as wide as the machine
    inside each of them would oversubscribe the cores (the mel projection is a matrix product).
    A worker ends with the preparation that started it, even one killed with SIGKILL."""
    end_with_parent(parent_pid)
    threadpool_limits(1)


def _finished_summary(shard: Path) -> ShardSummary | None:
    """The summary of a shard finished by an earlier preparation (its sidecar is written last),
    or None when the shard must be prepared again: no sidecar, or shard files that are missing,
    truncated or altered since (their checksums no longer match the sidecar's)."""
    sidecar = shard.with_suffix(".json")
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
        data["problems"] = [tuple(problem) for problem in data["problems"]]
        summary = ShardSummary(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if summary.kept and (not summary.checksums or not _files_match(shard, summary.checksums)):
        return None
    return summary


def _files_match(shard: Path, checksums: dict[str, str]) -> bool:
    try:
        return shard_checksums(shard) == checksums
    except OSError:
        return False


def _prepare_shard(job: ShardJob) -> ShardSummary:
    summary = ShardSummary()
    vocabulary = job.vocabulary()
    utterances = [u for source in job.sources
                  if (u := _prepare_utterance(source, job, vocabulary, summary)) is not None]
    if utterances:
        stacked = np.concatenate([u.features for u in utterances]).astype(np.float64)
        summary.frames = int(stacked.shape[0])
        summary.feature_sum = stacked.sum(axis=0).tolist()
        summary.feature_sum_squares = np.square(stacked).sum(axis=0).tolist()
        write_shard(job.path, utterances)
        summary.checksums = shard_checksums(job.path)
    summary.kept = len(utterances)
    text = json.dumps(asdict(summary)).encode()
    atomic_write_bytes(job.path.with_suffix(".json"), lambda handle: handle.write(text))
    return summary


def _prepare_utterance(source: UtteranceSource, job: ShardJob, vocabulary: Vocabulary,
                       summary: ShardSummary) -> Utterance | None:
    def drop(reason: str, detail: str | None = None) -> None:
        summary.dropped[reason] = summary.dropped.get(reason, 0) + 1
        if detail:
            summary.problems.append((str(source.audio), detail))

    try:
        labels = vocabulary.encode(source.transcript)
    except UnknownCharacterError as error:
        return drop("bad_transcript", str(error))
    if not source.audio.is_file():
        return drop("missing_audio", "audio file named in the transcript does not exist")
    try:
        audio, resampled = _read_audio(source.audio, job.features.sample_rate)
    except (RuntimeError, OSError, ValueError) as error:
        return drop("unreadable_audio", f"unreadable audio: {str(error).splitlines()[0]}")
    summary.resampled += resampled
    seconds = len(audio) / job.features.sample_rate
    if seconds > job.max_duration:
        return drop("too_long")
    features = extract_features(audio, job.features)
    if not job.model.keeps_utterance(features.shape[0], ctc_path_length(labels)):
        return drop("too_short")
    summary.seconds += seconds
    summary.rows.append({"id": source.utterance_id, "speaker": source.speaker, "seconds": round(seconds, 3),
                         "frames": int(features.shape[0]), "transcript": source.transcript.lower(),
                         "offset": len(summary.rows)})
    return Utterance(source.utterance_id, features, labels, source.transcript.lower())


def _read_audio(path: Path, sample_rate: int) -> tuple[np.ndarray, bool]:
    """Mono float32 audio at ``sample_rate``, and whether it had to be resampled."""
    audio, rate = soundfile.read(path, dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if audio.size == 0:
        raise ValueError("no samples")
    if rate == sample_rate:
        return audio, False
    import librosa  # only for the rare file at another rate

    return librosa.resample(audio, orig_sr=rate, target_sr=sample_rate), True


def _describe(root, subsets, jobs_by_subset, listings: dict[str, SubsetListing], summaries, out) -> dict:
    """Per subset: what was kept, and what was dropped by reason, the listing's drops (lines that
    are no utterance, audio no transcript names) among them, so kept + dropped = listed."""
    described = {}
    for name, jobs in jobs_by_subset.items():
        parts = [summaries[job.path] for job in jobs]
        dropped: dict[str, int] = dict(listings[name].dropped)
        for part in parts:
            for reason, count in part.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        kept = sum(part.kept for part in parts)
        listed = sum(len(job.sources) for job in jobs) + sum(listings[name].dropped.values())
        described[name] = {
            "shards": [str(job.path.relative_to(out)) for job in jobs if summaries[job.path].kept],
            "utterances": kept,
            "listed": listed,
            "ids_sha256": ids_digest([source.utterance_id for job in jobs for source in job.sources]),
            "kept_fraction": round(kept / listed, 5) if listed else 0.0,
            "seconds": round(sum(part.seconds for part in parts), 3),
            "resampled": sum(part.resampled for part in parts),
            "dropped": dropped,
            "checksums": {str(job.path.relative_to(out)): summaries[job.path].checksums
                          for job in jobs if summaries[job.path].kept},
        }
    return {"version": FORMAT_VERSION, "source": str(root), "corpus": corpus_record(Path(root)),
            "roles": {k: list(v) for k, v in subsets.items()}, "splits": described}


def _identity(root: Path, subsets, jobs_by_subset, features: FeatureSpec, model: ModelSpec,
              max_duration: float, tokens: TokensSpec) -> dict:
    """What every shard of the store depends on: the corpus (its path and a digest of its file list)
    and the settings that shape the features and labels (characters, every store before pieces,
    are not named, so those stores keep their identity)."""
    listing = [(name, str(source.audio.relative_to(root)), source.transcript)
               for name, jobs in sorted(jobs_by_subset.items()) for job in jobs for source in job.sources]
    return {"source": str(Path(root).resolve()),
            "files_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest(),
            "features": features.model_dump(), "max_duration": max_duration,
            **model.store_shaping(), "format": FORMAT_VERSION,
            "roles": {role: list(names) for role, names in sorted(subsets.items())},
            **({} if tokens.kind == "characters" else {"tokens": tokens.model_dump()})}


def _write_manifest_and_report(out: Path, jobs_by_subset, listings: dict[str, SubsetListing], summaries,
                               description: dict) -> None:
    lines = []
    problems = {}
    for name, jobs in jobs_by_subset.items():
        problems[name] = []
        for job in jobs:
            summary = summaries[job.path]
            shard = str(job.path.relative_to(out))
            lines += [json.dumps({"subset": name, **row, "shard": shard}) for row in summary.rows]
            problems[name].extend({"file": file, "reason": reason} for file, reason in summary.problems)
        problems[name].extend({"file": file, "reason": reason} for file, reason in listings[name].problems)
    manifest = ("\n".join(lines) + "\n").encode()
    atomic_write_bytes(out / MANIFEST_FILE, lambda handle: handle.write(manifest))
    report = {name: {**{k: v for k, v in split.items() if k != "shards"}, "problems": problems.get(name, [])}
              for name, split in description["splits"].items()}
    text = json.dumps(report, indent=1).encode()
    atomic_write_bytes(out / REPORT_FILE, lambda handle: handle.write(text))


def _write_statistics(out: Path, train: list[ShardSummary], dimension: int) -> None:
    frames = sum(part.frames for part in train)
    if frames == 0:
        raise InputError(f"{out}: no usable training utterance; nothing to compute normalization from")
    total = np.sum([part.feature_sum for part in train if part.frames], axis=0)
    total_squares = np.sum([part.feature_sum_squares for part in train if part.frames], axis=0)
    mean = total / frames
    std = np.sqrt(np.maximum(total_squares / frames - np.square(mean), 1e-8))
    arrays = {"mean": mean.astype(np.float32), "std": std.astype(np.float32)}
    atomic_write_bytes(out / STATS_FILE, lambda handle: np.savez(handle, **arrays))
