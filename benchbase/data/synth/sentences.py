"""Transcripts for the synthetic corpus: a seeded English grammar, or lines from a text file.

The grammar is small on purpose (a few hundred words) so that a model trained on a few
thousand utterances sees every word several times; it still mixes in doubled letters and
contractions because those exercise the separator symbol and the apostrophe.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from benchbase.data.alphabet import UnknownCharacterError, normalize_transcript

__all__ = [
    "MAX_WORDS",
    "MIN_WORDS",
    "CorpusError",
    "cycle_lines",
    "generate_sentences",
    "sentence_stream",
    "sentences_from_file",
]

MIN_WORDS = 5
MAX_WORDS = 12


class CorpusError(ValueError):
    """A user-facing problem with the corpus inputs or output directory (one-line message)."""


_DETERMINERS = ("the", "a", "this", "that", "every", "one", "my", "your", "her", "his", "our")
_PLURAL_DETERMINERS = ("the", "some", "these", "those", "many", "few", "two", "three", "all")
_NAMES = (
    "anna", "peter", "lucy", "tom", "emma", "jack", "molly", "sam", "ella", "oliver",
    "grace", "harry", "kate", "william", "bella", "otto", "jenny", "daniel",
)
_PRONOUNS = ("i", "you", "we", "they")
_ADJECTIVES = (
    "little", "green", "old", "small", "happy", "quiet", "bright", "yellow", "sleepy", "tall",
    "good", "cool", "sweet", "warm", "cold", "red", "blue", "brown", "heavy", "funny",
    "clever", "gentle", "silly", "busy", "empty", "full", "fresh", "tiny", "large", "deep",
    "soft", "loud", "proud", "strong", "kind", "shiny", "muddy", "woolly", "wooden", "narrow",
)
_NOUNS = (
    "book", "apple", "coffee", "kitten", "door", "tree", "river", "garden", "letter", "ball",
    "cookie", "teacher", "doctor", "window", "bottle", "pillow", "rabbit", "balloon", "hill",
    "street", "school", "kettle", "carrot", "puppy", "horse", "bridge", "village", "forest",
    "table", "chair", "basket", "mirror", "summer", "morning", "dinner", "feather", "pebble",
    "button", "spoon", "wheel", "boat", "sheep", "bee", "moon", "boot", "hammer", "pepper",
    "cabbage", "ladder", "dragon", "castle", "farmer", "sister", "brother", "pocket", "sweater",
)
_PLURAL_NOUNS = (
    "books", "apples", "kittens", "trees", "letters", "cookies", "teachers", "bottles", "rabbits",
    "balloons", "carrots", "puppies", "horses", "pebbles", "buttons", "spoons", "sheep", "bees",
    "boots", "ladders", "farmers", "glasses", "berries", "boxes", "children", "geese",
)
_PAST_VERBS = (
    "found", "carried", "dropped", "opened", "painted", "pulled", "pushed", "wanted", "kept",
    "followed", "needed", "called", "stopped", "filled", "missed", "passed", "dragged", "hugged",
    "fixed", "watched", "cleaned", "chased", "borrowed", "grabbed", "noticed", "sold", "bought",
    "hid", "took", "saw", "liked", "packed", "shook", "washed", "tossed", "rolled",
)
_BASE_VERBS = (
    "find", "carry", "drop", "open", "paint", "pull", "push", "keep", "follow", "need", "call",
    "stop", "fill", "miss", "pass", "fix", "watch", "clean", "chase", "borrow", "grab",
    "notice", "sell", "buy", "hide", "take", "see", "like", "pack", "wash", "toss", "roll",
)
_INTRANSITIVE_VERBS = (
    "slept", "waited", "smiled", "jumped", "arrived", "laughed", "rolled", "swam", "hurried",
    "wobbled", "giggled", "sneezed", "shivered", "travelled", "wandered", "stood", "sat",
)
_ADVERBS = (
    "quickly", "slowly", "quietly", "happily", "carefully", "gently", "suddenly", "really",
    "loudly", "early", "again", "today", "yesterday", "soon", "still", "finally",
)
_PREPOSITIONS = (
    "in", "on", "under", "behind", "near", "beside", "across", "into", "over", "past",
    "through", "along", "without", "with", "from", "after", "before",
)
_AUXILIARIES = ("will", "can", "should", "might", "could", "would", "must")
_OPENERS = ("it's", "that's", "there's", "here's")
_NEGATIONS = ("don't", "can't", "won't", "didn't", "shouldn't", "wouldn't")
_QUESTION_WORDS = ("where", "why", "when", "how")

# Each slot names a word list; a leading "?" makes the slot optional so one template covers
# a range of sentence lengths.
_SLOTS: dict[str, Sequence[str]] = {
    "det": _DETERMINERS, "dets": _PLURAL_DETERMINERS, "name": _NAMES, "pron": _PRONOUNS,
    "adj": _ADJECTIVES, "noun": _NOUNS, "nouns": _PLURAL_NOUNS, "past": _PAST_VERBS,
    "verb": _BASE_VERBS, "intr": _INTRANSITIVE_VERBS, "adv": _ADVERBS, "prep": _PREPOSITIONS,
    "aux": _AUXILIARIES, "opener": _OPENERS, "neg": _NEGATIONS, "wh": _QUESTION_WORDS,
}

_TEMPLATES: tuple[str, ...] = (
    "det ?adj noun past det ?adj noun ?adv",
    "det ?adj noun past prep det ?adj noun",
    "name past det ?adj noun prep det ?adj noun",
    "name and name past dets ?adj nouns ?adv",
    "pron neg verb det ?adj noun prep det noun",
    "pron neg verb dets ?adj nouns ?adv",
    "opener det ?adj noun prep det ?adj noun",
    "opener too adj for det ?adj noun",
    "dets ?adj nouns intr prep det ?adj noun",
    "det ?adj noun intr ?adv prep det noun",
    "det noun aux verb det ?adj noun ?adv",
    "name aux ?adv verb dets ?adj nouns prep det noun",
    "wh did det ?adj noun verb det ?adj noun",
    "wh did name verb dets nouns ?adv",
    "pron past that det ?adj noun intr ?adv",
    "after det ?adj noun intr name past det noun",
    "name intr ?adv because det noun was adj",
    "det ?adj noun was ?adv adj and adj",
    "det ?adj noun and det ?adj noun intr ?adv prep det ?adj noun",
    "name past det ?adj noun prep det ?adj noun and intr ?adv",
)


def _fill_template(template: str, rng: random.Random) -> list[str]:
    words: list[str] = []
    for slot in template.split():
        optional = slot.startswith("?")
        name = slot.lstrip("?")
        if optional and rng.random() < 0.5:
            continue
        words.append(rng.choice(_SLOTS[name]) if name in _SLOTS else name)
    return _fix_articles(words)


def _fix_articles(words: list[str]) -> list[str]:
    # "a apple" is the one agreement error the templates can make; speakers would say "an".
    return [
        "an" if word == "a" and index + 1 < len(words) and words[index + 1][0] in "aeiou" else word
        for index, word in enumerate(words)
    ]


def sentence_stream(seed: int) -> Iterator[str]:
    """An endless, seeded stream of grammatical lower-case sentences of 5 to 12 words."""
    rng = random.Random(seed)
    while True:
        words = _fill_template(rng.choice(_TEMPLATES), rng)
        if MIN_WORDS <= len(words) <= MAX_WORDS:
            yield " ".join(words)


def generate_sentences(count: int, seed: int) -> list[str]:
    """The first `count` sentences of the seeded stream."""
    stream = sentence_stream(seed)
    return [next(stream) for _ in range(count)]


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{path}: not valid UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise CorpusError(f"{path}: cannot read text file ({error.strerror or error})") from None


def sentences_from_file(path: Path) -> list[str]:
    """Non-empty lines of a UTF-8 file, normalized to the transcript alphabet."""
    path = Path(path)
    sentences: list[str] = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        try:
            sentence = normalize_transcript(line)
        except UnknownCharacterError as error:
            raise CorpusError(
                f"{path}:{lineno}: character {error.character!r} is not in the alphabet"
            ) from None
        if sentence:
            sentences.append(sentence)
    if not sentences:
        raise CorpusError(f"{path}: no non-empty lines to use as transcripts")
    return sentences


def cycle_lines(lines: Sequence[str], count: int, seed: int) -> list[str]:
    """`count` transcripts taken round-robin from `lines` in a seeded order."""
    order = list(lines)
    random.Random(seed).shuffle(order)
    return [order[index % len(order)] for index in range(count)]
