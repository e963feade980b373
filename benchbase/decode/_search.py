"""The CTC prefix search kernel behind beam search and word beam search (numba, log space).

Every score is a natural-log probability, so a long utterance with flat posteriors (an early
checkpoint) stays in range; the reference word beam search multiplies linear probabilities,
which underflow to zero after a few hundred frames, and then every beam ties.

Prefixes are nodes of a tree that grows as the search runs: a node is made once per
(parent, label) and found again through an open-addressing hash table, so two beams with the
same labels are always the same node and merge. A frame turns the beams into a (beam,
symbol) grid of candidates: the blank column holds "keep the prefix", the others "append
this label". Kernels are compiled without the GIL, so threads decode utterances in parallel.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["PLAIN", "BIGRAMS", "WORDS", "Lexicon", "Search", "plain_lexicon", "search"]

NEG_INF = -np.inf
PLAIN, WORDS, BIGRAMS = 0, 1, 2
"""Modes: no dictionary; dictionary with unigram scores; dictionary with bigram scores."""


class Lexicon(NamedTuple):
    """PrefixTree and LanguageModel arrays, as the kernel reads them."""

    children: np.ndarray
    word_at: np.ndarray
    best_word: np.ndarray
    best_log_prob: np.ndarray
    unigram: np.ndarray
    starts: np.ndarray
    successors: np.ndarray
    seen: np.ndarray
    backoff: np.ndarray


class Search(NamedTuple):
    """Settings of one search."""

    beam_width: int
    blank: int
    space: int
    mode: int
    alpha: float
    beta: float
    token_prune: float = 12.0
    """Labels more than this many nats below a frame's best are never appended: they cannot
    win, and skipping them is most of the speed (pyctcdecode's token_min_logp does the same)."""


def plain_lexicon() -> Lexicon:
    """Placeholder arrays for a search without a dictionary."""
    return Lexicon(np.zeros((1, 1), np.int32), np.full(1, -1, np.int32), np.full(1, -1, np.int32), np.zeros(1),
                   np.zeros(1), np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0), np.zeros(1))


class _Nodes(NamedTuple):
    parent: np.ndarray
    label: np.ndarray
    tree: np.ndarray
    """The dictionary node reached inside the current word (0: between words)."""
    context: np.ndarray
    """The last complete word (-1: none yet)."""
    lm: np.ndarray
    """Log-probability of the complete words."""
    words: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    count: np.ndarray


def _nodes(capacity: int) -> _Nodes:
    slots = 1 << int(2 * capacity).bit_length()
    nodes = _Nodes(np.full(capacity, -1, np.int32), np.full(capacity, -1, np.int32), np.zeros(capacity, np.int32),
                   np.full(capacity, -1, np.int32), np.zeros(capacity), np.zeros(capacity, np.int32),
                   np.full(slots, -1, np.int64), np.zeros(slots, np.int32), np.ones(1, np.int64))
    return nodes


def search(log_probs: np.ndarray, settings: Search, lexicon: Lexicon) -> tuple[np.ndarray, int]:
    """(frames, symbols) log-probabilities -> the best prefix's labels and the word that
    completes its cut-off last word (-1: none needed)."""
    frames = len(log_probs)
    nodes = _nodes(1 + frames * settings.beam_width)
    return _search(np.ascontiguousarray(log_probs, dtype=np.float32), settings, lexicon, nodes)


@numba.njit(cache=True, nogil=True, inline="always")
def _log_add(a, b):
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a > b:
        return a + np.log1p(np.exp(b - a))
    return b + np.log1p(np.exp(a - b))


# --- the tree of prefixes -----------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _slot(keys, key):
    mask = len(keys) - 1
    slot = (key * 2654435761 + (key >> 13)) & mask
    while keys[slot] != key and keys[slot] != -1:
        slot = (slot + 1) & mask
    return slot


@numba.njit(cache=True, nogil=True, inline="always")
def _find(nodes, parent, label, symbols):
    slot = _slot(nodes.keys, np.int64(parent) * symbols + label)
    return nodes.values[slot] if nodes.keys[slot] != -1 else -1


@numba.njit(cache=True, nogil=True)
def _child(nodes, parent, label, symbols, settings, lexicon):
    """The node of parent + label, made on first use with its dictionary and LM state."""
    key = np.int64(parent) * symbols + label
    slot = _slot(nodes.keys, key)
    if nodes.keys[slot] != -1:
        return nodes.values[slot]
    node = nodes.count[0]
    nodes.count[0] += 1
    nodes.keys[slot], nodes.values[slot] = key, node
    nodes.parent[node], nodes.label[node] = parent, label
    nodes.tree[node], nodes.context[node] = nodes.tree[parent], nodes.context[parent]
    nodes.lm[node], nodes.words[node] = nodes.lm[parent], nodes.words[parent]
    if settings.mode != PLAIN:
        if label == settings.space:
            word = lexicon.word_at[nodes.tree[parent]]
            nodes.lm[node] += _word_log_prob(nodes.context[parent], word, settings, lexicon)
            nodes.words[node] += 1
            nodes.tree[node], nodes.context[node] = 0, word
        else:
            nodes.tree[node] = lexicon.children[nodes.tree[parent], label]
    return node


# --- the language model -------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _word_log_prob(context, word, settings, lexicon):
    """log P(word | context); context -1 is the sentence start, word V the sentence end."""
    if settings.mode != BIGRAMS:
        return lexicon.unigram[word]
    row = context if context >= 0 else len(lexicon.backoff) - 1
    low, high = lexicon.starts[row], lexicon.starts[row + 1]
    at = low + np.searchsorted(lexicon.successors[low:high], word)
    if at < high and lexicon.successors[at] == word:
        return lexicon.seen[at]
    return lexicon.backoff[row] + lexicon.unigram[word]


@numba.njit(cache=True, nogil=True, inline="always")
def _bonus(tree_node, lm, words, settings, lexicon):
    """The language model's share of a prefix's score (shallow fusion). A partial word counts
    with its best completion as a look-ahead, so that partial and complete words compete fairly."""
    if settings.mode == PLAIN:
        return 0.0
    if tree_node == 0:
        return settings.alpha * lm + settings.beta * words
    return settings.alpha * (lm + lexicon.best_log_prob[tree_node]) + settings.beta * (words + 1)


@numba.njit(cache=True, nogil=True, inline="always")
def _extension_bonus(nodes, node, label, settings, lexicon):
    """The bonus of node + label, or -inf where the dictionary forbids the label."""
    if settings.mode == PLAIN:
        return 0.0
    tree = nodes.tree[node]
    if label == settings.space:
        word = lexicon.word_at[tree]
        if tree == 0 or word < 0:
            return NEG_INF
        lm = nodes.lm[node] + _word_log_prob(nodes.context[node], word, settings, lexicon)
        return _bonus(0, lm, nodes.words[node] + 1, settings, lexicon)
    child = lexicon.children[tree, label]
    if child < 0:
        return NEG_INF
    return _bonus(child, nodes.lm[node], nodes.words[node], settings, lexicon)


@numba.njit(cache=True, nogil=True, inline="always")
def _bonus_ceiling(nodes, node, settings, lexicon):
    """An upper bound of any extension's bonus: a new word may add beta, and a space may swap
    the look-ahead for the word's own probability (at most 0)."""
    if settings.mode == PLAIN:
        return 0.0
    tree = nodes.tree[node]
    ceiling = _bonus(tree, nodes.lm[node], nodes.words[node], settings, lexicon) + max(settings.beta, 0.0)
    if tree != 0 and lexicon.word_at[tree] >= 0:
        ceiling -= settings.alpha * lexicon.best_log_prob[tree]
    return ceiling


# --- one frame ----------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _keep(frame, beams, pb, pnb, count, nodes, blank, keep_pb, grow):
    """Blank column: the prefix stays, through a blank or a repeat of its last label."""
    for b in range(count):
        total = _log_add(pb[b], pnb[b])
        last = nodes.label[beams[b]]
        keep_pb[b] = total + frame[blank]
        grow[b, blank] = pnb[b] + frame[last] if last >= 0 else NEG_INF
        for s in range(grow.shape[1]):
            if s != blank:
                grow[b, s] = NEG_INF


@numba.njit(cache=True, nogil=True)
def _grow(frame, active, floor, beams, pb, pnb, count, nodes, settings, lexicon, beam_of, grow, bonus):
    """Other columns: append a label. A repeat needs a blank between (pb only); an extension
    that is already a beam adds its probability to that beam's blank column instead.

    With a full beam, the beams that stay already fill it at scores of at least ``floor``, so
    an extension below it can never be chosen; it is dropped before the costly lookup (and so
    is the sliver it would add to a beam it equals)."""
    symbols = grow.shape[1]
    bonus[:count] = NEG_INF
    for b in range(count):
        node, total = beams[b], _log_add(pb[b], pnb[b])
        reach = total + _bonus_ceiling(nodes, node, settings, lexicon)
        for s in active:
            if reach + frame[s] < floor:
                break  # ``active`` runs from the likeliest label down: no later one can reach
            extra = _extension_bonus(nodes, node, s, settings, lexicon)
            if extra == NEG_INF:
                continue
            value = (pb[b] if s == nodes.label[node] else total) + frame[s]
            if value + extra < floor:
                continue
            child = _find(nodes, node, s, symbols)
            if child >= 0 and beam_of[child] >= 0:
                merged = beam_of[child]
                grow[merged, settings.blank] = _log_add(grow[merged, settings.blank], value)
            else:
                grow[b, s], bonus[b, s] = value, extra


@numba.njit(cache=True, nogil=True)
def _floor(beams, count, width, nodes, settings, lexicon, keep_pb, grow):
    """The lowest score of a staying beam when the beam is full (else -inf)."""
    if count < width:
        return NEG_INF
    lowest = np.inf
    for b in range(count):
        node = beams[b]
        score = _log_add(keep_pb[b], grow[b, settings.blank]) + _bonus(
            nodes.tree[node], nodes.lm[node], nodes.words[node], settings, lexicon)
        lowest = min(lowest, score)
    return lowest


@numba.njit(cache=True, nogil=True)
def _scores(beams, count, nodes, settings, lexicon, keep_pb, grow, bonus, scores):
    symbols = grow.shape[1]
    for b in range(count):
        node = beams[b]
        for s in range(symbols):
            if s == settings.blank:
                scores[b * symbols + s] = _log_add(keep_pb[b], grow[b, s]) + _bonus(
                    nodes.tree[node], nodes.lm[node], nodes.words[node], settings, lexicon)
            elif bonus[b, s] == NEG_INF:
                scores[b * symbols + s] = NEG_INF
            else:
                scores[b * symbols + s] = grow[b, s] + bonus[b, s]


@numba.njit(cache=True, nogil=True)
def _best(scores, width):
    """Indices of the `width` best finite scores, in index order; ties go to the lower index."""
    finite = 0
    for value in scores:
        finite += value > NEG_INF
    if finite <= width:
        return np.nonzero(scores > NEG_INF)[0]
    threshold = np.partition(scores, len(scores) - width)[len(scores) - width]
    above = 0
    for value in scores:
        above += value > threshold
    ties = width - above
    chosen = np.empty(width, np.int64)
    taken = 0
    for i in range(len(scores)):
        if scores[i] > threshold or (scores[i] == threshold and ties > 0):
            if scores[i] == threshold:
                ties -= 1
            chosen[taken] = i
            taken += 1
    return chosen


@numba.njit(cache=True, nogil=True)
def _search(log_probs, settings, lexicon, nodes):
    symbols, width = log_probs.shape[1], settings.beam_width
    beams, pb, pnb = np.zeros(width, np.int32), np.full(width, NEG_INF), np.full(width, NEG_INF)
    pb[0], count = 0.0, 1
    beam_of = np.full(len(nodes.parent), -1, np.int32)
    beam_of[0] = 0
    keep_pb, grow = np.empty(width), np.empty((width, symbols))
    bonus, scores = np.empty((width, symbols)), np.empty(width * symbols)
    for t in range(len(log_probs)):
        frame = log_probs[t].astype(np.float64)
        _keep(frame, beams, pb, pnb, count, nodes, settings.blank, keep_pb, grow)
        order = np.argsort(-frame)
        active = order[(frame[order] >= frame.max() - settings.token_prune) & (order != settings.blank)]
        floor = _floor(beams, count, width, nodes, settings, lexicon, keep_pb, grow)
        _grow(frame, active, floor, beams, pb, pnb, count, nodes, settings, lexicon, beam_of, grow, bonus)
        _scores(beams, count, nodes, settings, lexicon, keep_pb, grow, bonus, scores[: count * symbols])
        chosen = _best(scores[: count * symbols], width)
        old = beams[:count].copy()
        for b in range(count):
            beam_of[old[b]] = -1
        for i in range(len(chosen)):
            b, s = chosen[i] // symbols, chosen[i] % symbols
            if s == settings.blank:
                beams[i], pb[i], pnb[i] = old[b], keep_pb[b], grow[b, s]
            else:
                beams[i] = _child(nodes, old[b], s, symbols, settings, lexicon)
                pb[i], pnb[i] = NEG_INF, grow[b, s]
            beam_of[beams[i]] = i
        count = len(chosen)
    return _finish(beams, pb, pnb, count, nodes, settings, lexicon)


@numba.njit(cache=True, nogil=True)
def _finish(beams, pb, pnb, count, nodes, settings, lexicon):
    """The best beam once a cut-off last word is completed with its best dictionary word
    (and, with bigrams, the sentence end is scored)."""
    best, best_score, best_completion = 0, NEG_INF, -1
    for b in range(count):
        node = beams[b]
        lm, words, context, completion = nodes.lm[node], nodes.words[node], nodes.context[node], -1
        if settings.mode != PLAIN and nodes.tree[node] != 0:
            word = lexicon.word_at[nodes.tree[node]]
            completion = lexicon.best_word[nodes.tree[node]] if word < 0 else -1
            context = word if word >= 0 else completion
            lm, words = lm + _word_log_prob(nodes.context[node], context, settings, lexicon), words + 1
        if settings.mode == BIGRAMS:
            lm += _word_log_prob(context, len(lexicon.unigram) - 1, settings, lexicon)
        score = _log_add(pb[b], pnb[b]) + _bonus(0, lm, words, settings, lexicon)
        if score > best_score:
            best, best_score, best_completion = b, score, completion
    return _labels(nodes, beams[best]), best_completion


@numba.njit(cache=True, nogil=True)
def _labels(nodes, node):
    length, walk = 0, node
    while nodes.parent[walk] >= 0:
        length, walk = length + 1, nodes.parent[walk]
    labels = np.empty(length, np.int32)
    for i in range(length - 1, -1, -1):
        labels[i], node = nodes.label[node], nodes.parent[node]
    return labels
