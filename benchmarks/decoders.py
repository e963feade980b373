"""Decoder speed and accuracy on a trained checkpoint's dev-set outputs.

    python benchmarks/decoders.py RUN_DIR [--data STORE] [--beams 16,64,256,512] [--limit N]

Predicts the dev split once from RUN_DIR's newest checkpoint, then decodes it with greedy,
prefix beam search and word beam search (benchbase's), and, side by side with the same
bigram LM (written as an ARPA file), pyctcdecode and flashlight-text's lexicon decoder. Each
decoder runs on one thread, so "ms/utt" compares the searches themselves; a missing peer is
skipped with a note. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchbase.data.alphabet import SYMBOLS, encode_transcript
from benchbase.decode import LanguageModel, ensure_language_model, make_decoder
from benchbase.harness.replay import dev_outputs, load_run_config, newest_checkpoint
from benchbase.metrics import error_rates

ALPHA, BETA = 0.5, 0.0


def main() -> None:
    arguments = _arguments()
    config = load_run_config(arguments.run_dir)
    store = arguments.data or config.data
    outputs = dev_outputs(config, newest_checkpoint(arguments.run_dir), store)
    rows = [log_probs[i, : int(n)] for log_probs, lengths in outputs.batches for i, n in enumerate(lengths)]
    rows, references = rows[: arguments.limit], outputs.references[: arguments.limit]
    lm = ensure_language_model(store, config.workload.data.train)
    print(f"{len(rows)} dev utterances, {statistics.mean(len(r) for r in rows):.0f} frames on average, "
          f"{lm.vocabulary_size} words in the dictionary; alpha {ALPHA}, beta {BETA}\n")
    print("| decoder | beam | ms/utt | WER % | CER % |\n|---|---:|---:|---:|---:|")
    _report("greedy", 1, make_decoder("greedy").decode, rows, references, batch=True)
    with tempfile.TemporaryDirectory() as folder:
        peers = _peers(lm, Path(folder))
        for width in arguments.beams:
            _report("benchbase beam", width, make_decoder("beam", width, workers=1).decode_one, rows, references)
            for mode in ("words", "bigrams"):
                decoder = make_decoder("word_beam", width, lm, lm_mode=mode, lm_alpha=ALPHA, lm_beta=BETA, workers=1)
                _report(f"benchbase word_beam ({mode})", width, decoder.decode_one, rows, references)
            for name, factory in peers.items():
                _report(name, width, factory(width), rows, references)


def _report(name, width, decode_one, rows, references, batch=False) -> None:
    started = time.perf_counter()
    if batch:
        hypotheses = [decode_one(row[None], np.asarray([len(row)]))[0] for row in rows]
    else:
        hypotheses = [decode_one(row) for row in rows]
    milliseconds = 1000 * (time.perf_counter() - started) / len(rows)
    rates = error_rates(references, [" ".join(text.split()) for text in hypotheses])
    print(f"| {name} | {width} | {milliseconds:.1f} | {rates.wer:.2f} | {rates.cer:.2f} |", flush=True)


def _spelled(word: str) -> str:
    return "".join(SYMBOLS[label] for label in encode_transcript(word))


def _peers(lm: LanguageModel, folder: Path) -> dict:
    peers = {}
    for name, build in (("pyctcdecode", _pyctcdecode), ("flashlight lexicon", _flashlight)):
        try:
            peers[name] = build(lm, folder)
        except ImportError as error:
            print(f"(skipping {name}: {error})\n")
    return peers


def _pyctcdecode(lm: LanguageModel, folder: Path):
    import kenlm
    from pyctcdecode import Alphabet, BeamSearchDecoderCTC
    from pyctcdecode import LanguageModel as PyLanguageModel

    # pyctcdecode builds words from label characters, so its LM spells them with separators.
    lm.write_arpa(folder / "spelled.arpa", spell=_spelled)
    labels = ["", *SYMBOLS[1:]]
    model = PyLanguageModel(kenlm.Model(str(folder / "spelled.arpa")), [_spelled(w) for w in lm.words],
                            alpha=ALPHA, beta=BETA)
    decoder = BeamSearchDecoderCTC(Alphabet(labels, False), model)
    return lambda width: (lambda row: decoder.decode(row, beam_width=width).replace("_", ""))


def _flashlight(lm: LanguageModel, folder: Path):
    from flashlight.lib.text.decoder import (
        CriterionType,
        KenLM,
        LexiconDecoder,
        LexiconDecoderOptions,
        SmearingMode,
        Trie,
    )
    from flashlight.lib.text.dictionary import Dictionary

    lm.write_arpa(folder / "words.arpa")
    tokens = Dictionary()
    for symbol in ("<b>", "|", *SYMBOLS[2:]):
        tokens.add_entry(symbol)
    lexicon = {word: [list(_spelled(word))] for word in lm.words}
    words = Dictionary()
    for word in (*lm.words, "<unk>"):
        words.add_entry(word)
    language_model = KenLM(str(folder / "words.arpa"), words)
    trie = Trie(len(SYMBOLS), 1)
    start = language_model.start(False)
    for word, spellings in lexicon.items():
        index = words.get_index(word)
        _, score = language_model.score(start, index)
        for spelling in spellings:
            trie.insert([tokens.get_index(token) for token in spelling], index, score)
    trie.smear(SmearingMode.MAX)

    def factory(width: int):
        options = LexiconDecoderOptions(beam_size=width, beam_size_token=len(SYMBOLS), beam_threshold=50.0,
                                        lm_weight=ALPHA, word_score=BETA, unk_score=float("-inf"), sil_score=0.0,
                                        log_add=False, criterion_type=CriterionType.CTC)
        decoder = LexiconDecoder(options, trie, language_model, 1, 0, words.get_index("<unk>"), [], False)

        def decode_one(row: np.ndarray) -> str:
            emissions = np.ascontiguousarray(row, dtype=np.float32)
            best = decoder.decode(emissions.ctypes.data, len(emissions), len(SYMBOLS))[0]
            return " ".join(words.get_entry(w) for w in best.words if w >= 0)

        return decode_one

    return factory


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data", type=Path, help="feature store (default: the run's)")
    parser.add_argument("--beams", type=lambda text: [int(w) for w in text.split(",")], default=[16, 64, 256, 512])
    parser.add_argument("--limit", type=int, default=None, help="decode only the first N dev utterances")
    return parser.parse_args()


if __name__ == "__main__":
    main()
