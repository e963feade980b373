"""Choosing the evaluation decoder: one protocol, one factory, as the workload spec names it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from benchbase.data.vocabulary import CharacterVocabulary, Vocabulary, vocabulary_for
from benchbase.decode.beam import BeamSearchDecoder
from benchbase.decode.greedy import greedy_decode
from benchbase.decode.language_model import LanguageModel, ensure_language_model
from benchbase.decode.word_beam import WordBeamSearchDecoder
from benchbase.specs import DECODER_NAMES
from benchbase.specs.vocabulary import TokensSpec

__all__ = ["DECODERS", "Decoder", "GreedyDecoder", "evaluation_decoder", "make_decoder"]

DECODERS = DECODER_NAMES


class Decoder(Protocol):
    vocabulary: Vocabulary
    """What its labels spell; a family with a search of its own (the transducer's) spells through it too."""

    def decode(self, log_probs: np.ndarray, lengths: np.ndarray) -> list[str]:
        """(batch, frames, symbols) log-probabilities and valid frames per row -> texts."""


class GreedyDecoder:
    def __init__(self, blank: int = 0, vocabulary: Vocabulary | None = None) -> None:
        self.blank = blank
        self.vocabulary = vocabulary or CharacterVocabulary()

    def decode(self, log_probs: np.ndarray, lengths: np.ndarray) -> list[str]:
        return greedy_decode(log_probs, lengths, self.blank, self.vocabulary)


def make_decoder(name: str, beam_width: int = 1, language_model: LanguageModel | None = None, *,
                 lm_mode: str = "bigrams", lm_alpha: float = 0.5, lm_beta: float = 0.0, blank: int = 0,
                 workers: int | None = None, vocabulary: Vocabulary | None = None) -> Decoder:
    """A ready decoder; its search kernels are compiled (or loaded from numba's cache) here,
    so that the first evaluation does not pay for it on the run clock."""
    if name == "greedy":
        return GreedyDecoder(blank, vocabulary)
    if vocabulary is not None and not isinstance(vocabulary, CharacterVocabulary):
        raise ValueError(f"the {name} decoder searches over characters; a vocabulary of pieces decodes greedily")
    if name == "beam":
        decoder = BeamSearchDecoder(beam_width, blank, workers)
    elif name == "word_beam":
        if language_model is None:
            raise ValueError("word beam search needs a language model")
        decoder = WordBeamSearchDecoder(language_model, beam_width, lm_mode, lm_alpha, lm_beta, blank, workers)
    else:
        raise ValueError(f"unknown decoder {name!r}; choose one of {', '.join(DECODERS)}")
    decoder.decode_one(np.log(np.full((2, 30), 1 / 30, dtype=np.float32)))
    return decoder


def evaluation_decoder(evaluation, store_root: Path, train_subsets, blank: int = 0, beam_width: int | None = None,
                       workers: int | None = None, tokens: TokensSpec | None = None) -> Decoder:
    """The decoder an EvalSpec names, spelling the ``tokens`` the store's labels are in (characters
    by default); the language model is built from the store's training transcripts on first use
    and loaded after."""
    vocabulary = None if tokens is None else vocabulary_for(tokens, store_root)
    language_model = None
    if evaluation.decoder == "word_beam":
        language_model = ensure_language_model(store_root, train_subsets)
    return make_decoder(evaluation.decoder, beam_width or evaluation.beam_width, language_model,
                        lm_mode=evaluation.lm_mode, lm_alpha=evaluation.lm_alpha, lm_beta=evaluation.lm_beta,
                        blank=blank, workers=workers, vocabulary=vocabulary)
