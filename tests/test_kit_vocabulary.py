"""The conformance kit at a subword vocabulary's width: `benchbase backend-test --symbols N`.

The full rnnt and conformer workloads predict 1024 symbols (1023 sentencepiece pieces and the
blank). The kit proves a backend at that width on its own small model with N output symbols and
labels drawn from them, no sentencepiece model needed: the PyTorch backend passes every rule of
every family at 1024, and a backend that is right for the alphabet's 30 symbols only (an output
layer of the alphabet's width, labels kept in bytes) passes at 30 and fails a rule at 1024.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from cli_helpers import run_benchbase

from benchbase.errors import InputError
from benchbase.kit.conformance import run_conformance, select_rules
from benchbase.kit.data import load_kit_data
from benchbase.specs.vocabulary import CHARACTER_SYMBOLS

TorchBackend = pytest.importorskip("benchbase_torch_ds2.backend").TorchBackend

pytestmark = pytest.mark.numerics

FAMILIES = sorted(TorchBackend.capabilities.families)
"""The families the PyTorch backend declares: the kit proves each at a subword vocabulary's width."""
PIECES = 1024
"""The rnnt and conformer workloads' symbols: 1023 pieces and the blank."""


ON_EACH_FAMILY = [pytest.param(family, marks=pytest.mark.slow) if family == "rnnt" else family
                  for family in FAMILIES]
"""The kit's rules on each family: rnnt's float64 transducer loss over 1024 symbols, with its
rounding bound, takes the longest (over 20 s on 2 busy cores)."""


@pytest.mark.parametrize("family", FAMILIES)
def test_a_wide_kit_model_trains_on_labels_drawn_from_all_its_symbols(family):
    alphabet, wide = load_kit_data(family=family), load_kit_data(family=family, symbols=PIECES)
    assert alphabet.model.symbols == CHARACTER_SYMBOLS and wide.model.symbols == wide.spec_model.symbols == PIECES
    assert wide.model == alphabet.model.model_copy(update={"symbols": PIECES})
    blank = wide.model.blank_index
    for narrow, batch in zip((*alphabet.batches, alphabet.impossible_batch), (*wide.batches, wide.impossible_batch)):
        # The same utterances, lengths and alignability; only the labels' values are other.
        assert np.array_equal(batch.features, narrow.features)
        assert np.array_equal(batch.output_lengths, narrow.output_lengths)
        assert np.array_equal(batch.label_lengths, narrow.label_lengths)
        for row, length in enumerate(batch.label_lengths):
            labels = batch.labels[row, :length]
            assert ((labels >= 0) & (labels < PIECES) & (labels != blank)).all()
            assert (labels[1:] != labels[:-1]).all()  # as many output frames needed as the characters'
            assert (batch.labels[row, length:] == blank).all()
        assert narrow.labels.max() < CHARACTER_SYMBOLS
    drawn = np.concatenate([batch.labels[row, :length] for batch in wide.batches
                            for row, length in enumerate(batch.label_lengths)])
    assert (drawn >= CHARACTER_SYMBOLS).mean() > 0.9 and drawn.max() > PIECES - 64
    assert np.array_equal(load_kit_data(family=family, symbols=PIECES).batches[0].labels, wide.batches[0].labels)


def test_two_symbols_leave_one_label_and_every_row_still_aligns():
    narrowest, alphabet = load_kit_data(family="ds2", symbols=2), load_kit_data(family="ds2")
    batch = narrowest.batches[0]
    assert set(np.unique(batch.labels[batch.labels != 0])) == {1}
    for wide, narrow in zip(narrowest.batches, alphabet.batches):
        # Every label the same: CTC needs a blank between each two.
        assert (2 * wide.label_lengths - 1 <= wide.output_lengths).all()
        assert np.array_equal(wide.label_lengths, narrow.label_lengths)


@pytest.mark.parametrize("symbols", [1, PIECES + 1])
def test_symbols_outside_the_model_specs_bounds_are_refused(symbols):
    with pytest.raises(InputError, match=rf"the ds2 kit model cannot predict {symbols} symbols \(symbols: Input"):
        load_kit_data(family="ds2", symbols=symbols)


@pytest.mark.parametrize("family", ON_EACH_FAMILY)
def test_the_torch_backend_passes_every_rule_at_1024_symbols(family):
    data = load_kit_data(family=family, symbols=PIECES)
    results = run_conformance(TorchBackend, family=family, data=data, symbols=PIECES)
    assert [(r.name, r.message) for r in results if not r.passed] == []
    assert [r.name for r in results] == [rule.name for rule in select_rules(None, family)]


class OutputLayerOfTheAlphabet(TorchBackend):
    """Builds its network for the alphabet's 30 symbols, whatever the spec's symbols are (an output
    layer, and for a transducer the prediction network's embedding, sized from the characters)."""

    def build(self, context):
        alphabet = context.model.model_copy(update={"symbols": CHARACTER_SYMBOLS})
        super().build(dataclasses.replace(context, model=alphabet))


class LabelsAsBytes(TorchBackend):
    """Keeps the labels in bytes on their way to the loss (uint8, which holds any character's index;
    piece 256 becomes label 0, the blank, piece 300 label 44)."""

    def train_step(self, batch):
        return super().train_step(dataclasses.replace(batch, labels=batch.labels.astype(np.uint8).astype(np.int32)))


FAULTS = [(OutputLayerOfTheAlphabet, "parameter_count", "parameter_count() returned"),
          (LabelsAsBytes, "loss", "the reference's mean")]


@pytest.mark.parametrize(("family", "broken", "rule", "said"), [
    pytest.param(family, *fault, marks=[pytest.mark.slow] if (family, fault[1]) == ("rnnt", "loss") else [],
                 id=f"{family}-{fault[0].__name__}")
    for family in FAMILIES for fault in FAULTS])  # rnnt's loss: see ON_EACH_FAMILY
def test_a_backend_right_for_the_alphabet_only_fails_a_rule_at_1024_symbols(family, broken, rule, said):
    [at_alphabet] = run_conformance(broken, [rule], family=family, data=load_kit_data(family=family))
    assert at_alphabet.passed, at_alphabet.message
    [at_pieces] = run_conformance(broken, [rule], family=family, data=load_kit_data(family=family, symbols=PIECES))
    assert not at_pieces.passed and said in at_pieces.message, at_pieces.message


def test_the_command_says_the_symbols_and_refuses_bad_ones_in_one_line_with_exit_2():
    done = run_benchbase("backend-test", "torch", "--family", "ds2", "--symbols", str(PIECES), "--rule",
                         "parameter_count")
    assert done.returncode == 0, done.stderr
    assert f"PASS backend torch, ds2 family at {PIECES} symbols: 1/1 conformance rules pass" in " ".join(
        done.stdout.split())
    done = run_benchbase("backend-test", "torch", "--family", "ds2", "--rule", "parameter_count", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["symbols"] == {"ds2": CHARACTER_SYMBOLS}, done.stderr
    for symbols in ("1", str(PIECES + 1), "many"):
        done = run_benchbase("backend-test", "torch", "--symbols", symbols)
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
        assert "Invalid value for '--symbols'" in done.stderr, done.stderr
