"""The 30-symbol output alphabet and transcript normalization.

Index 0 is the CTC blank: PyTorch's CTCLoss and TensorFlow's cuDNN CTC path both want it
there, so pinning it at 0 keeps both backends on their fast paths with the same labels.
Doubled letters get a separation symbol between them ("cool" -> "co_ol") as in the paper,
so that a doubled letter survives CTC's merging of repeats without needing a blank.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "BLANK",
    "SEPARATOR",
    "SYMBOLS",
    "UnknownCharacterError",
    "decode_labels",
    "encode_transcript",
    "normalize_transcript",
]

BLANK = "<b>"
SEPARATOR = "_"
SYMBOLS: tuple[str, ...] = (BLANK, " ", *"abcdefghijklmnopqrstuvwxyz", "'", SEPARATOR)
assert len(SYMBOLS) == 30

_INDEX = {symbol: index for index, symbol in enumerate(SYMBOLS)}
_SPOKEN = frozenset(" abcdefghijklmnopqrstuvwxyz'")
_WHITESPACE = re.compile(r"\s+")


class UnknownCharacterError(ValueError):
    """A transcript holds a character that the alphabet cannot represent."""

    def __init__(self, character: str, transcript: str) -> None:
        super().__init__(f"character {character!r} is not in the alphabet (in {transcript!r})")
        self.character = character


def normalize_transcript(text: str) -> str:
    """Lower-case, fold white space, and refuse characters outside the alphabet."""
    normalized = _WHITESPACE.sub(" ", text.strip().lower())
    for character in normalized:
        if character not in _SPOKEN:
            raise UnknownCharacterError(character, text)
    return normalized


def encode_transcript(text: str) -> np.ndarray:
    """Transcript -> int32 label indices, with the separator between doubled letters."""
    normalized = normalize_transcript(text)
    labels: list[int] = []
    previous = ""
    for character in normalized:
        if character == previous:
            labels.append(_INDEX[SEPARATOR])
        labels.append(_INDEX[character])
        previous = character
    return np.asarray(labels, dtype=np.int32)


def decode_labels(labels) -> str:
    """Label indices (blanks already removed, repeats merged) -> text without separators."""
    return "".join(SYMBOLS[int(i)] for i in labels if int(i) not in (0, _INDEX[SEPARATOR]))
