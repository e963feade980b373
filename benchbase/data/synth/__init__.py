"""Synthetic LibriSpeech-style speech corpus generated with eSpeak NG.

`synthesize_corpus` is the entry point; the submodules hold the sentence grammar
(`sentences`), the ctypes eSpeak binding (`espeak`), the speaker set (`voices`) and the
reproducible, atomic writer (`corpus`).
"""

from __future__ import annotations

from benchbase.data.synth.corpus import CorpusSummary, synthesize_corpus
from benchbase.data.synth.sentences import CorpusError

__all__ = ["CorpusError", "CorpusSummary", "synthesize_corpus"]
