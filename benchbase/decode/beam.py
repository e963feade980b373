"""CTC prefix beam search without a dictionary (Hannun et al. 2014), in log space."""

from __future__ import annotations

import numpy as np

from benchbase.data.alphabet import SYMBOLS, decode_labels
from benchbase.data.vocabulary import CharacterVocabulary
from benchbase.decode._search import PLAIN, Search, plain_lexicon, search
from benchbase.decode.parallel import available_cores, decode_rows

__all__ = ["BeamSearchDecoder"]

SPACE = SYMBOLS.index(" ")


class BeamSearchDecoder:
    """Keeps the ``beam_width`` most probable label prefixes, summing every path of each."""

    def __init__(self, beam_width: int, blank: int = 0, workers: int | None = None) -> None:
        if beam_width < 1:
            raise ValueError(f"beam width must be at least 1, got {beam_width}")
        self.settings = Search(beam_width, blank, SPACE, PLAIN, 0.0, 0.0)
        self.lexicon = plain_lexicon()
        self.workers = workers or available_cores()
        self.vocabulary = CharacterVocabulary()  # the search spells characters (a space ends a word)

    def decode_one(self, log_probs: np.ndarray) -> str:
        """(frames, symbols) log-probabilities of one utterance -> its text."""
        labels, _ = search(log_probs, self.settings, self.lexicon)
        return decode_labels(labels)

    def decode(self, log_probs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return decode_rows(self.decode_one, log_probs, lengths, self.workers)
