"""Reading the LibriSpeech layout: SUBSET/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac plus
SPEAKER-CHAPTER.trans.txt. The synthetic corpus is written in the same layout, so this one
reader serves both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["UtteranceSource", "list_subset"]


@dataclass(frozen=True)
class UtteranceSource:
    utterance_id: str
    speaker: str
    audio: Path
    transcript: str


def list_subset(root: Path, subset: str) -> tuple[list[UtteranceSource], list[tuple[str, str]]]:
    """Utterances of ROOT/SUBSET in id order, and (file, reason) for transcript lines skipped."""
    subset_dir = root / subset
    utterances: list[UtteranceSource] = []
    problems: list[tuple[str, str]] = []
    for transcript_file in sorted(subset_dir.glob("*/*/*.trans.txt")):
        _read_transcripts(transcript_file, utterances, problems)
    utterances.sort(key=lambda utterance: utterance.utterance_id)
    # Every audio file is accounted for: one that no transcript names is reported, not silently ignored.
    named = {utterance.audio for utterance in utterances}
    problems += [(str(audio), "audio file not named in any transcript")
                 for audio in sorted(subset_dir.glob("*/*/*.flac")) if audio not in named]
    return utterances, problems


def _read_transcripts(path: Path, into: list[UtteranceSource], problems: list[tuple[str, str]]) -> None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        problems.append((str(path), f"unreadable transcript file: {error}"))
        return
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        utterance_id, _, text = line.strip().partition(" ")
        if not text.strip():
            problems.append((f"{path}:{number}", f"no transcript for {utterance_id!r}"))
            continue
        speaker = utterance_id.split("-", 1)[0]
        into.append(UtteranceSource(utterance_id, speaker, path.parent / f"{utterance_id}.flac", text.strip()))
