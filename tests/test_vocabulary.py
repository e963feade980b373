"""Vocabularies: characters, and sentencepiece pieces trained at prepare time and owned by the store."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cli_helpers import run_benchbase
from pydantic import ValidationError

from benchbase.data.librispeech import list_subset
from benchbase.data.prepare import prepare_store, prepare_workload_store
from benchbase.data.store import FeatureStore
from benchbase.data.vocabulary import (
    VOCABULARY_FILE,
    CharacterVocabulary,
    PieceVocabulary,
    ctc_path_length,
    train_pieces,
    vocabulary_for,
)
from benchbase.decode import make_decoder
from benchbase.errors import InputError
from benchbase.specs.vocabulary import SentencePieceSpec

PIECES = SentencePieceSpec(kind="sentencepiece", size=63)
PIECES_SET = "workload.data.tokens={kind: sentencepiece, size: 63}"


@pytest.fixture(scope="module")
def transcripts(small_corpus):
    sources = list_subset(small_corpus, "train").utterances
    return [source.transcript for source in sources]


@pytest.fixture(scope="module")
def pieces_workload(mini_workload):
    data = mini_workload.data.model_copy(update={"tokens": PIECES})
    return mini_workload.model_copy(update={"data": data, "model": mini_workload.model.model_copy(
        update={"symbols": PIECES.symbols})})


@pytest.fixture(scope="module")
def pieces_store(tmp_path_factory, small_corpus, pieces_workload):
    out = tmp_path_factory.mktemp("pieces") / "store"
    prepare_workload_store(small_corpus, pieces_workload, out, workers=1)
    return out


def test_pieces_are_trained_byte_for_byte_the_same_and_spell_the_transcripts(transcripts):
    model = train_pieces(transcripts, PIECES)
    assert train_pieces(transcripts, PIECES) == model
    assert train_pieces(transcripts, PIECES.model_copy(update={"model_type": "bpe"})) != model
    vocabulary = PieceVocabulary(model)
    assert vocabulary.symbols == 64 == PIECES.symbols
    for transcript in transcripts[:50]:
        labels = vocabulary.encode(transcript)
        assert labels.dtype == np.int32 and labels.min() >= 1 and labels.max() < 64  # never the blank
        assert vocabulary.decode(labels) == " ".join(transcript.lower().split())
    # Pieces are fewer labels than characters: what makes CTC feasible at a coarser frame rate.
    characters = CharacterVocabulary()
    pieces = sum(len(vocabulary.encode(t)) for t in transcripts)
    assert pieces < 0.8 * sum(len(characters.encode(t)) for t in transcripts)


def test_too_many_pieces_names_the_largest_size_that_works_and_bpe(transcripts):
    """sentencepiece's limit counts the blank; the message counts pieces, as the workload's size does."""
    with pytest.raises(InputError) as raised:
        train_pieces(transcripts, PIECES.model_copy(update={"size": 5000}))
    message = str(raised.value)
    largest = int(re.search(r"workload\.data\.tokens\.size <= (\d+)\)", message).group(1))
    assert message.startswith(f"sentencepiece cannot make 5000 unigram pieces from {len(transcripts)} training "
                              f"transcripts: they make at most {largest} ")
    assert "model_type=bpe" in message and "\n" not in message
    made = train_pieces(transcripts, PIECES.model_copy(update={"size": largest}))
    assert PieceVocabulary(made).symbols == largest + 1
    with pytest.raises(InputError):
        train_pieces(transcripts, PIECES.model_copy(update={"size": largest + 1}))
    bpe = PIECES.model_copy(update={"size": largest + 1, "model_type": "bpe"})
    assert PieceVocabulary(train_pieces(transcripts, bpe)).symbols == largest + 2  # what the message promises


def test_a_preparation_that_failed_before_any_shard_can_be_retried_into_its_folder(tmp_path, small_corpus,
                                                                                 mini_workload):
    out = tmp_path / "store"
    arguments = (small_corpus, {"train": ("dev-clean",)}, mini_workload.features, mini_workload.model, 16.7, out)
    with pytest.raises(InputError, match="sentencepiece cannot make 5000"):
        prepare_store(*arguments, workers=1, tokens=PIECES.model_copy(update={"size": 5000}))
    assert (out / "prepare.json").is_file()  # what the failed attempt left
    description = prepare_store(*arguments, workers=1, tokens=PIECES.model_copy(update={"size": 40}))
    assert description["vocabulary"]["size"] == 40
    with pytest.raises(InputError, match="already holds features of another corpus or other settings"):
        prepare_store(*arguments, workers=1, tokens=PIECES.model_copy(update={"size": 41}))  # features now


def test_ctc_needs_a_blank_between_equal_neighbours():
    assert ctc_path_length(np.array([3, 3, 4, 3])) == 5
    assert ctc_path_length(np.array([], dtype=np.int32)) == 0
    assert ctc_path_length(CharacterVocabulary().encode("cool bee")) == len("co_ol be_e")  # the separator


def test_a_store_of_pieces_records_its_vocabulary_and_labels(pieces_store):
    store = FeatureStore(pieces_store)
    model = (pieces_store / VOCABULARY_FILE).read_bytes()
    assert store.tokens["kind"] == "sentencepiece" and store.tokens["size"] == 63 and store.tokens["symbols"] == 64
    vocabulary = vocabulary_for(PIECES, pieces_store)
    for utterance in store.read(store.shards(["dev-clean"])[0])[:10]:
        assert vocabulary.decode(utterance.labels) == " ".join(utterance.transcript.split())
    assert PieceVocabulary(model).symbols == 64


def test_preparing_again_gives_the_same_vocabulary_file(tmp_path, small_corpus, pieces_workload, pieces_store):
    again = tmp_path / "again"
    prepare_workload_store(small_corpus, pieces_workload, again, workers=1)
    assert (again / VOCABULARY_FILE).read_bytes() == (pieces_store / VOCABULARY_FILE).read_bytes()
    described = [json.loads((root / "store.json").read_text())["vocabulary"] for root in (again, pieces_store)]
    assert described[0] == described[1]


def test_a_tampered_vocabulary_fails_data_verify(tmp_path, pieces_store):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(pieces_store, copy)
    assert run_benchbase("data", "verify", str(copy)).returncode == 0
    model = bytearray((copy / VOCABULARY_FILE).read_bytes())
    model[-3] ^= 1
    (copy / VOCABULARY_FILE).write_bytes(bytes(model))
    verified = run_benchbase("data", "verify", str(copy))
    assert verified.returncode == 1
    assert f"{copy / VOCABULARY_FILE}: checksum mismatch" in verified.stdout


def test_a_workload_and_a_store_of_other_tokens_refuse_each_other(tmp_path, pieces_store, small_store):
    run = ["run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "cpu", "--max-epochs", "1"]
    on_pieces = run_benchbase(*run, "--data", str(pieces_store), "--out", str(tmp_path / "a"))
    on_characters = run_benchbase(*run, "--data", str(small_store), "--out", str(tmp_path / "b"), "--set", PIECES_SET,
                                  "--set", "workload.model.symbols=64")
    for refused in (on_pieces, on_characters):
        assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
        assert "labels prepared for other tokens: kind" in refused.stderr


def test_the_model_must_predict_the_vocabulary_and_pieces_decode_greedily(mini_workload, transcripts):
    data = mini_workload.model_dump()
    with pytest.raises(ValidationError, match="model.symbols is 30, but data.tokens .sentencepiece. has 64 symbols"):
        type(mini_workload).model_validate(data | {"data": data["data"] | {"tokens": PIECES.model_dump()}})
    pieces = data | {"data": data["data"] | {"tokens": PIECES.model_dump()}, "model": data["model"] | {"symbols": 64}}
    type(mini_workload).model_validate(pieces)
    with pytest.raises(ValidationError, match="evaluation decoder beam searches over characters"):
        type(mini_workload).model_validate(pieces | {"evaluation": data["evaluation"] | {"decoder": "beam"}})
    with pytest.raises(ValueError, match="the beam decoder searches over characters"):
        make_decoder("beam", 4, vocabulary=PieceVocabulary(train_pieces(transcripts, PIECES)))


def test_greedy_decoding_spells_pieces_as_words(pieces_store):
    """Log-probabilities that peak on an utterance's pieces (each repeat parted by a blank) decode to its words."""
    vocabulary = vocabulary_for(PIECES, pieces_store)
    decoder = make_decoder("greedy", vocabulary=vocabulary)
    store = FeatureStore(pieces_store)
    utterances = store.read(store.shards(["dev-clean"])[0])[:4]
    path_lengths = [2 * len(u.labels) + 1 for u in utterances]
    log_probs = np.full((len(utterances), max(path_lengths), vocabulary.symbols), -20.0, dtype=np.float32)
    log_probs[:, :, 0] = 0.0  # blank everywhere but on the labels
    for row, utterance in enumerate(utterances):
        for position, label in enumerate(utterance.labels):
            log_probs[row, 2 * position + 1, 0], log_probs[row, 2 * position + 1, label] = -20.0, 0.0
    decoded = decoder.decode(log_probs, np.array(path_lengths))
    assert decoded == [" ".join(u.transcript.split()) for u in utterances]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["ds2-mini", "rnnt-mini"])  # a CTC family and the transducer
def test_a_run_on_pieces_trains_logs_its_vocabulary_and_passes_check_and_verify(tmp_path, pieces_store, workload):
    out = tmp_path / "run"
    finished = run_benchbase("run", "--workload", workload, "--backend", "torch", "--hw", "cpu", "--data",
                             str(pieces_store), "--out", str(out), "--max-epochs", "2", "--set", PIECES_SET,
                             "--set", "workload.model.symbols=64", timeout=900)
    assert finished.returncode == 3, finished.stderr  # aborted at max epochs
    logged = [json.loads(line.split(" ", 1)[1]) for line in (out / "mllog.log").read_text().splitlines()
              if "benchbase_vocabulary" in line]
    model = (pieces_store / VOCABULARY_FILE).read_bytes()
    import hashlib

    assert [event["value"]["sha256"] for event in logged] == [hashlib.sha256(model).hexdigest()]
    config = json.loads((out / "config.json").read_text())
    assert config["workload"]["data"]["tokens"] == PIECES.model_dump()
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "eval"]
    assert losses[-1] < losses[0]
    for command in ("check", "verify"):
        checked = run_benchbase(command, str(out))
        assert checked.returncode == 0, checked.stdout + checked.stderr


def _prepare_with_vocabulary(corpus, out, vocabulary, *sets: str):
    return run_benchbase("data", "prepare", "--librispeech", str(corpus), "--workload", "ds2-mini", *sets,
                         "--vocabulary", str(vocabulary), "--out", str(out), "--workers", "1")


PIECES_SETS = ("--set", PIECES_SET, "--set", "workload.model.symbols=64")


def test_a_given_vocabulary_labels_the_store_and_is_recorded(tmp_path, small_corpus, transcripts, pieces_store):
    given = tmp_path / "given.model"
    given.write_bytes(train_pieces(transcripts, PIECES.model_copy(update={"model_type": "bpe"})))
    out = tmp_path / "store"
    prepared = _prepare_with_vocabulary(small_corpus, out, given, *PIECES_SETS)
    assert prepared.returncode == 0, prepared.stderr
    assert "vocabulary: 63 given pieces and the blank" in prepared.stdout
    assert (out / VOCABULARY_FILE).read_bytes() == given.read_bytes() != (pieces_store / VOCABULARY_FILE).read_bytes()
    recorded = json.loads((out / "store.json").read_text())["vocabulary"]
    assert recorded["given"] is True and recorded["size"] == 63 and recorded["symbols"] == 64
    expected = PieceVocabulary(given.read_bytes())
    store = FeatureStore(out)
    for utterance in (u for shard in store.shards(["train"]) for u in store.read(shard)):
        assert list(utterance.labels) == list(expected.encode(utterance.transcript))
    assert _prepare_with_vocabulary(small_corpus, out, given, *PIECES_SETS).returncode == 0  # resumes
    other = _prepare_with_vocabulary(small_corpus, out, pieces_store / VOCABULARY_FILE, *PIECES_SETS)
    assert other.returncode == 2 and other.stderr.strip().count("\n") == 0, other.stderr
    assert "(given_vocabulary_sha256 differ)" in other.stderr
    assert (out / VOCABULARY_FILE).read_bytes() == given.read_bytes()


def test_a_given_vocabulary_that_cannot_serve_is_refused_in_one_line(tmp_path, small_corpus, transcripts):
    smaller = tmp_path / "smaller.model"
    smaller.write_bytes(train_pieces(transcripts, PIECES.model_copy(update={"size": 40})))
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    cases = [(smaller, PIECES_SETS, f"{smaller}: 41 symbols, the workload's tokens have 64 (63 pieces and the blank)"),
             (text, PIECES_SETS, f"{text}: not a sentencepiece model"),
             (tmp_path / "missing.model", PIECES_SETS, f"--vocabulary {tmp_path / 'missing.model'}: cannot read it"),
             (smaller, (), "the workload's tokens are characters")]
    for number, (vocabulary, sets, message) in enumerate(cases):
        out = tmp_path / f"store-{number}"
        refused = _prepare_with_vocabulary(small_corpus, out, vocabulary, *sets)
        assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
        assert message in refused.stderr
        assert not out.exists()  # refused before anything is written
