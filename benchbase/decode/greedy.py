"""Greedy (best-path) CTC decoding: argmax per frame, merge repeats, drop blanks, spell through the vocabulary."""

from __future__ import annotations

import numpy as np

from benchbase.data.vocabulary import CharacterVocabulary, Vocabulary

__all__ = ["greedy_decode"]


def greedy_decode(log_probs: np.ndarray, lengths: np.ndarray, blank: int = 0,
                  vocabulary: Vocabulary | None = None) -> list[str]:
    """(batch, frames, symbols) log-probabilities and valid frames per row -> texts (characters by default)."""
    vocabulary = vocabulary or CharacterVocabulary()
    best = log_probs.argmax(axis=-1)
    texts = []
    for row, length in zip(best, lengths):
        path = row[: int(length)]
        keep = np.ones(len(path), dtype=bool)
        keep[1:] = path[1:] != path[:-1]
        texts.append(vocabulary.decode(path[keep & (path != blank)]))
    return texts
