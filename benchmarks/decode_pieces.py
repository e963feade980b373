"""Greedy CTC decoding with characters against pieces: what the vocabulary costs evaluation.

    OPENBLAS_NUM_THREADS=1 python benchmarks/decode_pieces.py [--repeats 5]

For each vocabulary (benchbase's 30 characters; sentencepiece pieces trained on the synthetic
corpus's training transcripts: 63 and 255 unigram, 1023 bpe, since its 307 words make at most
327 unigram pieces), the dev-clean utterances of the cached ds2-mini store are encoded, and
log-probabilities are made that peak on each utterance's labels, spread evenly over its output
frames (half its feature frames, ds2-mini's rate) with the blank between them, as a trained
model's outputs look: greedy decoding must spell every transcript back exactly (checked). Times
``greedy_decode`` over the 180 utterances in batches of 32, median of --repeats, one thread;
prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchbase.data.librispeech import list_subset
from benchbase.data.store import FeatureStore
from benchbase.data.vocabulary import CharacterVocabulary, PieceVocabulary, ctc_path_length, train_pieces
from benchbase.data.workload_data import default_cache, ensure_workload_data
from benchbase.decode.greedy import greedy_decode
from benchbase.plugin_host.builtins.workloads import builtin_workload
from benchbase.specs.vocabulary import SentencePieceSpec

BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    workload = builtin_workload("ds2-mini")
    store = FeatureStore(ensure_workload_data(workload, None, default_cache()))
    corpus = default_cache() / f"synthetic-v3-{workload.data.synthetic_utterances}-seed0"
    transcripts = [source.transcript for source in list_subset(corpus, "train").utterances]
    utterances = [u for shard in store.shards(["dev-clean"]) for u in store.read(shard)]
    vocabularies = {"characters (30)": CharacterVocabulary()}
    for size, kind in ((63, "unigram"), (255, "unigram"), (1023, "bpe")):
        spec = SentencePieceSpec(kind="sentencepiece", size=size, model_type=kind)
        vocabularies[f"{kind} pieces ({size + 1})"] = PieceVocabulary(train_pieces(transcripts, spec))
    print("| vocabulary | labels per utterance | ms per utterance (median) | relative |")
    print("|---|---:|---:|---:|")
    baseline = None
    for name, vocabulary in vocabularies.items():
        batches, labels = _batches(utterances, vocabulary)
        timings = []
        for _ in range(arguments.repeats):
            started = time.perf_counter()
            decoded = [text for log_probs, lengths in batches for text in greedy_decode(log_probs, lengths, 0,
                                                                                         vocabulary)]
            timings.append(time.perf_counter() - started)
        assert decoded == [" ".join(u.transcript.split()) for u in utterances], name
        per_utterance = 1000 * statistics.median(timings) / len(utterances)
        baseline = baseline or per_utterance
        print(f"| {name} | {np.mean(labels):.1f} | {per_utterance:.3f} | {per_utterance / baseline:.2f} |")


def _batches(utterances, vocabulary):
    """Peaked log-probabilities (batch, frames, symbols) and lengths, in batches of BATCH."""
    encoded = [vocabulary.encode(u.transcript) for u in utterances]
    frames = [max(len(u.features) // 2, 2 * ctc_path_length(labels) + 1) for u, labels in zip(utterances, encoded)]
    batches = []
    for start in range(0, len(utterances), BATCH):
        rows = range(start, min(start + BATCH, len(utterances)))
        longest = max(frames[row] for row in rows)
        log_probs = np.full((len(rows), longest, vocabulary.symbols), -20.0, dtype=np.float32)
        log_probs[:, :, 0] = 0.0
        for position, row in enumerate(rows):
            labels = encoded[row]
            slots = np.linspace(0, frames[row] - 1, 2 * len(labels) + 1).round().astype(int)[1::2]
            log_probs[position, slots, 0] = -20.0
            log_probs[position, slots, labels] = 0.0
        batches.append((log_probs, np.array([frames[row] for row in rows])))
    return batches, [len(labels) for labels in encoded]


if __name__ == "__main__":
    main()
