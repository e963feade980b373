"""Word beam search (Scheidl, Fiel and Sablatnig 2018), in log space.

Inside a word, only labels that continue some dictionary word may follow; a space may follow
only a complete word, and a word's language-model score joins the beam's when the space
closes it (shallow fusion: log P_ctc + alpha log P_lm + beta per word). Modes: "words" scores
each word by its unigram probability (alpha 0 is the paper's pure dictionary mode), "bigrams"
by its probability given the previous word. A last word cut off by the end of the utterance is
completed with the most probable dictionary word it begins, as in the reference.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from benchbase.data.alphabet import SYMBOLS, decode_labels
from benchbase.data.vocabulary import CharacterVocabulary
from benchbase.decode._search import BIGRAMS, WORDS, Lexicon, Search, search
from benchbase.decode.language_model import LanguageModel
from benchbase.decode.parallel import available_cores, decode_rows
from benchbase.decode.prefix_tree import PrefixTree

__all__ = ["LM_MODES", "WordBeamSearchDecoder"]

SPACE = SYMBOLS.index(" ")
LM_MODES = {"words": WORDS, "bigrams": BIGRAMS}


class WordBeamSearchDecoder:
    def __init__(self, language_model: LanguageModel, beam_width: int, mode: Literal["words", "bigrams"] = "bigrams",
                 alpha: float = 0.5, beta: float = 0.0, blank: int = 0, workers: int | None = None) -> None:
        if beam_width < 1:
            raise ValueError(f"beam width must be at least 1, got {beam_width}")
        if mode not in LM_MODES:
            raise ValueError(f"language model mode must be one of {', '.join(LM_MODES)}, got {mode!r}")
        self.vocabulary = CharacterVocabulary()  # its dictionary is a tree of characters
        self.words = language_model.words
        self.settings = Search(beam_width, blank, SPACE, LM_MODES[mode], float(alpha), float(beta))
        self.lexicon = _lexicon(language_model)
        self.workers = workers or available_cores()

    def decode_one(self, log_probs: np.ndarray) -> str:
        """(frames, symbols) log-probabilities of one utterance -> its text."""
        labels, completion = search(log_probs, self.settings, self.lexicon)
        text = decode_labels(labels)
        if completion >= 0:
            text = text[: text.rfind(" ") + 1] + self.words[completion]
        return text.strip()

    def decode(self, log_probs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return decode_rows(self.decode_one, log_probs, lengths, self.workers)


def _lexicon(language_model: LanguageModel) -> Lexicon:
    unigram = language_model.unigram_log_probs()
    tree = PrefixTree.build(language_model.words, unigram)
    starts, successors, seen, backoff = language_model.bigram_tables()
    return Lexicon(tree.children, tree.word_at, tree.best_word, tree.best_log_prob, unigram, starts, successors,
                   seen, backoff)
