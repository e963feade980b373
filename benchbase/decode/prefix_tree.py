"""The dictionary as a prefix tree over label sequences, for word beam search.

Words are spelled with `encode_transcript`, so a doubled letter carries the separator between
its halves ("cool" -> c o _ o l) exactly as the acoustic model was trained to emit it; the
tree then walks the labels the model produces, and the text drops the separators again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchbase.data.alphabet import SYMBOLS, encode_transcript

__all__ = ["PrefixTree"]

ROOT = 0


@dataclass(frozen=True, eq=False)
class PrefixTree:
    children: np.ndarray
    """int32 (nodes, symbols): the child reached by a label, or -1. Node 0 is the root."""
    word_at: np.ndarray
    """int32 (nodes,): the word that ends at a node, or -1."""
    best_word: np.ndarray
    """int32 (nodes,): the most probable word below a node (completes a cut-off last word)."""
    best_log_prob: np.ndarray
    """float64 (nodes,): its unigram log-probability: the look-ahead of a partial word."""

    @classmethod
    def build(cls, words: tuple[str, ...], unigram_log_probs: np.ndarray) -> PrefixTree:
        children = [[-1] * len(SYMBOLS)]
        word_at = [-1]
        for word_id, word in enumerate(words):
            node = ROOT
            for label in encode_transcript(word):
                if children[node][label] < 0:
                    children[node][label] = len(children)
                    children.append([-1] * len(SYMBOLS))
                    word_at.append(-1)
                node = children[node][label]
            word_at[node] = word_id
        tree = np.asarray(children, dtype=np.int32)
        best_word = _best_words(tree, np.asarray(word_at), unigram_log_probs)
        best = np.where(best_word >= 0, unigram_log_probs[np.maximum(best_word, 0)], -np.inf)
        return cls(tree, np.asarray(word_at, dtype=np.int32), best_word, best)

    @property
    def nodes(self) -> int:
        return len(self.word_at)


def _best_words(children: np.ndarray, word_at: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
    # Children are always numbered after their parent, so one reverse sweep sees every
    # subtree before its root.
    best = word_at.astype(np.int32).copy()
    for node in range(len(word_at) - 1, -1, -1):
        for child in children[node][children[node] >= 0]:
            candidate = best[child]
            if candidate >= 0 and (best[node] < 0 or log_probs[candidate] > log_probs[best[node]]):
                best[node] = candidate
    return best
