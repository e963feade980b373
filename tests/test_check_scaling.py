"""`benchbase check` in bounded resources: the streamed parse reads exactly what the whole-text
parse (and the parser before streaming) reads, a long log is checked in a small multiple of its
size, and no rule reports more than MESSAGES_PER_RULE messages and a count of the rest."""

from __future__ import annotations

import io
import json
import math
import tracemalloc

import pytest
from benchmark_scripts import load_benchmark
from hypothesis import given, settings
from hypothesis import strategies as st

from benchbase.compliance.check_registry import MESSAGES_PER_RULE
from benchbase.compliance.checker import capped, check_evidence, check_log
from benchbase.compliance.evidence import Evidence
from benchbase.compliance.parse import PROBLEMS_KEPT, ParsedLog, parse_log, parse_log_lines, parse_log_text, read_log
from benchbase.compliance.rules import load_ruleset


def _old_parse(data: bytes) -> tuple[int, list[tuple], list[tuple]]:
    """The parser before streaming (whole text, splitlines, json.loads with a duplicate check),
    reduced to what it found: the oracle for the streamed one."""
    events, problems, lines = [], [], 0

    def no_duplicates(pairs):
        seen: dict = {}
        for name, value in pairs:
            if name in seen:
                raise KeyError(name)
            seen[name] = value
        return seen

    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        lines = number
        if not raw.strip():
            continue
        start = raw.find(":::MLLOG")
        if start < 0:
            problems.append((number, f"line {number}: not an MLLOG line (no ':::MLLOG' prefix)"))
            continue
        try:
            record = json.loads(raw[start + 8:], object_pairs_hook=no_duplicates)
        except KeyError as duplicate:
            problems.append((number, f"line {number}: duplicated field {duplicate.args[0]!r} in one event"))
            continue
        except (ValueError, RecursionError) as error:
            problems.append((number, f"line {number}: malformed JSON (truncated line?): {str(error)[:80]}"))
            continue
        if not isinstance(record, dict):
            problems.append((number, f"line {number}: the event is {type(record).__name__}, not a JSON object"))
            continue
        missing = [name for name in ("key", "time_ms", "event_type") if name not in record]
        if missing:
            problems.append((number, f"line {number}: event without {missing[0]}"))
            continue
        time_ms, key, metadata = record["time_ms"], record["key"], record.get("metadata") or {}
        if not (isinstance(time_ms, int | float) and not isinstance(time_ms, bool) and _finite(time_ms)):
            problems.append((number, f"line {number}: time_ms is not a finite number: {str(time_ms)[:40]!r}"))
        elif not isinstance(key, str) or not key:
            problems.append((number, f"line {number}: key is not a non-empty string"))
        elif record["event_type"] not in ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"):
            problems.append((number, f"line {number}: unknown event_type {str(record['event_type'])[:40]!r}"))
        elif not isinstance(metadata, dict):
            problems.append((number, f"line {number}: metadata is not an object"))
        else:
            events.append((number, repr(float(time_ms)), key, repr(record.get("value")), record["event_type"],
                           repr(metadata)))
    return lines, events, problems


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # the parser before streaming raised here: a huge integer time_ms was a traceback
        return False


def _found(parsed: ParsedLog) -> tuple[int, list[tuple], list[tuple]]:
    return (parsed.lines,
            [(e.line, repr(e.time_ms), e.key, repr(e.value), e.event_type, repr(e.metadata)) for e in parsed.events],
            [(problem.line, problem.message) for problem in parsed.problems])


def _event(key: str = "seed", time_ms: int = 1, **fields) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": None, "metadata": {"file": "x.py", "lineno": 3}, **fields})


_PIECES = st.sampled_from([
    _event(), _event("eval_accuracy", 5, value={"wer": 1.5}), _event(metadata={"epoch_num": 2, "subset": "dev"}),
    ":::MLLOG ", "{", "}", '"time_ms": 1', '"key": "k"', '"key": ', "\ufeff", '"event_type": "INTERVAL_END"', ",",
    '"metadata": 3', "NaN", "[", "]", "\n", "\r\n", "\r", "\x85", "\u2028", "\x0c", " ", "hello", "\xe9",
])
_LOGS = st.one_of(
    st.lists(_PIECES, max_size=30).map("".join).map(str.encode),
    st.binary(max_size=300),
    st.lists(st.one_of(_PIECES.map(str.encode), st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3", b"\n", b"\r"])),
             max_size=30).map(b"".join),
)


@settings(max_examples=300, deadline=None)
@given(data=_LOGS, cuts=st.lists(st.integers(0, 400), max_size=8))
def test_the_streamed_parse_reads_what_the_old_whole_text_parse_read(data, cuts):
    expected = _old_parse(data)
    assert _found(parse_log(data)) == expected
    assert _found(parse_log_text(data.decode("utf-8", errors="replace"))) == expected
    # Pieces cut anywhere (inside a line, inside a UTF-8 sequence, between \r and \n).
    bounds = sorted({0, len(data), *(cut for cut in cuts if cut < len(data))})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    assert _found(parse_log_lines(pieces)) == expected
    assert _found(parse_log_lines(io.BytesIO(data))) == expected  # a binary file's lines


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6, alphabet="ab:{}\\\"é\u2028 "),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "a:", "{"]),
                                                                      children, max_size=3),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, metadata=st.one_of(st.none(), _JSON), duplicate=st.sampled_from(["", "time_ms", "file", "wer"]),
       spaced=st.booleans())
def test_well_formed_events_read_as_the_json_module_reads_them(value, metadata, duplicate, spaced):
    # Both parsers (pydantic-core's for the usual event, the json module's for the rest) against the
    # parser before streaming, on events with strings holding ':' and '{', nested objects, NaN,
    # big integers and a field written twice in the event, its metadata or its value.
    record = {"namespace": "", "time_ms": 1795384454794, "event_type": "POINT_IN_TIME", "key": "k", "value": value,
              "metadata": metadata}
    if isinstance(metadata, dict) and duplicate == "file":
        record["metadata"] = {**metadata, "file": "runner.py"}
    if isinstance(value, dict) and duplicate == "wer":
        record["value"] = {**value, "wer": 1.5}
    text = json.dumps(record, separators=(", ", " : ") if spaced else None)
    if duplicate == "time_ms":
        text = text.replace('"time_ms"', '"time_ms": 7, "time_ms"', 1)
    elif duplicate == "file" and isinstance(metadata, dict):
        text = text.replace('"file"', '"file": "x", "file"', 1)
    elif duplicate == "wer" and isinstance(value, dict):
        text = text.replace('"wer"', '"wer": 2, "wer"', 1)
    data = f":::MLLOG {text}".encode()
    assert _found(parse_log(data)) == _old_parse(data)


@pytest.mark.parametrize("text", [
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": "a:b", "metadata": {"file": "c:{d}"}}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": {"a": {"b": 1}}, "metadata": {}}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "metadata": {"a": 1, "a": 2}}',
    '{"time_ms": 1, "key": "k", "key": "j", "event_type": "POINT_IN_TIME"}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "metadata": 1, "metadata": {"a": 1}}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": [{"a": 1, "a": 2}]}',
    '{"time_ms": 1' + "0" * 400 + ', "key": "k", "event_type": "POINT_IN_TIME"}',
    '{"time_ms": 1' + "0" * 5000 + ', "key": "k", "event_type": "POINT_IN_TIME"}',
    '{"time_ms": 1.7976931348623159e308, "key": "k", "event_type": "POINT_IN_TIME"}',
    '{"time_ms": NaN, "key": "k", "event_type": "POINT_IN_TIME"}',
    r'{"time_ms": 9007199254740993, "key": "\ud800", "event_type": "POINT_IN_TIME", "value": "\ud83d\ude00"}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": 2.4703282292062328e-324}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME"} {"a": 1}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME",}',
    '\ufeff{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME"}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": ' + "[" * 3000 + "]" * 3000 + "}",
    r'{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": "\x41"}',
    r'{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": "tab\there"}',
    '{"time_ms": 1, "key": "k", "event_type": "POINT_IN_TIME", "value": "tab\there"}',  # a raw tab: rejected
    '[{"a": 1, "a": 2}]',
])
def test_edge_cases_read_as_before(text):
    data = f":::MLLOG {text}".encode()
    assert _found(parse_log(data)) == _old_parse(data)


def test_a_path_a_file_and_bytes_read_alike(tmp_path):
    text = "\n".join([_event("init_start"), "garbage", _event("run_start", 2), ""]) + "\r\n" + _event("x", 3)
    path = tmp_path / "mllog.log"
    path.write_bytes(text.encode())
    with path.open("rb") as handle:
        from_file = _found(read_log(handle))
    assert _found(read_log(path)) == _found(read_log(str(path))) == from_file == _found(parse_log(text.encode()))
    assert from_file[0] == 5 and [event[2] for event in from_file[1]] == ["init_start", "run_start", "x"]


def test_a_line_longer_than_a_read_block_is_one_line(tmp_path):
    long_value = "v" * (3 << 20)
    path = tmp_path / "mllog.log"
    path.write_text(_event("seed", value=long_value) + "\n" + _event("run_start", 2))
    parsed = read_log(path)
    assert [(event.line, event.key) for event in parsed.events] == [(1, "seed"), (2, "run_start")]
    assert parsed.events[0].value == long_value and not parsed.problems


def test_a_time_beyond_a_float_is_a_problem_not_a_traceback():
    parsed = parse_log(b':::MLLOG {"time_ms": 1' + b"0" * 400 + b', "key": "a", "event_type": "POINT_IN_TIME"}')
    assert [problem.message[:45] for problem in parsed.problems] == ["line 1: time_ms is not a finite number: '1000"]


def test_events_are_compact_and_share_their_strings():
    parsed = parse_log("\n".join(_event(metadata={"file": "benchbase/harness/runner.py", "epoch_num": n})
                                 for n in range(3)).encode())
    first, second = parsed.events[0], parsed.events[1]
    assert not hasattr(first, "__dict__")  # slotted
    assert first.key is second.key and first.event_type is second.event_type
    assert first.metadata["file"] is second.metadata["file"]
    assert next(iter(first.metadata)) is next(iter(second.metadata))
    assert parsed.first("seed") is first and parsed.keyed("seed") == parsed.events and parsed.keyed("none") == []


def test_a_log_of_garbage_keeps_a_few_problems_and_counts_the_rest():
    parsed = parse_log(b"garbage\n" * 5000 + _event().encode())
    assert len(parsed.problems) == PROBLEMS_KEPT and parsed.problem_count == 5000 and len(parsed.events) == 1
    report = check_evidence(Evidence("garbage", parsed), load_ruleset())
    finding = next(finding for finding in report.findings if finding.rule == "lines_parse")
    assert finding.status == "fail" and len(finding.messages) == MESSAGES_PER_RULE + 1
    assert finding.messages[0] == "5000 of the log's 5001 lines are not well-formed MLLOG events"
    assert finding.messages[1] == "line 1: not an MLLOG line (no ':::MLLOG' prefix)"
    assert finding.messages[-1].startswith("... and ")


def test_a_log_without_events_says_so_first_when_the_list_is_cut():
    parsed = parse_log(b"garbage\n" * 20)
    report = check_evidence(Evidence("garbage", parsed), load_ruleset())
    messages = next(finding for finding in report.findings if finding.rule == "lines_parse").messages
    assert messages[:2] == ["20 of the log's 20 lines are not well-formed MLLOG events",
                            "the log holds no MLLOG events"]


def test_every_rule_reports_at_most_its_cap():
    # time_ms goes back on every other line: 200 monotonic_time messages before the cap.
    lines = [_event("seed", time_ms=1_000 - (index % 2) * 500 + index) for index in range(400)]
    report = check_evidence(Evidence("back", parse_log("\n".join(lines).encode())), load_ruleset())
    assert all(len(finding.messages) <= MESSAGES_PER_RULE + 1 for finding in report.findings)
    monotonic = next(finding for finding in report.findings if finding.rule == "monotonic_time")
    assert monotonic.messages[-1] == f"... and {200 - MESSAGES_PER_RULE} more (only the first 8 are listed)"
    assert capped(["a", "b"], 2) == ["a", "b"] and capped(["a", "b", "c"], 2) == ["a", "b", "... and 1 more (only "
                                                                                   "the first 2 are listed)"]


@pytest.fixture(scope="module")
def scaling():
    return load_benchmark("check_scaling")


def test_a_long_log_is_checked_in_a_small_multiple_of_its_size(scaling, tmp_path, workloads):
    log = tmp_path / "mllog.log"
    shape = scaling.write_log(log, "ds2", size_mb=8, epochs=8)
    tracemalloc.start()
    try:
        report = check_log(log, workloads=workloads)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.passed, report.failures
    # Before streaming: the bytes, the text, its lines and the events all at once, 8 times the log.
    assert peak < 3.5 * shape["bytes"], f"peak {peak / shape['bytes']:.2f} times the log's size"


@pytest.fixture(scope="module")
def workloads():
    from benchbase.plugin_host import get_plugin_manager
    from benchbase.plugin_host.registry import collect_registry

    return collect_registry(get_plugin_manager(load_entrypoints=False)).workloads
