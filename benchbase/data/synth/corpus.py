"""Write a synthetic speech corpus in LibriSpeech's layout, reproducibly and atomically.

The corpus has LibriSpeech's subsets: train, dev-clean, dev-other, test-clean, test-other
(`conditions` says what sets clean and other apart).  Everything random (transcripts,
voices, which voice says what, the seeds of each utterance's breath noise, background noise
and room) is decided up front in the parent process from the seed; workers only render
audio for a fixed plan, so the output does not depend on the number of workers or on
scheduling.  The corpus is built in a sibling temporary directory and renamed into place,
so `out` is either absent or complete.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from benchbase.data.synth.acoustics import apply_acoustics
from benchbase.data.synth.conditions import CLEAN, CONDITIONS, SPLITS, Acoustics
from benchbase.data.synth.espeak import EspeakError, EspeakSynthesizer
from benchbase.data.synth.sentences import (
    CorpusError,
    cycle_lines,
    generate_sentences,
    sentences_from_file,
)
from benchbase.data.synth.voices import HELD_OUT_UTTERANCE_FRACTION, Voice, cast_voices, split_sizes
from benchbase.process_guard import end_with_parent

__all__ = [
    "CHAPTER_SIZE",
    "GENERATOR_VERSION",
    "SAMPLE_RATE",
    "CorpusSummary",
    "UtteranceJob",
    "plan_corpus",
    "plan_split",
    "render_audio",
    "synthesize_corpus",
    "write_utterances",
]

# 2: five LibriSpeech subsets (dev/test split into clean and other) instead of train/dev/test.
# 3: "other" calibrated on trained models (conditions.py): unseen accents at 185-225 wpm, no
#    noise or room.  train, dev-clean and test-clean are byte-identical to version 2's.
GENERATOR_VERSION = 3
SAMPLE_RATE = 16_000
CHAPTER_SIZE = 25
PEAK_LEVEL = 0.7          # about -3 dBFS: evens out voices without touching dynamics;
                          # applied after noise and reverberation, so the mix never clips
PAD_SECONDS = 0.1         # eSpeak starts and stops speaking at the very first/last sample
CORPUS_FILE = "corpus.json"
GENERATOR_NAME = "benchbase.data.synth"
"""corpus.json's ``generator``: what says a corpus folder is this generator's."""
VOICES_FILE = "voices.json"

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class CorpusSummary:
    root: Path
    seed: int
    utterances: dict[str, int]
    voices: dict[str, int]
    seconds: dict[str, float]


@dataclass(frozen=True)
class UtteranceJob:
    split: str
    voice: Voice
    chapter: int
    number: int
    text: str
    noise_seed: int = 0                     # eSpeak's breath/aspiration noise
    acoustics: Acoustics = CLEAN.acoustics  # what happens after eSpeak (clean: nothing)
    acoustic_seed: int = 0                  # the room and background noise, if acoustics has them

    @property
    def utterance_id(self) -> str:
        return f"{self.voice.speaker_id}-{self.chapter}-{self.number:04d}"

    @property
    def chapter_dir(self) -> Path:
        return Path(self.split, str(self.voice.speaker_id), str(self.chapter))


# ---------------------------------------------------------------- planning (parent process)


def _even_shares(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


def _plan_voice(split: str, voice: Voice, texts: Sequence[str]) -> list[UtteranceJob]:
    chapters = -(-len(texts) // CHAPTER_SIZE)
    jobs: list[UtteranceJob] = []
    for chapter, size in enumerate(_even_shares(len(texts), chapters)):
        start = len(jobs)
        jobs += [UtteranceJob(split, voice, chapter, number, texts[start + number]) for number in range(size)]
    return jobs


def plan_split(split: str, voices: Sequence[Voice], texts: Sequence[str]) -> list[UtteranceJob]:
    """`texts` shared evenly among `voices` in order, in chapters of about CHAPTER_SIZE (seeds unset)."""
    voices = voices[: len(texts)]  # never a voice without utterances
    jobs: list[UtteranceJob] = []
    for voice, share in zip(voices, _even_shares(len(texts), len(voices)), strict=True):
        jobs += _plan_voice(split, voice, texts[len(jobs): len(jobs) + share])
    return jobs


def plan_corpus(transcripts: Sequence[str], seed: int) -> list[UtteranceJob]:
    """One job per transcript, in SPLITS order, each voice in exactly one split."""
    cast = cast_voices(len(transcripts), seed)
    sizes = split_sizes(len(transcripts), HELD_OUT_UTTERANCE_FRACTION)
    jobs: list[UtteranceJob] = []
    for split in SPLITS:
        start = sum(sizes[earlier] for earlier in SPLITS[: SPLITS.index(split)])
        jobs += plan_split(split, cast[split], transcripts[start: start + sizes[split]])
    # Each utterance gets its own breath noise and its own room and background noise (used
    # where its split's acoustics have them), fixed by the corpus seed and its position.  Every
    # job draws an acoustic seed, used or not, so that one split's conditions never shift
    # another split's seeds.
    noise = random.Random(f"noise:{seed}")
    acoustic = random.Random(f"acoustics:{seed}")
    return [
        replace(job, noise_seed=noise.randrange(2**31), acoustics=CONDITIONS[job.split].acoustics,
                acoustic_seed=acoustic.randrange(2**31))
        for job in jobs
    ]


def _transcripts(utterances: int, seed: int, text_file: Path | None) -> tuple[list[str], dict]:
    if text_file is None:
        return generate_sentences(utterances, seed), {"kind": "grammar"}
    lines = sentences_from_file(text_file)
    digest = hashlib.sha256(Path(text_file).read_bytes()).hexdigest()
    return cycle_lines(lines, utterances, seed), {"kind": "file", "sha256": digest}


# ---------------------------------------------------------------- rendering (worker processes)

_synthesizer: EspeakSynthesizer | None = None


def _start_worker(parent_pid: int) -> None:
    global _synthesizer
    end_with_parent(parent_pid)  # a killed synthesis leaves no worker rendering on
    _synthesizer = EspeakSynthesizer()


def render_audio(native: np.ndarray, native_rate: int, acoustics: Acoustics = CLEAN.acoustics,
                 acoustic_seed: int = 0) -> np.ndarray:
    """eSpeak output -> padded 16 kHz speech, with `acoustics` applied, peak-normalized int16."""
    import librosa  # heavy import, only needed in workers

    audio = librosa.resample(native, orig_sr=native_rate, target_sr=SAMPLE_RATE, res_type="soxr_hq")
    pad = round(PAD_SECONDS * SAMPLE_RATE)
    audio = np.pad(audio.astype(np.float64), pad)
    # Noise and reverberation reach into the padding; the SNR is measured over the speech.
    audio = apply_acoustics(audio, acoustics, acoustic_seed, SAMPLE_RATE, speech=slice(pad, len(audio) - pad))
    audio = audio * (PEAK_LEVEL / max(float(np.max(np.abs(audio))), 1e-6))
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def _render_job(job: UtteranceJob, root: Path) -> int:
    import soundfile

    assert _synthesizer is not None, "worker not initialized"
    voice = job.voice
    native = _synthesizer.synthesize(job.text, voice.espeak_name, voice.rate, voice.pitch,
                                     noise_seed=job.noise_seed)
    if native.size == 0:
        raise EspeakError(f"eSpeak produced no audio for {job.utterance_id} {job.text!r}")
    samples = render_audio(native, _synthesizer.sample_rate, job.acoustics, job.acoustic_seed)
    path = root / job.chapter_dir / f"{job.utterance_id}.flac"
    soundfile.write(path, samples, SAMPLE_RATE, subtype="PCM_16", format="FLAC")
    return len(samples)


def _render_all(jobs: Sequence[UtteranceJob], root: Path, workers: int,
                progress: ProgressCallback | None) -> list[int]:
    # "spawn": each worker loads eSpeak itself (see espeak.py for why it must be alone).
    # An executor rather than multiprocessing.Pool: a worker that dies breaks the executor
    # with an error, where Pool would silently respawn it forever.
    context = multiprocessing.get_context("spawn")
    lengths: list[int] = []
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(),))
    try:
        for length in pool.map(partial(_render_job, root=root), jobs, chunksize=8):
            lengths.append(length)
            if progress is not None:
                progress(len(lengths), len(jobs))
    finally:
        # On failure, drop the queued work instead of rendering the rest of the corpus.
        pool.shutdown(wait=True, cancel_futures=True)
    return lengths


# ---------------------------------------------------------------- metadata files


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", newline="\n")


def _write_json(path: Path, payload: dict) -> None:
    _write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _write_transcripts(jobs: Sequence[UtteranceJob], root: Path) -> None:
    chapters: dict[Path, list[str]] = {}
    for job in jobs:
        chapters.setdefault(job.chapter_dir, []).append(f"{job.utterance_id} {job.text.upper()}\n")
    for chapter_dir, lines in chapters.items():
        speaker, chapter = chapter_dir.parts[1:]
        _write_text(root / chapter_dir / f"{speaker}-{chapter}.trans.txt", "".join(sorted(lines)))


def _voices_record(jobs: Sequence[UtteranceJob]) -> dict[str, dict]:
    record = {}
    for job in jobs:
        noise, reverb = job.acoustics.noise, job.acoustics.reverb
        record[str(job.voice.speaker_id)] = {
            "accent": job.voice.accent, "variant": job.voice.variant,
            "rate": job.voice.rate, "pitch": job.voice.pitch, "split": job.split,
            "condition": CONDITIONS[job.split].kind,
            "noise_snr_db": None if noise is None else noise.snr_db,
            "reverb_rt60_s": None if reverb is None else reverb.rt60_s,
        }
    return record


def _summarize(jobs: Sequence[UtteranceJob], lengths: Sequence[int]) -> dict[str, dict]:
    summary: dict[str, dict] = {"utterances": {}, "voices": {}, "seconds": {}}
    for split in SPLITS:
        chosen = [(job, length) for job, length in zip(jobs, lengths, strict=True) if job.split == split]
        summary["utterances"][split] = len(chosen)
        summary["voices"][split] = len({job.voice.speaker_id for job, _ in chosen})
        summary["seconds"][split] = round(sum(length for _, length in chosen) / SAMPLE_RATE, 3)
    return summary


def _summary_from_record(root: Path, record: dict) -> CorpusSummary:
    summary = record["summary"]
    return CorpusSummary(
        root=root, seed=record["parameters"]["seed"], utterances=dict(summary["utterances"]),
        voices=dict(summary["voices"]), seconds=dict(summary["seconds"]),
    )


# ---------------------------------------------------------------- atomic publication


def _existing_summary(out: Path, parameters: dict) -> CorpusSummary | None:
    """The summary of an identical corpus already at `out`; None if `out` is free to use."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    try:
        record = json.loads((out / CORPUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("parameters") != parameters:
        raise CorpusError(
            f"{out}: already exists and is not a corpus generated with these parameters "
            f"(seed={parameters['seed']}, utterances={parameters['utterances']}); "
            "remove it or choose another directory"
        )
    return _summary_from_record(out, record)


def _publish(partial_root: Path, out: Path, parameters: dict) -> CorpusSummary | None:
    """Rename the finished corpus into place; an identical corpus that won a race is kept."""
    try:
        os.rename(partial_root, out)  # replaces `out` only if it is an empty directory
    except OSError:
        existing = _existing_summary(out, parameters)
        if existing is None:
            raise
        return existing
    return None


def write_utterances(jobs: Sequence[UtteranceJob], root: Path, workers: int,
                     progress: ProgressCallback | None = None) -> list[int]:
    """Render `jobs` into `root` in LibriSpeech's layout (audio and transcripts); samples per job.

    Public so that benchmarks/other_calibration.py renders its grid exactly as the corpus does.
    """
    for chapter_dir in sorted({job.chapter_dir for job in jobs}):
        (root / chapter_dir).mkdir(parents=True)
    lengths = _render_all(jobs, root, workers, progress)
    _write_transcripts(jobs, root)
    return lengths


def _build(partial_root: Path, jobs: Sequence[UtteranceJob], parameters: dict, source_name: str,
           workers: int, progress: ProgressCallback | None) -> dict:
    lengths = write_utterances(jobs, partial_root, workers, progress)
    _write_json(partial_root / VOICES_FILE, _voices_record(jobs))
    record = {
        "generator": GENERATOR_NAME, "parameters": parameters, "text_source": source_name,
        "sample_rate": SAMPLE_RATE, "summary": _summarize(jobs, lengths),
        "conditions": {split: CONDITIONS[split].record() for split in SPLITS},
    }
    # Written last: its presence is what marks a corpus directory as complete.
    _write_json(partial_root / CORPUS_FILE, record)
    return record


def _remove_abandoned_partials(out: Path) -> None:
    """Delete half-built corpora whose synthesis was killed (SIGKILL leaves no cleanup behind):
    their folder names the pid, and a pid that no longer runs will never finish them."""
    for abandoned in out.parent.glob(f".{out.name}.partial-*"):
        pid = abandoned.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(abandoned, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def _check_arguments(utterances: int, workers: int | None) -> int:
    if utterances < len(SPLITS):
        raise CorpusError(f"utterances must be at least {len(SPLITS)} (one per split), got {utterances}")
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise CorpusError(f"workers must be at least 1, got {workers}")
    return workers


def synthesize_corpus(out: Path, utterances: int = 3000, seed: int = 0,
                      text_file: Path | None = None, workers: int | None = None,
                      progress: ProgressCallback | None = None) -> CorpusSummary:
    """Generate (or reuse) the corpus at `out`; same arguments -> byte-identical files.

    Workers are started with multiprocessing's "spawn" method, so a script that calls this
    must keep its top-level code under `if __name__ == "__main__":`.
    """
    out = Path(out)
    workers = _check_arguments(utterances, workers)
    transcripts, source = _transcripts(utterances, seed, text_file)
    parameters = {"seed": seed, "utterances": utterances, "text": source,
                  "generator_version": GENERATOR_VERSION}
    existing = _existing_summary(out, parameters)
    if existing is not None:
        return existing
    out.parent.mkdir(parents=True, exist_ok=True)
    partial_root = out.parent / f".{out.name}.partial-{os.getpid()}"
    _remove_abandoned_partials(out)
    shutil.rmtree(partial_root, ignore_errors=True)  # left over by a crashed run with our pid
    try:
        jobs = plan_corpus(transcripts, seed)
        source_name = "grammar" if text_file is None else Path(text_file).name
        record = _build(partial_root, jobs, parameters, source_name, workers, progress)
        return _publish(partial_root, out, parameters) or _summary_from_record(out, record)
    finally:
        shutil.rmtree(partial_root, ignore_errors=True)
