"""Synthetic speakers: eSpeak accent x variant x speaking rate x pitch, split by speaker.

No two splits share a voice, nor even an accent+variant pair, so every held-out subset
measures generalization to unseen speakers the way LibriSpeech's speaker-disjoint subsets
do.  train, dev-clean and test-clean draw their pairs from the clean accents at normal
rates; dev-other and test-other draw theirs from accents reserved for them, at faster rates
(see `conditions` for which and why).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchbase.data.synth.conditions import ACCENTS, CONDITIONS, PITCH_RANGE, SPLITS

__all__ = [
    "ACCENTS",
    "FIRST_SPEAKER_ID",
    "HELD_OUT_UTTERANCE_FRACTION",
    "HELD_OUT_VOICE_FRACTION",
    "SPLITS",
    "UTTERANCES_PER_VOICE",
    "VARIANTS",
    "Voice",
    "cast_voices",
    "split_sizes",
    "voice_counts",
]

# Variants from espeak-ng-data/voices/!v that stay intelligible.  m8 is left out (its tone
# filter makes it much quieter and muffled), f5 too (voicing 75 with heavy breath noise);
# whisper, croak and the novelty voices distort speech beyond what the benchmark is about.
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4")

FIRST_SPEAKER_ID = 1000
# One training voice per this many training utterances: enough voices that the model must
# generalize over speakers, enough utterances per voice that each is more than a cameo.
UTTERANCES_PER_VOICE = 60
HELD_OUT_UTTERANCE_FRACTION = 0.06   # for each of dev-clean, dev-other, test-clean, test-other
# Each held-out subset gets this fraction of utterances / UTTERANCES_PER_VOICE voices: five
# for 3000 utterances, few enough that most voices train, enough that no one voice decides
# a subset's error rate.
HELD_OUT_VOICE_FRACTION = 0.1

_HELD_OUT = SPLITS[1:]


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
    """Each held-out subset's share of `total` (the same for all four), train the rest; none empty."""
    if total < len(SPLITS):
        raise ValueError(f"need at least {len(SPLITS)} items to fill {', '.join(SPLITS)}, got {total}")
    held_out = max(1, round(total * held_out_fraction))
    held_out = min(held_out, (total - 1) // len(_HELD_OUT))
    return {split: total - len(_HELD_OUT) * held_out if split == "train" else held_out for split in SPLITS}


def _sharing(split: str) -> list[str]:
    """The splits that draw voices from the same accents as `split` (itself included)."""
    return [other for other in SPLITS if CONDITIONS[other].accents == CONDITIONS[split].accents]


def _pool_size(split: str) -> int:
    return len(CONDITIONS[split].accents) * len(VARIANTS)


def voice_counts(utterances: int) -> dict[str, int]:
    """Voices per split: at least one each and none without utterances.

    train gets one voice per UTTERANCES_PER_VOICE of its utterances and every held-out
    subset the same number, a HELD_OUT_VOICE_FRACTION of the corpus's; both capped by the
    distinct accent+variant pairs.  A held-out subset never takes more than that fraction of
    a pool it shares with train, so a large corpus keeps most clean pairs for training.
    """
    sizes = split_sizes(utterances, HELD_OUT_UTTERANCE_FRACTION)
    held_out = max(1, round(HELD_OUT_VOICE_FRACTION * utterances / UTTERANCES_PER_VOICE))
    for split in _HELD_OUT:
        sharing = _sharing(split)
        if "train" in sharing:
            held_out = min(held_out, max(1, round(HELD_OUT_VOICE_FRACTION * _pool_size(split))))
        else:
            held_out = min(held_out, _pool_size(split) // len(sharing))
    counts = {split: min(held_out, sizes[split]) for split in _HELD_OUT}
    others = sum(counts[split] for split in _sharing("train") if split != "train")
    counts["train"] = min(max(1, sizes["train"] // UTTERANCES_PER_VOICE), _pool_size("train") - others)
    return counts


def _shuffled_pairs(accents: tuple[str, ...], rng: random.Random) -> list[tuple[str, str]]:
    """Every accent+variant pair once, the accents dealt in turn (in a seeded order) and each
    accent's variants shuffled, so that any n consecutive voices cover min(n, len(accents))
    accents: a five-voice held-out subset hears every accent its split allows."""
    order = rng.sample(accents, len(accents))
    variants = {accent: rng.sample(VARIANTS, len(VARIANTS)) for accent in order}
    return [(accent, variants[accent][turn]) for turn in range(len(VARIANTS)) for accent in order]


def cast_voices(utterances: int, seed: int) -> dict[str, list[Voice]]:
    """Seeded, split-disjoint voices; speaker ids rise in SPLITS order (train lowest)."""
    rng = random.Random(f"voices:{seed}")
    counts = voice_counts(utterances)
    pools: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    cast: dict[str, list[Voice]] = {}
    speaker_id = FIRST_SPEAKER_ID
    for split in SPLITS:
        conditions = CONDITIONS[split]
        if conditions.accents not in pools:
            pools[conditions.accents] = _shuffled_pairs(conditions.accents, rng)
        pool = pools[conditions.accents]
        chosen, pool[:] = pool[: counts[split]], pool[counts[split]:]
        cast[split] = []
        for accent, variant in chosen:
            cast[split].append(Voice(speaker_id, accent, variant, rate=rng.randint(*conditions.rate_range),
                                     pitch=rng.randint(*PITCH_RANGE)))
            speaker_id += 1
    return cast
