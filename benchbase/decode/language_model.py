"""The word language model of word beam search: a dictionary with unigram and bigram counts.

As in the paper, it is built from the training transcripts (or from a text file the user
names), stored beside the prepared features and loaded once per run. Only counts are stored;
probabilities are derived on load with interpolated absolute discounting, which has an exact
ARPA form (`write_arpa`), so that peer decoders in the benchmark can be given the same model.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchbase.atomic import atomic_write_bytes
from benchbase.data.alphabet import normalize_transcript
from benchbase.data.store import FeatureStore
from benchbase.errors import InputError

__all__ = ["LanguageModel", "ensure_language_model", "language_model_path"]

LM_FILE = "lm.npz"
UNIGRAM_FLOOR = 1.0
"""Add-one smoothing of unigrams: a word seen once in a small corpus stays reachable."""


@dataclass(frozen=True, eq=False)
class LanguageModel:
    """Word counts; ids 0..V-1 are the words, id V is the sentence end (as a target) and the
    sentence start (as a context)."""

    words: tuple[str, ...]
    unigram_counts: np.ndarray
    """int64 (V + 1,): word counts, then the count of sentence ends."""
    bigrams: np.ndarray
    """int32 (n, 2): (context, word) pairs sorted by context then word; context V = start."""
    bigram_counts: np.ndarray
    """int64 (n,)."""

    # --- building and storing ----------------------------------------------------------

    @classmethod
    def build_from_transcripts(cls, transcripts: Iterable[str]) -> LanguageModel:
        sentences = [normalize_transcript(text).split() for text in transcripts]
        words = tuple(sorted({word for sentence in sentences for word in sentence}))
        index = {word: i for i, word in enumerate(words)}
        end = len(words)
        unigrams, pairs = Counter(), Counter()
        for sentence in sentences:
            ids = [index[word] for word in sentence] + [end]
            unigrams.update(ids)
            pairs.update(zip([end, *ids[:-1]], ids))
        ordered = sorted(pairs)
        return cls(words, np.asarray([unigrams[i] for i in range(end + 1)], dtype=np.int64),
                   np.asarray(ordered, dtype=np.int32).reshape(-1, 2),
                   np.asarray([pairs[pair] for pair in ordered], dtype=np.int64))

    @classmethod
    def build_from_text(cls, path: Path) -> LanguageModel:
        """One sentence per line; blank lines are skipped."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise InputError(f"{path}: cannot read the language model text: {error.strerror}") from None
        return cls.build_from_transcripts(line for line in lines if line.strip())

    def save(self, path: Path) -> None:
        arrays = {"words": np.asarray(self.words, dtype=str), "unigram_counts": self.unigram_counts,
                  "bigrams": self.bigrams, "bigram_counts": self.bigram_counts}
        atomic_write_bytes(path, lambda handle: np.savez(handle, **arrays))

    @classmethod
    def load(cls, path: Path) -> LanguageModel:
        try:
            with np.load(path, allow_pickle=False) as stored:
                return cls(tuple(str(word) for word in stored["words"]), stored["unigram_counts"],
                           stored["bigrams"].reshape(-1, 2), stored["bigram_counts"])
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"{path}: not a benchbase language model ({error})") from None

    # --- probabilities (natural log) -----------------------------------------------------

    @property
    def vocabulary_size(self) -> int:
        return len(self.words)

    def unigram_log_probs(self) -> np.ndarray:
        """(V + 1,): log P(word), the last entry log P(end); one share is left for unknown words."""
        counts = self.unigram_counts.astype(np.float64) + UNIGRAM_FLOOR
        return np.log(counts / (counts.sum() + UNIGRAM_FLOOR))

    def discount(self) -> float:
        """Absolute discount D = n1 / (n1 + 2 n2) (Ney, Essen and Kneser), kept inside (0, 1)."""
        once = int((self.bigram_counts == 1).sum())
        twice = int((self.bigram_counts == 2).sum())
        return min(max(once / (once + 2 * twice), 0.1), 0.9) if once + twice else 0.5

    def bigram_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row starts (V + 2,), next words, log P(word | context) of seen pairs, log backoff (V + 1,)).

        P(w | v) = max(c(v, w) - D, 0) / c(v) + D n(v) / c(v) P(w), where n(v) counts the
        distinct successors of v; unseen pairs get the second term alone (the backoff).
        """
        contexts, successors = self.bigrams[:, 0], self.bigrams[:, 1]
        rows = self.vocabulary_size + 1
        totals = np.bincount(contexts, weights=self.bigram_counts, minlength=rows)
        types = np.bincount(contexts, minlength=rows)
        discount = self.discount()
        backoff = np.where(totals > 0, discount * types / np.maximum(totals, 1), 1.0)
        unigram = np.exp(self.unigram_log_probs())
        seen = (self.bigram_counts - discount) / totals[contexts] + backoff[contexts] * unigram[successors]
        starts = np.concatenate([[0], np.cumsum(types)]).astype(np.int64)
        return starts, successors.astype(np.int32), np.log(seen), np.log(backoff)

    # --- interchange --------------------------------------------------------------------

    def write_arpa(self, path: Path, spell=lambda word: word) -> None:
        """The same model as an ARPA bigram file (log10), for KenLM-based peer decoders.

        ``spell`` maps each word to the token the peer uses for it (e.g. with separators)."""
        names = [spell(word) for word in self.words] + ["</s>"]
        unigram = self.unigram_log_probs() / math.log(10)
        starts, successors, seen, backoff = self.bigram_tables()
        backoff = backoff / math.log(10)
        seen = seen / math.log(10)
        context_names = names[:-1] + ["<s>"]
        lines = ["", "\\data\\", f"ngram 1={len(names) + 2}", f"ngram 2={len(successors)}", "", "\\1-grams:"]
        unknown = math.log10(UNIGRAM_FLOOR / (self.unigram_counts.sum() + len(names) * UNIGRAM_FLOOR + UNIGRAM_FLOOR))
        lines += [f"{unknown:.6f}\t<unk>", f"-99\t<s>\t{backoff[-1]:.6f}"]
        lines += [f"{unigram[i]:.6f}\t{names[i]}" + (f"\t{backoff[i]:.6f}" if i < len(names) - 1 else "")
                  for i in range(len(names))]
        lines += ["", "\\2-grams:"]
        for context in range(len(context_names)):
            lines += [f"{seen[j]:.6f}\t{context_names[context]} {names[successors[j]]}"
                      for j in range(starts[context], starts[context + 1])]
        lines += ["", "\\end\\", ""]
        path.write_text("\n".join(lines), encoding="utf-8")


def language_model_path(store_root: Path, text_file: Path | None = None) -> Path:
    """STORE/lm.npz for the training transcripts; STORE/lm-HASH.npz for a named text file."""
    if text_file is None:
        return store_root / LM_FILE
    digest = hashlib.sha256(text_file.read_bytes()).hexdigest()[:10]
    return store_root / f"lm-{digest}.npz"


def ensure_language_model(store_root: Path, train_subsets: Iterable[str], text_file: Path | None = None
                          ) -> LanguageModel:
    """Load the store's language model, building it on first use (training transcripts by default)."""
    path = language_model_path(store_root, text_file)
    if path.is_file():
        return LanguageModel.load(path)
    if text_file is not None:
        model = LanguageModel.build_from_text(text_file)
    else:
        store = FeatureStore(store_root)
        model = LanguageModel.build_from_transcripts(
            str(text) for shard in store.shards(list(train_subsets)) for text in store.index(shard).transcripts)
    model.save(path)
    return model
