"""Reading a compliance log into events, line by line, without ever raising on its content.

A line that is not a well-formed ':::MLLOG {json}' event becomes a LineProblem with its line
number, so a checker can report every bad line instead of stopping at the first (the official
checker raises a KeyError on a line without time_ms).

A log is streamed (read_log): a block of it is in memory at a time, never the whole file, and
what is kept of each event is compact: a slotted LogEvent whose key, event type, field names and
short strings are shared with the other events that spell them (see _decode), so a checked log
costs a small multiple of its size in memory, not ten or more. Events, their values and their
metadata are read-only (the events without metadata share one empty dict). Only the first
PROBLEMS_KEPT problems are kept, the others are counted (ParsedLog.problem_count), so a file of
garbage cannot fill the memory with messages.
"""

from __future__ import annotations

import gc
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from sys import intern
from typing import IO, Any

from benchbase.compliance.keys import OFF_CLOCK, RESUME, constants
from benchbase.specs.numbers import is_number

_fast_json: Callable[[str], Any] | None
try:
    from pydantic_core import from_json as _fast_json
except ImportError:  # pragma: no cover - a pydantic-core without from_json: the json module reads every line
    _fast_json = None

__all__ = ["PROBLEMS_KEPT", "LineProblem", "LogEvent", "ParsedLog", "parse_log", "parse_log_lines", "parse_log_text",
           "read_log"]

PREFIX = ":::MLLOG"
EVENT_TYPES = (constants.POINT_IN_TIME, constants.INTERVAL_START, constants.INTERVAL_END)
PROBLEMS_KEPT = 100
"""Problems kept with their messages; the rest of a log's problems are only counted."""
_EMPTY: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class LogEvent:
    line: int
    time_ms: float
    key: str
    value: Any
    event_type: str
    metadata: dict[str, Any]

    def epoch(self) -> int | None:
        """The event's epoch_num, when it carries an integer one."""
        epoch = self.metadata.get(constants.EPOCH_NUM)
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


@dataclass(frozen=True, slots=True)
class LineProblem:
    line: int
    message: str


@dataclass
class ParsedLog:
    events: list[LogEvent] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)
    """The first PROBLEMS_KEPT problems, in line order."""
    lines: int = 0
    problems_dropped: int = 0
    """Problems found after the first PROBLEMS_KEPT: counted, not kept."""
    _by_key: dict[str, list[LogEvent]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)

    @property
    def problem_count(self) -> int:
        """Every problem found, kept or not."""
        return len(self.problems) + self.problems_dropped

    def keyed(self, key: str) -> list[LogEvent]:
        return list(self._index().get(key, ()))

    def first(self, key: str) -> LogEvent | None:
        found = self._index().get(key)
        return found[0] if found else None

    def run_clock(self, time_ms: float) -> float | None:
        """The run clock (seconds) at wall time ``time_ms``: since run_start, less the downtime of
        every resume at or before it and the off-clock intervals before it (None without run_start)."""
        start = self.first(constants.RUN_START)
        if start is None:
            return None
        seconds = (time_ms - start.time_ms) / 1000 - self.off_clock_seconds(time_ms)
        for resume, downtime in self.resumes():
            if resume.time_ms <= time_ms:
                seconds -= max(0.0, downtime)
        return seconds

    def resumes(self) -> list[tuple[LogEvent, float]]:
        """Every resume with its downtime in seconds: what its wall time adds beyond the run-clock time
        its segment's interruption had reached (value ``interrupted_at_s``), computed from the log's
        own times, not read from the value. Negative for a log whose resume precedes its interruption."""
        start = self.first(constants.RUN_START)
        found: list[tuple[LogEvent, float]] = []
        if start is None:
            return found
        before = 0.0
        for event in self.keyed(RESUME):
            reached = event.value.get("interrupted_at_s") if isinstance(event.value, dict) else None
            if not is_number(reached):
                continue
            downtime = (event.time_ms - start.time_ms) / 1000 - self.off_clock_seconds(event.time_ms) - before - reached
            found.append((event, downtime))
            before += max(0.0, downtime)
        return found

    def off_clock_seconds(self, time_ms: float) -> float:
        """Seconds of the off-clock intervals (OFF_CLOCK: independent scoring) before wall time
        ``time_ms``, from the log's own times; an interval still open at ``time_ms`` counts up to it."""
        total = 0.0
        started: float | None = None
        for event in self.keyed(OFF_CLOCK):
            if event.event_type == "INTERVAL_START":
                started = event.time_ms
            elif event.event_type == "INTERVAL_END" and started is not None:
                total += max(0.0, min(event.time_ms, time_ms) - started) / 1000 if started < time_ms else 0.0
                started = None
        if started is not None and started < time_ms:
            total += (time_ms - started) / 1000
        return total

    def _index(self) -> dict[str, list[LogEvent]]:
        # Events by key, built on first use (the checks ask for a few keys many times); rebuilt if
        # the events list was replaced or grew since.
        state = (id(self.events), len(self.events))
        if self._indexed != state:
            by_key: dict[str, list[LogEvent]] = {}
            for event in self.events:
                found = by_key.get(event.key)
                if found is None:
                    by_key[event.key] = [event]
                else:
                    found.append(event)
            self._by_key, self._indexed = by_key, state
        return self._by_key


def read_log(source: str | os.PathLike[str] | IO[bytes]) -> ParsedLog:
    """Stream a log from a path or a binary file, a block at a time; OSError if it cannot be read."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as handle:
            return parse_log_lines(iter(partial(handle.read, BLOCK), b""))
    return parse_log_lines(iter(partial(source.read, BLOCK), b""))


def parse_log(data: bytes) -> ParsedLog:
    """Parse raw log bytes; undecodable bytes are replaced, never fatal."""
    return read_log(io.BytesIO(data))


def parse_log_text(text: str) -> ParsedLog:
    return _read(text.splitlines())


def parse_log_lines(chunks: Iterable[bytes]) -> ParsedLog:
    """Parse a log from pieces of its bytes (a file's lines or blocks, cut anywhere), holding only
    a piece at a time. Lines and their numbers are those of parse_log_text on the whole log
    decoded: the bytes are decoded in runs that end at a b'\\n' (no UTF-8 sequence spans one) and
    split at every line boundary str.splitlines knows."""
    return _read(_text_lines(chunks))


BLOCK = 1 << 20
"""Bytes read at a time by read_log."""


def _text_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    pending: list[bytes] = []  # the start of a line that the pieces so far have not ended
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            if chunk:
                pending.append(chunk)
            continue
        whole = chunk if cut == len(chunk) else chunk[:cut]
        if pending:
            whole = b"".join([*pending, whole])
            pending = []
        if cut < len(chunk):
            pending.append(chunk[cut:])
        yield from whole.decode("utf-8", errors="replace").splitlines()
    if pending:
        yield from b"".join(pending).decode("utf-8", errors="replace").splitlines()


def _read(lines: Iterable[str]) -> ParsedLog:
    parsed = ParsedLog()
    events, problems = parsed.events, parsed.problems
    number = 0
    collecting = gc.isenabled()
    gc.disable()  # hundreds of thousands of new objects, no cycles: collecting while reading them is waste
    try:
        for raw in lines:
            number += 1
            start = raw.find(PREFIX)
            if start < 0:
                if not raw.strip():
                    continue  # a blank line
                item: LogEvent | LineProblem = LineProblem(
                    number, f"line {number}: not an MLLOG line (no '{PREFIX}' prefix)")
            else:
                item = _parse_event(number, raw[start + len(PREFIX):])
            if isinstance(item, LogEvent):
                events.append(item)
            elif len(problems) < PROBLEMS_KEPT:
                problems.append(item)
            else:
                parsed.problems_dropped += 1
    finally:
        if collecting:
            gc.enable()
    parsed.lines = number
    return parsed


def _parse_event(number: int, text: str) -> LogEvent | LineProblem:
    """The event of a line's text after the prefix, or what is wrong with it."""
    try:
        if text.startswith("\ufeff"):  # as json.loads does
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        record = _decode(text)
    except _DuplicateField as duplicate:
        return LineProblem(number, f"line {number}: duplicated field {duplicate.name!r} in one event")
    except (ValueError, RecursionError) as error:
        return LineProblem(number, f"line {number}: malformed JSON (truncated line?): {str(error)[:80]}")
    if not isinstance(record, dict):
        return LineProblem(number, f"line {number}: the event is {type(record).__name__}, not a JSON object")
    for name in ("key", "time_ms", "event_type"):
        if name not in record:
            return LineProblem(number, f"line {number}: event without {name}")
    time_ms, key, event_type, metadata = record["time_ms"], record["key"], record["event_type"], record.get("metadata")
    if not is_number(time_ms):
        return LineProblem(number, f"line {number}: time_ms is not a finite number: {str(time_ms)[:40]!r}")
    if not isinstance(key, str) or not key:
        return LineProblem(number, f"line {number}: key is not a non-empty string")
    if event_type not in EVENT_TYPES:
        return LineProblem(number, f"line {number}: unknown event_type {str(event_type)[:40]!r}")
    if not metadata:
        metadata = _EMPTY
    elif metadata.__class__ is not dict:
        return LineProblem(number, f"line {number}: metadata is not an object")
    return LogEvent(number, float(time_ms), key, record.get("value"), event_type, metadata)


class _DuplicateField(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _no_duplicate_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys silently; a log that says time_ms twice is
    # ambiguous, so it is a fault, not a choice for the parser to make.
    # Names and strings are interned, as pydantic-core's parser shares them: every event of a log
    # spells the same few names and values (the source file, a subset), each otherwise a copy.
    record = {intern(name): intern(value) if value.__class__ is str else value for name, value in pairs}
    if len(record) < len(pairs):
        seen = set()
        for name, _ in pairs:
            if name in seen:
                raise _DuplicateField(name)
            seen.add(name)
    return record


_CHECKED = json.JSONDecoder(object_pairs_hook=_no_duplicate_fields)


def _decode(text: str) -> Any:
    """The JSON value of ``text`` as json.loads reads it; _DuplicateField when an object in it
    names a field twice.

    The usual event goes through pydantic-core's JSON parser (Rust; a dependency of pydantic), two
    to three times faster than the json module with a Python call per object, and sharing the
    strings it has seen. It keeps the last of two equal fields silently, so its result is used
    only when the text shows there can be none: the text has exactly one '{' per object decoded
    (the event, its metadata and its value: no other object, and no '{' in a string) and one ':'
    per field of those objects (every ':' either ends a field's name or sits in a string, so no
    field was lost to a duplicate). Anything else (a ':' in a string, a nested object, an error)
    is decoded by the json module with the duplicate check, which finds what the parse always
    reported. The two parsers agree on every text both accept (tests/test_check_scaling.py)."""
    if _fast_json is not None:
        try:
            record = _fast_json(text)
        except Exception:  # noqa: BLE001 - whatever it rejects, the json module judges, with its own messages
            record = None
        if record.__class__ is dict:
            objects, fields = 1, len(record)
            for part in (record.get("metadata"), record.get("value")):
                if part.__class__ is dict:
                    objects, fields = objects + 1, fields + len(part)
            if text.count("{") == objects and text.count(":") == fields:
                return record
    return _CHECKED.decode(text)
