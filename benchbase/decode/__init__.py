"""CTC decoders. They live in the harness so that every backend is scored by the same one.

greedy (best path), prefix beam search, and word beam search over a dictionary prefix tree
with a unigram or bigram language model built from the training transcripts.
"""

from __future__ import annotations

from benchbase.decode.beam import BeamSearchDecoder
from benchbase.decode.factory import DECODERS, Decoder, GreedyDecoder, evaluation_decoder, make_decoder
from benchbase.decode.greedy import greedy_decode
from benchbase.decode.language_model import LanguageModel, ensure_language_model, language_model_path
from benchbase.decode.parallel import BackgroundDecoding, available_cores
from benchbase.decode.prefix_tree import PrefixTree
from benchbase.decode.word_beam import LM_MODES, WordBeamSearchDecoder

__all__ = [
    "DECODERS",
    "LM_MODES",
    "BackgroundDecoding",
    "BeamSearchDecoder",
    "Decoder",
    "GreedyDecoder",
    "LanguageModel",
    "PrefixTree",
    "WordBeamSearchDecoder",
    "available_cores",
    "ensure_language_model",
    "evaluation_decoder",
    "greedy_decode",
    "language_model_path",
    "make_decoder",
]
