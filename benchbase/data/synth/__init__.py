"""Synthetic LibriSpeech-style speech corpus generated with eSpeak NG.

It has LibriSpeech's subsets: train, dev-clean, dev-other, test-clean and test-other.
`synthesize_corpus` is the entry point; the submodules hold the sentence grammar
(`sentences`), the ctypes eSpeak binding (`espeak`), what sets clean and other apart
(`conditions`), the noise and reverberation a split can get (`acoustics`), the speaker
set (`voices`) and the reproducible, atomic writer (`corpus`).
"""

from __future__ import annotations

from benchbase.data.synth.corpus import CorpusSummary, synthesize_corpus
from benchbase.data.synth.sentences import CorpusError

__all__ = ["CorpusError", "CorpusSummary", "synthesize_corpus"]
