"""A write that fails after run_stop: the run's verdict is logged, its result is not delivered.

After run_stop the harness writes, off the clock, the final checkpoint, the exported final
weights, the final evaluation's decoded outputs and, last, result.json. When one of those writes
fails (a full disk), the log's run_stop keeps its status: as in MLPerf, the timed phase and its
verdict ended at run_stop, and the log is append-only (the disk that refused the checkpoint would
refuse a correction too). What the run did not deliver is its result: without result.json
`benchbase check` calls the folder UNFINISHED (exit 4), and `benchbase score` and the report
have no result to read. The process says so in one line, exit 1: the file, the failure, and how
to go on (`benchbase run --resume` from the last complete periodic checkpoint, which the failed
write never touched: checkpoints are written to a temporary name and renamed).
"""

from __future__ import annotations

import errno

from benchbase.errors import BenchbaseError, InputError
from benchbase.harness.disk_space import DISK_FULL
from benchbase.harness.resume import find_resume_point
from benchbase.run_folder import RESULT_NAME, RunFolder

__all__ = ["RunUnfinished", "unfinished_after_run_stop"]


class RunUnfinished(BenchbaseError):
    """run_stop is in the log, but a later write of the run folder failed: no result.json."""


def unfinished_after_run_stop(error: OSError, folder: RunFolder, status: str, processes: int = 1) -> RunUnfinished:
    """``error``, a failed write after run_stop logged ``status``, as one line naming the file,
    the failure, that the run is unfinished and how it goes on."""
    where = error.filename if error.filename is not None else folder.root
    failure = DISK_FULL if error.errno == errno.ENOSPC else (error.strerror or type(error).__name__)
    fix = "free some space" if error.errno == errno.ENOSPC else "once the folder can be written"
    try:
        point = find_resume_point(folder, processes)
        going_on = (f"{fix}, then `benchbase run --resume {folder.root}` trains again from "
                    f"{folder.relative(point.checkpoint)}")
    except (InputError, OSError):
        going_on = f"no complete checkpoint to resume from: {fix} and start it again"
    return RunUnfinished(f"{where}: could not be written: {failure}; run_stop logged status {status}, but the run "
                         f"is unfinished without {RESULT_NAME}: {going_on}")
