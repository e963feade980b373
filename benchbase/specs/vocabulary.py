"""TokensSpec: the symbols a workload's model predicts, as data.

``characters`` is benchbase's 30-symbol alphabet (benchbase/data/alphabet.py), every workload's
until pieces. ``sentencepiece`` is a subword vocabulary that ``benchbase data prepare`` trains on
the training split's transcripts with the sentencepiece library, as AlgoPerf's Conformer (1024
unigram pieces) and MLPerf's RNN-T (1023 pieces) do; the settings here fix it, so the same
corpus gives the same model, byte for byte.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from benchbase.specs._base import Spec

__all__ = ["CHARACTER_SYMBOLS", "CharactersSpec", "SentencePieceSpec", "TokensSpec"]

CHARACTER_SYMBOLS = 30
"""The character alphabet's size: the CTC blank, space, a-z, the apostrophe, the doubled-letter separator."""


class CharactersSpec(Spec):
    kind: Literal["characters"] = Field("characters", description="benchbase's alphabet of 30 symbols.")

    @property
    def symbols(self) -> int:
        """The model's output width: the blank and every symbol."""
        return CHARACTER_SYMBOLS


class SentencePieceSpec(Spec):
    kind: Literal["sentencepiece"] = Field(description="Subword pieces trained by sentencepiece at prepare time.")
    model_type: Literal["unigram", "bpe"] = Field("unigram", description="sentencepiece's algorithm.")
    size: int = Field(
        ge=8, le=32_000,
        description="Pieces, <unk> included (sentencepiece's vocab_size less the blank): the model predicts "
        "these and the blank, at index 0.")
    character_coverage: float = Field(
        1.0, gt=0.9, le=1.0, description="Share of the transcripts' characters the pieces must cover "
        "(sentencepiece's character_coverage; 1.0 for English).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="sentencepiece's random generator seed.")

    @property
    def symbols(self) -> int:
        return self.size + 1


TokensSpec = Annotated[CharactersSpec | SentencePieceSpec, Field(discriminator="kind")]
