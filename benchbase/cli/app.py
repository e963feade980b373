"""The click group and the entry point. Errors the user can fix are one line, exit code 2."""

from __future__ import annotations

import errno
import os
import sys
import traceback

import click

from benchbase.errors import BenchbaseError, Terminated
from benchbase.harness.disk_space import DISK_FULL
from benchbase.harness.launch import LAUNCHED_WORKER
from benchbase.harness.termination import install_sigterm_handler

__all__ = ["cli", "main"]


DEBUG_VARIABLE = "BENCHBASE_DEBUG"
"""Set (to anything but 0 or empty), an error's whole traceback is printed above its one line, as --traceback does."""


@click.group()
@click.version_option(package_name="benchbase")
@click.option("--traceback", "show_traceback", is_flag=True,
              help=f"Print an error's whole traceback above its one line (or set {DEBUG_VARIABLE}=1).")
def cli(show_traceback: bool) -> None:
    """MLPerf-style time-to-accuracy benchmarks for speech recognition training."""
    global _show_traceback
    _show_traceback = _show_traceback or show_traceback


def main(argv: list[str] | None = None) -> None:
    # SIGTERM (a preempted job, `kill`) unwinds like Ctrl-C once no update is half done: a run
    # checkpoints and logs run_stop, child processes stop, partial files are removed; then exit
    # 143 as the shell would report it.
    rank = _rank()
    install_sigterm_handler(always_defer=rank is not None)
    global _prefix, _show_traceback
    _prefix = f"rank {rank}: " if rank is not None else ""
    _show_traceback = os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    try:
        # Without standalone mode, click returns a command's Exit code instead of exiting with it.
        code = cli.main(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Abort as abort:
        # click turns Ctrl-C (KeyboardInterrupt) into Abort; say which, as SIGTERM's line does.
        if isinstance(abort.__cause__, KeyboardInterrupt):
            _stopped("interrupted (Ctrl-C)", 130, rank)
        _fail("aborted", 130)
    except click.ClickException as error:
        _fail(error.format_message(), 2)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except BenchbaseError as error:
        _fail(str(error), error.exit_code, error)
    except OSError as error:
        # A filesystem error (permissions, a full disk, a path that is a file) is the user's to
        # fix, so one line naming the file, not a traceback.
        _fail(_describe_os_error(error), 1, error)
    except KeyboardInterrupt:
        _stopped("interrupted", 130, rank)
    except Terminated:
        _stopped("terminated (SIGTERM)", Terminated.exit_code, rank)


def _describe_os_error(error: OSError) -> str:
    where = error.filename if error.filename is not None else "?"
    if error.filename2 is not None:
        where = f"{where} -> {error.filename2}"
    if error.errno == errno.ENOSPC:
        return f"{where}: could not be written: {DISK_FULL}"
    return f"{where}: {error.strerror or type(error).__name__}"


_prefix = ""
_show_traceback = False


def _rank() -> int | None:
    """This process's rank when torch's launcher started it as one of several (torchrun), else None."""
    try:
        return int(os.environ["RANK"]) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    except (KeyError, ValueError):
        return None


def _stopped(message: str, code: int, rank: int | None) -> None:
    """Stopped by a signal. A worker of `benchbase run`'s own launcher leaves quietly: the launching
    process, which passed the signal on, says it in one line for the whole run."""
    if rank is not None and os.environ.get(LAUNCHED_WORKER) == "1":
        sys.exit(code)
    _fail(message, code)


def _fail(message: str, code: int, error: BaseException | None = None) -> None:
    if error is not None and _show_traceback:
        # Above the one line, which stays the last: scripts and tests read the error from it.
        click.echo("".join(traceback.format_exception(error)).rstrip(), err=True)
    click.echo(f"benchbase: error: {_prefix}{message}", err=True)
    sys.exit(code)
