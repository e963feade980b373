"""Decoders on small hand-made probability matrices, with exact expected outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchbase.data.alphabet import SYMBOLS, encode_transcript
from benchbase.decode import (
    BackgroundDecoding,
    LanguageModel,
    ensure_language_model,
    evaluation_decoder,
    greedy_decode,
    language_model_path,
    make_decoder,
)
from benchbase.specs.workload import EvalSpec

BLANK = "-"
INDEX = {symbol: i for i, symbol in enumerate(SYMBOLS)} | {BLANK: 0}


def peaked(path: str, peak: float = 0.9) -> np.ndarray:
    """One frame per character of ``path`` ("-" is the blank), ``peak`` on that symbol and
    the rest spread evenly: (frames, 30) log-probabilities."""
    frames = np.full((len(path), len(SYMBOLS)), (1 - peak) / (len(SYMBOLS) - 1))
    frames[np.arange(len(path)), [INDEX[c] for c in path]] = peak
    return np.log(frames).astype(np.float32)


def mixed(*frames: dict[str, float]) -> np.ndarray:
    """Frames given as {symbol: probability}; what is left is spread over the other symbols."""
    rows = []
    for frame in frames:
        rest = (1 - sum(frame.values())) / (len(SYMBOLS) - len(frame))
        row = np.full(len(SYMBOLS), rest)
        for symbol, probability in frame.items():
            row[INDEX[symbol]] = probability
        rows.append(row)
    return np.log(np.asarray(rows)).astype(np.float32)


def one(decoder, log_probs: np.ndarray) -> str:
    return decoder.decode(log_probs[None], np.asarray([len(log_probs)]))[0]


@pytest.fixture(scope="module")
def lm() -> LanguageModel:
    return LanguageModel.build_from_transcripts(
        ["the cool cat sat", "a cat sat on the mat", "the red car", "the red car", "the red car", "a big cat",
         "a big cat", "a big cat", "the cat"])


def word_beam(lm, width=16, mode="bigrams", alpha=0.5, beta=0.0):
    return make_decoder("word_beam", width, lm, lm_mode=mode, lm_alpha=alpha, lm_beta=beta, workers=1)


# --- greedy and prefix beam search --------------------------------------------------------


def test_greedy_merges_repeats_drops_blanks_and_separators():
    assert one(make_decoder("greedy"), peaked("cc-oo_oo-l-- ccaat")) == "cool cat"


def test_beam_search_sums_the_paths_that_greedy_ignores():
    # Best path: blank, blank (0.3025). But "a" has aa + a- + -a = 0.16 + 0.22 + 0.22 = 0.6.
    frames = mixed({"a": 0.4, BLANK: 0.55}, {"a": 0.4, BLANK: 0.55})
    assert one(make_decoder("greedy"), frames) == ""
    assert one(make_decoder("beam", 8), frames) == "a"


def test_beam_search_keeps_a_doubled_letter_only_with_the_separator_or_a_blank():
    beam = make_decoder("beam", 8)
    assert one(beam, peaked("coo_ool")) == "cool"
    assert one(beam, peaked("coo-ool")) == "cool"
    assert one(beam, peaked("coooool")) == "col"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("-- abcdo_'"), min_size=1, max_size=40))
def test_beam_search_of_width_one_equals_greedy(path):
    frames = peaked("".join(path), peak=0.95)
    lengths = np.asarray([len(frames)])
    assert make_decoder("beam", 1).decode(frames[None], lengths) == greedy_decode(frames[None], lengths)


def test_rows_decode_only_their_valid_frames_and_alike_on_any_number_of_threads():
    rng = np.random.default_rng(3)
    batch = np.log(rng.dirichlet(np.full(len(SYMBOLS), 0.2), size=(6, 50))).astype(np.float32)
    lengths = np.asarray([50, 40, 7, 0, 1, 33])
    serial = make_decoder("beam", 8, workers=1).decode(batch, lengths)
    assert make_decoder("beam", 8, workers=2).decode(batch, lengths) == serial
    assert serial[3] == ""
    assert serial[2] == one(make_decoder("beam", 8, workers=1), batch[2, :7])


# --- word beam search ---------------------------------------------------------------------


def test_word_beam_search_walks_doubled_letters_through_the_separator(lm):
    assert one(word_beam(lm), peaked("the  cco__ooll  ccatt")) == "the cool cat"


def test_word_beam_search_turns_a_word_outside_the_dictionary_into_a_dictionary_word(lm):
    # "cas" is what the frames say; the dictionary has "cat" and "car" but no "cas".
    frames = mixed({"t": 0.9}, {"h": 0.9}, {"e": 0.9}, {" ": 0.9}, {"c": 0.9}, {"a": 0.9},
                   {"s": 0.6, "t": 0.3, "r": 0.05})
    assert one(make_decoder("beam", 16), frames) == "the cas"
    assert one(word_beam(lm), frames) == "the cat"


def test_bigrams_choose_the_word_that_the_previous_word_predicts(lm):
    # The frames lean to "cat"; after "red" the bigrams have only seen "car".
    frames = np.concatenate([peaked("the red ca"), mixed({"t": 0.5, "r": 0.45})])
    assert one(word_beam(lm, mode="words", alpha=0.0), frames) == "the red cat"
    assert one(word_beam(lm, mode="bigrams", alpha=1.0), frames) == "the red car"


def test_a_last_word_cut_off_by_the_end_is_completed_with_its_best_dictionary_word(lm):
    assert one(word_beam(lm), peaked("a bi")) == "a big"


def test_word_beam_search_of_silence_is_empty(lm):
    assert one(word_beam(lm), peaked("------")) == ""


def test_long_flat_input_decodes_exactly_in_log_space(lm):
    """1520 frames at 0.5 on the right symbol: a product of probabilities underflows to 0
    (the reference implementation's failure), log-probabilities do not."""
    text = " ".join(["the cool cat sat on the mat", "a big cat", "the red car"] * 3)
    path = "".join(SYMBOLS[label] * 10 for label in encode_transcript(text))
    frames = peaked(path.replace("<b>", BLANK), peak=0.5)
    assert len(frames) > 1500 and np.prod(np.exp(frames.max(axis=1).astype(np.float64))) == 0.0
    assert one(make_decoder("beam", 16), frames) == text
    assert one(word_beam(lm, 16), frames) == text
    assert one(word_beam(lm, 16, mode="words"), frames) == text


# --- the language model -------------------------------------------------------------------


def test_bigram_probabilities_sum_to_one_but_the_unknown_words_share(lm):
    starts, successors, seen, backoff = lm.bigram_tables()
    unigram = np.exp(lm.unigram_log_probs())
    unknown = 1 - unigram.sum()
    for context in range(lm.vocabulary_size + 1):
        probabilities = np.exp(backoff[context]) * unigram
        row = slice(starts[context], starts[context + 1])
        probabilities[successors[row]] = np.exp(seen[row])
        assert probabilities.sum() == pytest.approx(1 - np.exp(backoff[context]) * unknown)


def bigram_log_prob(lm: LanguageModel, context: int, word: int) -> float:
    starts, successors, seen, backoff = lm.bigram_tables()
    row = slice(starts[context], starts[context + 1])
    hits = np.flatnonzero(successors[row] == word)
    return float(seen[row][hits[0]]) if len(hits) else float(backoff[context] + lm.unigram_log_probs()[word])


def test_the_arpa_file_is_the_same_model(lm, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    lm.write_arpa(tmp_path / "lm.arpa")
    model = kenlm.Model(str(tmp_path / "lm.arpa"))
    index = {word: i for i, word in enumerate(lm.words)} | {"<s>": lm.vocabulary_size, "</s>": lm.vocabulary_size}
    for sentence in ("the big", "a big cat", "cat the red car"):
        words = ["<s>", *sentence.split(), "</s>"]
        expected = sum(bigram_log_prob(lm, index[v], index[w]) for v, w in zip(words, words[1:]))
        # The ARPA file keeps 6 decimals of each log10 probability (and of each backoff): each
        # n-gram's score is off by up to twice half a unit of the 6th decimal.
        allowed = len(words) * 2 * 0.5e-6
        assert abs(model.score(sentence, bos=True, eos=True) - expected / math.log(10)) <= allowed


def test_language_model_saves_and_loads(lm, tmp_path):
    lm.save(tmp_path / "lm.npz")
    loaded = LanguageModel.load(tmp_path / "lm.npz")
    assert loaded.words == lm.words
    assert np.array_equal(loaded.bigram_tables()[2], lm.bigram_tables()[2])


def test_the_language_model_is_built_from_the_training_shards_once(small_store, mini_workload):
    train = mini_workload.data.train
    built = ensure_language_model(small_store, train)
    assert language_model_path(small_store).is_file()
    assert "the" in built.words or len(built.words) > 10
    assert ensure_language_model(small_store, train).words == built.words


def test_a_text_file_names_its_own_language_model(tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("Hello world\n\nhello there\n", encoding="utf-8")
    model = ensure_language_model(tmp_path, ["train"], text_file=text)
    assert model.words == ("hello", "there", "world")
    assert language_model_path(tmp_path, text).is_file()


# --- choosing the decoder -----------------------------------------------------------------


def test_the_eval_spec_keeps_greedy_by_default_and_names_the_others():
    assert EvalSpec().decoder == "greedy"
    spec = EvalSpec(decoder="word_beam", beam_width=256, lm_mode="words", lm_alpha=0.8, lm_beta=1.0)
    assert (spec.lm_mode, spec.lm_alpha, spec.lm_beta) == ("words", 0.8, 1.0)


def test_evaluation_decoder_follows_the_spec(tmp_path, lm):
    lm.save(language_model_path(tmp_path))
    decoder = evaluation_decoder(EvalSpec(decoder="word_beam", beam_width=8), tmp_path, ["train"], workers=1)
    assert one(decoder, peaked("the  cco__ooll  ccatt")) == "the cool cat"
    assert isinstance(evaluation_decoder(EvalSpec(), tmp_path, ["train"]).decode, object)


def test_unknown_decoders_and_missing_language_models_are_refused():
    with pytest.raises(ValueError, match="unknown decoder"):
        make_decoder("viterbi", 4)
    with pytest.raises(ValueError, match="language model"):
        make_decoder("word_beam", 4)


def test_background_decoding_returns_batches_in_order(lm):
    decoding = BackgroundDecoding(word_beam(lm))
    decoding.submit(peaked("the  ccatt")[None], np.asarray([10]))
    decoding.submit(peaked("a bbigg")[None], np.asarray([7]))
    assert decoding.results() == ["the cat", "a big"]


# --- benchbase decode-sweep ---------------------------------------------------------------


def test_decode_sweep_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    from benchbase.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["decode-sweep", str(tmp_path), "--beams", "4"])
    assert exit_.value.code == 2
    assert "not a run folder" in capsys.readouterr().err


def test_decode_sweep_refuses_a_run_without_a_checkpoint(tmp_path):
    from benchbase.errors import InputError
    from benchbase.harness.replay import newest_checkpoint

    with pytest.raises(InputError, match="no checkpoint"):
        newest_checkpoint(tmp_path)


def test_decode_sweep_shows_each_beam_width_as_it_is_done(registry, tmp_path):
    import io

    from rich.console import Console

    from benchbase.cli.decode_commands import sweep_row
    from benchbase.cli.reporter import DecodeSweepReporter
    from benchbase.harness.replay import DevOutputs
    from benchbase.specs import RunConfig

    config = RunConfig(workload=registry.workload("ds2-mini"), backend="torch", hardware=registry.profile("cpu"),
                       out=tmp_path / "run", data=tmp_path / "store")
    batch = (np.stack([peaked("the cat"), peaked("a bbigg")]), np.asarray([7, 7]))
    outputs = DevOutputs(batches=[batch, batch, batch], references=["the cat", "a big"] * 3)
    shown = io.StringIO()
    decoded: list[int] = []
    with DecodeSweepReporter(Console(file=shown, width=120)) as reporter:
        reporter.predicting("dev-clean", "final.ckpt")
        reporter.decoding("run: beam on 6 dev-clean utterances")
        for width in (1, 4):
            reporter.width_started(width, len(outputs.batches))
            row = sweep_row(config, tmp_path, "beam", width, outputs, lambda width=width: decoded.append(width))
            assert shown.getvalue().count("beam width") == (width > 1)  # each row printed when it is done
            reporter.width_finished(row)
    assert decoded == [1, 1, 1, 4, 4, 4]  # progress after every batch
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("beam width 1, seconds ") and lines[0].endswith(", WER % 0.00, CER % 0.00, "
                                                                               "CER/ref % 0.00")
    assert lines[1].startswith("beam width 4, seconds ")
    assert "run: beam on 6 dev-clean utterances" in shown.getvalue()  # and the whole table at the end


def test_the_beam_keeps_no_candidate_more_than_beam_prune_below_the_best():
    # pyctcdecode's beam_prune_logp: on peaked posteriors a full beam is mostly prefixes
    # e^-12 times less likely than the best; they are dropped even where the beam has room.
    from benchbase.decode._search import Search, _best

    scores = np.array([-3.0, -14.0, -16.0, -np.inf, -3.5])
    chosen = np.zeros(5, np.int64)
    assert list(chosen[: _best(scores.copy(), 4, chosen, 12.0)]) == [0, 1, 4]
    assert list(chosen[: _best(scores.copy(), 4, chosen, np.inf)]) == [0, 1, 2, 4]
    assert Search(16, 0, 1, 0, 0.0, 0.0).beam_prune == 12.0
