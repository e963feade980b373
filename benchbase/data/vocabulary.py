"""The vocabulary a store's labels are in: benchbase's characters, or sentencepiece pieces.

The harness owns it as it owns the features. ``benchbase data prepare`` trains a sentencepiece
model on the training split's transcripts (normalized as the alphabet normalizes them), writes it
into the store beside store.json with its SHA-256, and encodes every transcript once; evaluation
turns a model's labels back into text through the same file. Training is deterministic (one
thread, the transcripts in the listing's order, sentencepiece's own seed), so the same corpus and
settings give the same model file, byte for byte.

Index 0 is the blank in both: the alphabet puts it there, and the pieces' model reserves it as its
padding piece (``<blank>``, never emitted by encoding), with ``<unk>`` at 1 and no sentence markers.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np

from benchbase.data import alphabet
from benchbase.errors import InputError
from benchbase.specs.vocabulary import CharactersSpec, SentencePieceSpec, TokensSpec

__all__ = [
    "VOCABULARY_FILE",
    "CharacterVocabulary",
    "PieceVocabulary",
    "Vocabulary",
    "ctc_path_length",
    "model_digest",
    "train_pieces",
    "vocabulary_for",
]

VOCABULARY_FILE = "vocabulary.model"
"""A store's sentencepiece model (none for characters)."""


class Vocabulary(Protocol):
    symbols: int
    """The model's output width, the blank included."""

    def encode(self, transcript: str) -> np.ndarray:
        """A transcript -> int32 labels (never the blank); UnknownCharacterError outside the alphabet."""

    def decode(self, labels: Iterable[int]) -> str:
        """Labels (blanks removed, repeats merged) -> words."""


class CharacterVocabulary:
    """benchbase's alphabet (data/alphabet.py)."""

    symbols = CharactersSpec().symbols

    def encode(self, transcript: str) -> np.ndarray:
        return alphabet.encode_transcript(transcript)

    def decode(self, labels: Iterable[int]) -> str:
        return alphabet.decode_labels(labels)


class PieceVocabulary:
    """A sentencepiece model's pieces, shifted by nothing: piece id = label, 0 the blank."""

    def __init__(self, model: bytes, source: str = "the vocabulary") -> None:
        import sentencepiece

        self.model = model
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.LoadFromSerializedProto(model)
        except (RuntimeError, OSError):
            # sentencepiece says only where its parser gave up ("INTERNAL: ...cc(109) [model_proto->...]")
            raise InputError(f"{source}: not a sentencepiece model (its bytes do not parse as one)") from None
        self.symbols = int(self.processor.get_piece_size())
        if self.processor.pad_id() != 0:
            raise InputError(f"{source}: piece 0 is not the blank (<blank> as sentencepiece's padding piece)")

    def encode(self, transcript: str) -> np.ndarray:
        return np.asarray(self.processor.encode(alphabet.normalize_transcript(transcript)), dtype=np.int32)

    def decode(self, labels: Iterable[int]) -> str:
        return self.processor.decode([int(label) for label in labels if int(label) != 0])


def train_pieces(transcripts: Iterable[str], spec: SentencePieceSpec) -> bytes:
    """The sentencepiece model of ``spec`` trained on ``transcripts`` (normalized here), as bytes."""
    import sentencepiece

    texts = [alphabet.normalize_transcript(text) for text in transcripts]
    model = io.BytesIO()
    sentencepiece.set_random_generator_seed(spec.seed)
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=model, vocab_size=spec.symbols, model_type=spec.model_type,
            character_coverage=spec.character_coverage, pad_id=0, pad_piece="<blank>", unk_id=1, bos_id=-1,
            eos_id=-1, num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
            normalization_rule_name="identity", minloglevel=2)
    except RuntimeError as error:
        raise InputError(f"sentencepiece cannot make {spec.size} {spec.model_type} pieces from {len(texts)} "
                         f"training transcripts: {_training_failure(str(error), spec)}") from None
    return model.getvalue()


def _training_failure(message: str, spec: SentencePieceSpec) -> str:
    """sentencepiece's reason in the workload's units. Its limit counts the blank among its
    vocabulary ("Vocabulary size too high (1024). Please set it to a value <= 327."), where the
    workload's size counts pieces only, so the largest size that works is one less."""
    reason = message.splitlines()[-1].strip().rsplit("] ", 1)[-1]  # past "INTERNAL: file(line) [condition]"
    limit = re.search(r"value <= (\d+)", reason)
    if limit is None:
        return reason
    largest = int(limit.group(1)) - 1
    other = "" if spec.model_type == "bpe" else (
        "; bpe pieces (workload.data.tokens.model_type=bpe) can be more from the same transcripts")
    return f"they make at most {largest} (workload.data.tokens.size <= {largest}){other}"


def vocabulary_for(tokens: TokensSpec, store: Path | None = None) -> Vocabulary:
    """The vocabulary a workload's tokens name; pieces are read from ``store``'s model file."""
    if tokens.kind == "characters":
        return CharacterVocabulary()
    if store is None:
        raise ValueError("a sentencepiece vocabulary is read from a prepared store")
    path = store / VOCABULARY_FILE
    try:
        model = path.read_bytes()
    except OSError:
        raise InputError(f"{path}: the store has no sentencepiece model; prepare it for {tokens.kind} tokens") from None
    vocabulary = PieceVocabulary(model, str(path))
    if vocabulary.symbols != tokens.symbols:
        raise InputError(f"{path}: {vocabulary.symbols} symbols, the workload's tokens have {tokens.symbols}")
    return vocabulary


def model_digest(model: bytes) -> str:
    return hashlib.sha256(model).hexdigest()


def ctc_path_length(labels: np.ndarray) -> int:
    """Output frames CTC needs for ``labels``: one per label and a blank between equal neighbours
    (never any for characters, whose separator parts doubled letters; pieces repeat: "m", "m")."""
    labels = np.asarray(labels)
    return int(len(labels) + np.count_nonzero(labels[1:] == labels[:-1]))
