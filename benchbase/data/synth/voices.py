"""Synthetic speakers: eSpeak accent x variant x speaking rate x pitch, split by speaker.

Train, dev and test never share a voice (nor even an accent+variant pair), so dev and test
measure generalization to unseen speakers the way LibriSpeech's speaker-disjoint splits do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "ACCENTS",
    "FIRST_SPEAKER_ID",
    "HELD_OUT_UTTERANCE_FRACTION",
    "SPLITS",
    "UTTERANCES_PER_VOICE",
    "VARIANTS",
    "Voice",
    "cast_voices",
    "split_sizes",
    "voice_count",
]

SPLITS = ("train", "dev", "test")

# English accents present in espeakng-loader's espeak-ng-data/lang/gmw.  en-us-nyc and
# en-shaw are left out: both are marked "status testing" there.
ACCENTS = ("en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd")

# Variants from espeak-ng-data/voices/!v that stay intelligible.  m8 is left out (its tone
# filter makes it much quieter and muffled), f5 too (voicing 75 with heavy breath noise);
# whisper, croak and the novelty voices distort speech beyond what the benchmark is about.
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4")

RATE_RANGE = (130, 190)   # words per minute
PITCH_RANGE = (30, 70)    # eSpeak's 0-100 pitch scale, 50 = the variant's own
FIRST_SPEAKER_ID = 1000
UTTERANCES_PER_VOICE = 60
HELD_OUT_UTTERANCE_FRACTION = 0.06   # for each of dev and test
HELD_OUT_VOICE_FRACTION = 0.1        # for each of dev and test


@dataclass(frozen=True)
class Voice:
    speaker_id: int
    accent: str
    variant: str
    rate: int
    pitch: int

    @property
    def espeak_name(self) -> str:
        return f"{self.accent}+{self.variant}"


def split_sizes(total: int, held_out_fraction: float) -> dict[str, int]:
    """Train/dev/test shares of `total`, with at least one in every split."""
    if total < len(SPLITS):
        raise ValueError(f"need at least {len(SPLITS)} items to fill train, dev and test, got {total}")
    held_out = max(1, round(total * held_out_fraction))
    held_out = min(held_out, (total - 1) // 2)
    return {"train": total - 2 * held_out, "dev": held_out, "test": held_out}


def voice_count(utterances: int) -> int:
    """Enough voices that the model must generalize, capped by the distinct accent+variant pairs."""
    wanted = max(len(SPLITS), utterances // UTTERANCES_PER_VOICE)
    return min(wanted, len(ACCENTS) * len(VARIANTS), utterances)


def _draw_voices(count: int, rng: random.Random) -> list[Voice]:
    pairs = [(accent, variant) for accent in ACCENTS for variant in VARIANTS]
    rng.shuffle(pairs)
    return [
        Voice(
            speaker_id=FIRST_SPEAKER_ID + index,
            accent=accent,
            variant=variant,
            rate=rng.randint(*RATE_RANGE),
            pitch=rng.randint(*PITCH_RANGE),
        )
        for index, (accent, variant) in enumerate(pairs[:count])
    ]


def cast_voices(utterances: int, seed: int) -> dict[str, list[Voice]]:
    """Seeded, split-disjoint voices: train gets the lowest speaker ids, then dev, then test."""
    voices = _draw_voices(voice_count(utterances), random.Random(f"voices:{seed}"))
    sizes = split_sizes(len(voices), HELD_OUT_VOICE_FRACTION)
    cast: dict[str, list[Voice]] = {}
    start = 0
    for split in SPLITS:
        cast[split] = voices[start:start + sizes[split]]
        start += sizes[split]
    return cast
