"""User-facing errors: each renders as one line on the CLI, with exit code 2 for bad input."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["BenchbaseError", "InputError", "describe_validation_error"]


class BenchbaseError(Exception):
    """An error the CLI shows as a single line, without a traceback."""

    exit_code = 1


class InputError(BenchbaseError):
    """Bad input (an unknown name, a malformed file): the user must change what they passed."""

    exit_code = 2


def describe_validation_error(source: str, error: ValidationError) -> str:
    """A pydantic error as one line: 'SOURCE: field.path: message; other.field: message'."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{where}: {item['msg']}")
    return f"{source}: " + "; ".join(problems)
