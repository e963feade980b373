"""Reading the LibriSpeech layout: SUBSET/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac plus
SPEAKER-CHAPTER.trans.txt. The synthetic corpus is written in the same layout, so this one
reader serves both.

A transcript file is read line by line: one line that is not UTF-8 costs its own utterance,
not the chapter's hundred others. Whatever the listing cannot use is counted by reason, so
that a preparation's summary accounts for every line and every audio file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SubsetListing", "UtteranceSource", "list_subset"]


@dataclass(frozen=True)
class UtteranceSource:
    utterance_id: str
    speaker: str
    audio: Path
    transcript: str


@dataclass
class SubsetListing:
    """What a subset's transcripts and audio files offer: the usable utterances in id order, and
    what could not be used, counted by reason (``dropped``) and listed with its file (``problems``)."""

    utterances: list[UtteranceSource] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def drop(self, reason: str, file: str, detail: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self.problems.append((file, detail))


def list_subset(root: Path, subset: str) -> SubsetListing:
    """The utterances of ROOT/SUBSET, and every transcript line or audio file skipped, with why."""
    subset_dir = root / subset
    listing = SubsetListing()
    named: set[Path] = set()
    for transcript_file in sorted(subset_dir.glob("*/*/*.trans.txt")):
        _read_transcripts(transcript_file, listing, named)
    listing.utterances.sort(key=lambda utterance: utterance.utterance_id)
    # Every audio file is accounted for: one that no transcript names is reported, not silently ignored.
    for audio in sorted(subset_dir.glob("*/*/*.flac")):
        if audio not in named:
            listing.drop("untranscribed_audio", str(audio), "audio file not named in any transcript")
    return listing


def _read_transcripts(path: Path, listing: SubsetListing, named: set[Path]) -> None:
    try:
        lines = path.read_bytes().splitlines()
    except OSError as error:
        listing.problems.append((str(path), f"unreadable transcript file: {error.strerror or error}"))
        return  # its audio files are then counted as named by no transcript
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        # The id is ASCII in any encoding: it still names the audio, which is then accounted for here.
        utterance_id = raw.strip().split(b" ", 1)[0].decode("ascii", errors="replace")
        audio = path.parent / f"{utterance_id}.flac"
        named.add(audio)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            listing.drop("undecodable_transcript", where,
                         f"transcript of {utterance_id!r} is not UTF-8 (byte {raw[error.start]:#04x} at "
                         f"column {error.start + 1})")
            continue
        _, _, text = line.strip().partition(" ")
        if not text.strip():
            listing.drop("empty_transcript", where, f"no transcript for {utterance_id!r}")
            continue
        speaker = utterance_id.split("-", 1)[0]
        listing.utterances.append(UtteranceSource(utterance_id, speaker, audio, text.strip()))
