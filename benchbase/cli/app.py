"""The click group and the entry point. Errors the user can fix are one line, exit code 2."""

from __future__ import annotations

import os
import sys

import click

from benchbase.errors import BenchbaseError, Terminated
from benchbase.harness.termination import install_sigterm_handler

__all__ = ["cli", "main"]


@click.group()
@click.version_option(package_name="benchbase")
def cli() -> None:
    """MLPerf-style time-to-accuracy benchmarks for speech recognition training."""


def main(argv: list[str] | None = None) -> None:
    # SIGTERM (a preempted job, `kill`) unwinds like Ctrl-C once no update is half done: a run
    # checkpoints and logs run_stop, child processes stop, partial files are removed; then exit
    # 143 as the shell would report it.
    rank = _rank()
    install_sigterm_handler(always_defer=rank is not None)
    global _prefix
    _prefix = f"rank {rank}: " if rank is not None else ""
    try:
        # Without standalone mode, click returns a command's Exit code instead of exiting with it.
        code = cli.main(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except click.ClickException as error:
        _fail(error.format_message(), 2)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except BenchbaseError as error:
        _fail(str(error), error.exit_code)
    except OSError as error:
        # A filesystem error (permissions, a full disk, a path that is a file) is the user's to
        # fix, so one line naming the file, not a traceback.
        _fail(_describe_os_error(error), 1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Terminated:
        _fail("terminated (SIGTERM)", Terminated.exit_code)


def _describe_os_error(error: OSError) -> str:
    where = error.filename if error.filename is not None else "?"
    if error.filename2 is not None:
        where = f"{where} -> {error.filename2}"
    return f"{where}: {error.strerror or type(error).__name__}"


_prefix = ""


def _rank() -> int | None:
    """This process's rank when torch's launcher started it as one of several (torchrun), else None."""
    try:
        return int(os.environ["RANK"]) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    except (KeyError, ValueError):
        return None


def _fail(message: str, code: int) -> None:
    click.echo(f"benchbase: error: {_prefix}{message}", err=True)
    sys.exit(code)
