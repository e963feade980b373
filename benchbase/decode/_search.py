"""The CTC prefix search kernel behind beam search and word beam search (numba, log space).

Every score is a natural-log probability, so a long utterance with flat posteriors (an early
checkpoint) stays in range; the reference word beam search multiplies linear probabilities,
which underflow to zero after a few hundred frames, and then every beam ties.

Prefixes are nodes of a tree that grows as the search runs: a node is made once per
(parent, label) and found again through an open-addressing hash table, so two beams with the
same labels are always the same node and merge. A frame turns the beams into candidates:
each beam "keeps its prefix" (through a blank or a repeat), and may "append a label". Only the
candidates that can still win are listed, in (beam, label) order, which is the order of the
full (beam, symbol) grid they stand for; ties are broken by that order. Every buffer is made
once per utterance, so a frame allocates nothing, and kernels are compiled without the GIL,
so threads decode utterances in parallel.
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
    beam_prune: float = 12.0
    """Candidates more than this many nats below the frame's best candidate are not kept, even
    when the beam has room (pyctcdecode's beam_prune_logp, 10 by default): on peaked posteriors
    most of a full beam is prefixes e^-12 times less likely than the best, which cost a beam's
    work at every later frame and almost never come back to win."""


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
    bonus: np.ndarray
    """The language model's share of the node's score: fixed once the node is made, so it is
    worked out then, not on each of the many frames that the node stays a beam."""
    ceiling: np.ndarray
    """An upper bound of the bonus of any extension of the node."""
    space_bonus: np.ndarray
    """The bonus of the node + a space (a bigram lookup), or -inf where no word ends."""
    keys: np.ndarray
    values: np.ndarray
    count: np.ndarray


def _nodes(capacity: int) -> _Nodes:
    slots = 1 << int(2 * capacity).bit_length()
    nodes = _Nodes(np.full(capacity, -1, np.int32), np.full(capacity, -1, np.int32), np.zeros(capacity, np.int32),
                   np.full(capacity, -1, np.int32), np.zeros(capacity), np.zeros(capacity, np.int32),
                   np.zeros(capacity), np.zeros(capacity), np.zeros(capacity),
                   np.full(slots, -1, np.int64), np.zeros(slots, np.int32), np.ones(1, np.int64))
    return nodes


class _Beams(NamedTuple):
    node: np.ndarray
    pb: np.ndarray
    """Log-probability of the prefix's paths that end in a blank..."""
    pnb: np.ndarray
    """... and of those that end in its last label."""


class _Work(NamedTuple):
    """One utterance's scratch buffers, reused by every frame."""

    probs: np.ndarray
    active: np.ndarray
    """The labels worth appending this frame, likeliest first."""
    keep_pb: np.ndarray
    keep_pnb: np.ndarray
    keep_score: np.ndarray
    """Per beam: its prefix staying (pb, pnb and score)."""
    merged: np.ndarray
    """Per beam: whether an extension of another beam added to its keep_pnb."""
    keep_at: np.ndarray
    """Per beam: where its staying candidate is in the list."""
    beam_children: np.ndarray
    """Per beam: a bit mask of the labels whose child prefix is itself a beam."""
    beam_of: np.ndarray
    """Per node: its beam, or -1."""
    key: np.ndarray
    score: np.ndarray
    pnb: np.ndarray
    """The candidate list: beam * symbols + label (the blank: stay), score, pnb of an extension."""
    chosen: np.ndarray


MAX_SYMBOLS = 63
"""Labels are bits of an int64 mask."""


def _work(width: int, symbols: int, capacity: int) -> _Work:
    per_beam = [np.empty(width) for _ in range(3)]
    candidates = width * symbols
    return _Work(np.empty(symbols), np.empty(symbols, np.int64), *per_beam, np.zeros(width, np.bool_),
                 np.empty(width, np.int64), np.zeros(width, np.int64), np.full(capacity, -1, np.int32),
                 np.empty(candidates, np.int64), np.empty(candidates), np.empty(candidates),
                 np.empty(width, np.int64))


def _beams(width: int) -> _Beams:
    return _Beams(np.zeros(width, np.int32), np.full(width, NEG_INF), np.full(width, NEG_INF))


def search(log_probs: np.ndarray, settings: Search, lexicon: Lexicon) -> tuple[np.ndarray, int]:
    """(frames, symbols) log-probabilities -> the best prefix's labels and the word that
    completes its cut-off last word (-1: none needed)."""
    frames, symbols = log_probs.shape
    if symbols > MAX_SYMBOLS:
        raise ValueError(f"at most {MAX_SYMBOLS} symbols, got {symbols}")
    width = settings.beam_width
    capacity = 1 + frames * width
    return _search(np.ascontiguousarray(log_probs, dtype=np.float32), settings, lexicon, _nodes(capacity),
                   _work(width, symbols, capacity), _beams(width), _beams(width))


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
    _set_bonuses(nodes, node, settings, lexicon)
    return node


@numba.njit(cache=True, nogil=True)
def _set_bonuses(nodes, node, settings, lexicon):
    nodes.bonus[node] = _bonus(nodes.tree[node], nodes.lm[node], nodes.words[node], settings, lexicon)
    nodes.ceiling[node] = _bonus_ceiling(nodes, node, settings, lexicon)
    nodes.space_bonus[node] = _extension_bonus(nodes, node, settings.space, settings, lexicon)


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
    return _partial_word_bonus(lexicon.best_log_prob[tree_node], lm, words, settings)


@numba.njit(cache=True, nogil=True, inline="always")
def _partial_word_bonus(look_ahead, lm, words, settings):
    return settings.alpha * (lm + look_ahead) + settings.beta * (words + 1)


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
def _step(row, beams, count, nodes, settings, lexicon, work, into):
    """One frame: the beams' candidates, listed, the best kept in ``into``; returns their count."""
    active = work.active[: _load_frame(row, settings, work)]
    floor = _keep(beams, count, nodes, settings, work)
    # Below the best staying candidate's score minus beam_prune, a candidate is below the best
    # candidate's minus beam_prune too: it can be skipped before it is listed.
    floor = max(floor, np.max(work.keep_score[:count]) - settings.beam_prune) if count else floor
    _mark_beam_children(beams, count, nodes, work)
    listed = _list(beams, count, active, floor, nodes, settings, lexicon, work)
    _settle_merges(beams, count, nodes, work)
    chosen = _best(work.score[:listed], settings.beam_width, work.chosen, settings.beam_prune)
    _advance(beams, count, chosen, nodes, settings, lexicon, work, into)
    return chosen


@numba.njit(cache=True, nogil=True)
def _load_frame(row, settings, work):
    """The frame in float64, and the labels within token_prune of its best, likeliest first
    (an insertion sort: they are few). Returns how many labels are active."""
    probs, active = work.probs, work.active
    best = NEG_INF
    for s in range(len(row)):
        probs[s] = row[s]
        best = max(best, probs[s])
    count = 0
    for s in range(len(row)):
        if s == settings.blank or probs[s] < best - settings.token_prune:
            continue
        at = count
        while at > 0 and probs[active[at - 1]] < probs[s]:
            active[at] = active[at - 1]
            at -= 1
        active[at] = s
        count += 1
    return count


@numba.njit(cache=True, nogil=True)
def _keep(beams, count, nodes, settings, work):
    """Each prefix staying, through a blank or a repeat of its last label. Returns the floor:
    the lowest staying score when the beam is full (else -inf). The staying beams alone then
    fill the beam at scores of at least the floor, so a candidate below it can never be chosen."""
    # Arrays are taken out of their tuples before the loop: each take costs two atomic
    # reference counts, which were most of the time of a frame.
    probs, lowest, label, bonus = work.probs, np.inf, nodes.label, nodes.bonus
    node, pb, pnb = beams.node, beams.pb, beams.pnb
    keep_pb, keep_pnb, keep_score = work.keep_pb, work.keep_pnb, work.keep_score
    for b in range(count):
        last = label[node[b]]
        keep_pb[b] = _log_add(pb[b], pnb[b]) + probs[settings.blank]
        keep_pnb[b] = pnb[b] + probs[last] if last >= 0 else NEG_INF
        keep_score[b] = _log_add(keep_pb[b], keep_pnb[b]) + bonus[node[b]]
        lowest = min(lowest, keep_score[b])
    work.merged[:count] = False
    return lowest if count >= settings.beam_width else NEG_INF


@numba.njit(cache=True, nogil=True)
def _mark_beam_children(beams, count, nodes, work):
    """Which extensions are already beams (they merge into that beam instead of competing),
    so that the hash table is only asked about those."""
    beam_children, beam_of, node = work.beam_children, work.beam_of, beams.node
    parents, label = nodes.parent, nodes.label
    beam_children[:count] = 0
    for c in range(count):
        parent = parents[node[c]]
        if parent >= 0 and beam_of[parent] >= 0:
            beam_children[beam_of[parent]] |= np.int64(1) << label[node[c]]


@numba.njit(cache=True, nogil=True)
def _list(beams, count, active, floor, nodes, settings, lexicon, work):
    """Every beam's staying candidate and its extensions that reach the floor, in (beam,
    label) order; returns how many."""
    symbols, listed, key, keep_at = len(work.probs), 0, work.key, work.keep_at
    for b in range(count):
        start, stay = listed, b * symbols + settings.blank
        listed = _insert(key, work.score, work.pnb, start, listed, stay, work.keep_score[b], NEG_INF)
        listed = _extend(beams, b, active, floor, start, listed, nodes, settings, lexicon, work)
        for i in range(start, listed):
            if key[i] == stay:
                keep_at[b] = i
    return listed


@numba.njit(cache=True, nogil=True)
def _extend(beams, b, active, floor, start, listed, nodes, settings, lexicon, work):
    """Beam b + each active label. A repeat needs a blank between (pb only); an extension that
    is already a beam adds its probability to that beam's staying pnb instead. An extension
    below the floor is dropped before the lookups (and so is the sliver it would add to a
    beam it equals)."""
    # Arrays are taken out of their tuples before the loop (see _keep).
    symbols, probs, node = len(work.probs), work.probs, beams.node[b]
    key, score, pnb, children, look_ahead = work.key, work.score, work.pnb, lexicon.children, lexicon.best_log_prob
    pb, total = beams.pb[b], _log_add(beams.pb[b], beams.pnb[b])
    reach, last, mergeable = total + nodes.ceiling[node], nodes.label[node], work.beam_children[b]
    tree, lm, words, space_bonus = nodes.tree[node], nodes.lm[node], nodes.words[node], nodes.space_bonus[node]
    for s in active:
        if reach + probs[s] < floor:
            break  # ``active`` runs from the likeliest label down: no later one can reach
        if settings.mode == PLAIN:
            extra = 0.0
        elif s == settings.space:
            extra = space_bonus
        elif children[tree, s] >= 0:
            extra = _partial_word_bonus(look_ahead[children[tree, s]], lm, words, settings)
        else:
            continue  # no dictionary word goes on with s
        if extra == NEG_INF:
            continue
        value = (pb if s == last else total) + probs[s]
        if value + extra < floor:
            continue
        if mergeable >> s & 1:
            _merge(work.beam_of[_find(nodes, node, s, symbols)], value, work)
        else:
            listed = _insert(key, score, pnb, start, listed, b * symbols + s, value + extra, value)
    return listed


@numba.njit(cache=True, nogil=True)
def _merge(target, value, work):
    work.keep_pnb[target] = _log_add(work.keep_pnb[target], value)
    work.merged[target] = True


@numba.njit(cache=True, nogil=True, inline="always")
def _insert(keys, scores, pnbs, start, listed, key, score, pnb):
    """Append to the list, kept in key order from ``start`` (one beam's few candidates)."""
    at = listed
    while at > start and keys[at - 1] > key:
        keys[at], scores[at], pnbs[at] = keys[at - 1], scores[at - 1], pnbs[at - 1]
        at -= 1
    keys[at], scores[at], pnbs[at] = key, score, pnb
    return listed + 1


@numba.njit(cache=True, nogil=True)
def _settle_merges(beams, count, nodes, work):
    """The staying score of the beams that extensions merged into, now that all are in."""
    merged, score, keep_at, keep_pb, keep_pnb = work.merged, work.score, work.keep_at, work.keep_pb, work.keep_pnb
    for b in range(count):
        if merged[b]:
            score[keep_at[b]] = _log_add(keep_pb[b], keep_pnb[b]) + nodes.bonus[beams.node[b]]


@numba.njit(cache=True, nogil=True)
def _best(scores, width, chosen, prune):
    """Puts the indices of the `width` best finite scores within ``prune`` of the best in
    ``chosen``, in index order (ties go to the lower index); returns how many."""
    lowest = np.max(scores) - prune if len(scores) else NEG_INF
    for i in range(len(scores)):
        if scores[i] < lowest:
            scores[i] = NEG_INF
    finite = 0
    for value in scores:
        finite += value > NEG_INF
    if finite <= width:
        taken = 0
        for i in range(len(scores)):
            if scores[i] > NEG_INF:
                chosen[taken] = i
                taken += 1
        return taken
    threshold = np.partition(scores, len(scores) - width)[len(scores) - width]
    above = 0
    for value in scores:
        above += value > threshold
    ties, taken = width - above, 0
    for i in range(len(scores)):
        if scores[i] > threshold or (scores[i] == threshold and ties > 0):
            if scores[i] == threshold:
                ties -= 1
            chosen[taken] = i
            taken += 1
    return taken


@numba.njit(cache=True, nogil=True)
def _advance(beams, count, chosen, nodes, settings, lexicon, work, into):
    """The chosen candidates become the beams in ``into``, new prefixes made as nodes."""
    symbols, beam_of, node, key = len(work.probs), work.beam_of, beams.node, work.key
    new_node, new_pb, new_pnb = into.node, into.pb, into.pnb
    for b in range(count):
        beam_of[node[b]] = -1
    for i in range(chosen):
        at = work.chosen[i]
        b, s = key[at] // symbols, key[at] % symbols
        if s == settings.blank:
            new_node[i], new_pb[i], new_pnb[i] = node[b], work.keep_pb[b], work.keep_pnb[b]
        else:
            new_node[i] = _child(nodes, node[b], s, symbols, settings, lexicon)
            new_pb[i], new_pnb[i] = NEG_INF, work.pnb[at]
        beam_of[new_node[i]] = i


@numba.njit(cache=True, nogil=True)
def _search(log_probs, settings, lexicon, nodes, work, beams, spare):
    _set_bonuses(nodes, 0, settings, lexicon)
    beams.pb[0], count = 0.0, 1
    work.beam_of[0] = 0
    for t in range(len(log_probs)):
        count = _step(log_probs[t], beams, count, nodes, settings, lexicon, work, spare)
        beams, spare = spare, beams
    return _finish(beams.node, beams.pb, beams.pnb, count, nodes, settings, lexicon)


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
