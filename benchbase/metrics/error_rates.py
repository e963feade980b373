"""WER and CER with jiwer, plus the paper's CER variant.

jiwer's CER divides the edit distance by the reference length (and can exceed 100%); the
paper divides each utterance's distance by max(len(hypothesis), len(reference)), which is
bounded by 100%. Both are reported; targets use the standard one.
"""

from __future__ import annotations

from dataclasses import dataclass

import jiwer

__all__ = ["ErrorRates", "error_rates"]


@dataclass(frozen=True)
class ErrorRates:
    wer: float
    """Word error rate in percent."""
    cer: float
    """Character error rate in percent (edits / reference characters)."""
    paper_cer: float
    """Mean over utterances of edits / max(len(hypothesis), len(reference)), in percent."""
    utterances: int


def error_rates(references: list[str], hypotheses: list[str]) -> ErrorRates:
    if len(references) != len(hypotheses) or not references:
        raise ValueError(f"need as many hypotheses as references, got {len(hypotheses)} and {len(references)}")
    # jiwer refuses empty references; an utterance always has words, so this only guards hypotheses.
    words = jiwer.process_words(references, hypotheses)
    characters = jiwer.process_characters(references, hypotheses)
    return ErrorRates(
        wer=100.0 * words.wer,
        cer=100.0 * characters.cer,
        paper_cer=100.0 * _paper_cer(references, hypotheses),
        utterances=len(references),
    )


def _paper_cer(references: list[str], hypotheses: list[str]) -> float:
    total = 0.0
    for reference, hypothesis in zip(references, hypotheses):
        longest = max(len(reference), len(hypothesis))
        if longest:
            edits = jiwer.process_characters(reference, hypothesis)
            total += (edits.substitutions + edits.deletions + edits.insertions) / longest
    return total / len(references)
