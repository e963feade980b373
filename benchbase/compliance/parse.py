"""Reading a compliance log into events, line by line, without ever raising on its content.

A line that is not a well-formed ':::MLLOG {json}' event becomes a LineProblem with its line
number, so a checker can report every bad line instead of stopping at the first (the official
checker raises a KeyError on a line without time_ms).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LineProblem", "LogEvent", "ParsedLog", "is_number", "parse_log", "parse_log_text"]

PREFIX = ":::MLLOG"
EVENT_TYPES = ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")


@dataclass(frozen=True)
class LogEvent:
    line: int
    time_ms: float
    key: str
    value: Any
    event_type: str
    metadata: dict

    def epoch(self) -> int | None:
        """The event's epoch_num, when it carries an integer one."""
        epoch = self.metadata.get("epoch_num")
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


@dataclass(frozen=True)
class LineProblem:
    line: int
    message: str


@dataclass
class ParsedLog:
    events: list[LogEvent] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)
    lines: int = 0

    def keyed(self, key: str) -> list[LogEvent]:
        return [event for event in self.events if event.key == key]

    def first(self, key: str) -> LogEvent | None:
        return next((event for event in self.events if event.key == key), None)


def parse_log(data: bytes) -> ParsedLog:
    """Parse raw log bytes; undecodable bytes are replaced, never fatal."""
    return parse_log_text(data.decode("utf-8", errors="replace"))


def parse_log_text(text: str) -> ParsedLog:
    parsed = ParsedLog()
    for number, raw in enumerate(text.splitlines(), start=1):
        parsed.lines = number
        if not raw.strip():
            continue
        event = _parse_line(number, raw)
        (parsed.problems if isinstance(event, LineProblem) else parsed.events).append(event)
    return parsed


def _parse_line(number: int, raw: str) -> LogEvent | LineProblem:
    start = raw.find(PREFIX)
    if start < 0:
        return LineProblem(number, f"line {number}: not an MLLOG line (no '{PREFIX}' prefix)")
    try:
        record = json.loads(raw[start + len(PREFIX):], object_pairs_hook=_no_duplicate_fields)
    except _DuplicateField as duplicate:
        return LineProblem(number, f"line {number}: duplicated field {duplicate.name!r} in one event")
    except (ValueError, RecursionError) as error:
        return LineProblem(number, f"line {number}: malformed JSON (truncated line?): {str(error)[:80]}")
    return _event(number, record)


def _event(number: int, record: Any) -> LogEvent | LineProblem:
    if not isinstance(record, dict):
        return LineProblem(number, f"line {number}: the event is {type(record).__name__}, not a JSON object")
    for name in ("key", "time_ms", "event_type"):
        if name not in record:
            return LineProblem(number, f"line {number}: event without {name}")
    time_ms, key, metadata = record["time_ms"], record["key"], record.get("metadata") or {}
    if not is_number(time_ms):
        return LineProblem(number, f"line {number}: time_ms is not a finite number: {str(time_ms)[:40]!r}")
    if not isinstance(key, str) or not key:
        return LineProblem(number, f"line {number}: key is not a non-empty string")
    if record["event_type"] not in EVENT_TYPES:
        return LineProblem(number, f"line {number}: unknown event_type {str(record['event_type'])[:40]!r}")
    if not isinstance(metadata, dict):
        return LineProblem(number, f"line {number}: metadata is not an object")
    return LogEvent(number, float(time_ms), key, record.get("value"), record["event_type"], metadata)


def is_number(value: Any) -> bool:
    """A finite int or float (JSON allows NaN and Infinity; bools are ints to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _DuplicateField(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _no_duplicate_fields(pairs: list[tuple[str, Any]]) -> dict:
    # json.loads keeps the last of two equal keys silently; a log that says time_ms twice is
    # ambiguous, so it is a fault, not a choice for the parser to make.
    seen: dict = {}
    for name, value in pairs:
        if name in seen:
            raise _DuplicateField(name)
        seen[name] = value
    return seen
