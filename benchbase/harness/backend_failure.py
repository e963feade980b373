"""A backend's bug as one line: the backend, the method the harness called, the exception and the
line of the backend's own code it came from; the whole traceback goes into the run folder.

A backend is a third party's code. When its train_step() or predict() raises something that is no
BenchbaseError (a bug, a framework's error), the harness's own frames are of no use to whoever must
fix it, and sixty lines of them hide the one line that matters. The harness still closes the log
(run_stop aborted, stop reason error) before this is raised.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import FrameType

from benchbase.backend import Backend
from benchbase.errors import BenchbaseError

__all__ = ["BackendFailure", "backend_failure"]

LONGEST_MESSAGE = 300
"""Characters of the exception's first line the one line keeps (a framework's message can be pages)."""


class BackendFailure(BenchbaseError):
    """A backend method raised: one line for the terminal; the original is its ``__cause__``."""


def backend_failure(error: BaseException, backend_class: type[Backend], backend_name: str,
                    traceback_file: Path | None) -> BackendFailure | None:
    """``error`` described as one line, when it escaped from a method of ``backend_class``; None for
    an error of the harness, a plugin's hook, Ctrl-C, or an error the backend already put in one
    line (a BenchbaseError; an OSError, which names its file). Writes the whole traceback to
    ``traceback_file`` (None: the run folder is gone, as after a failure before run_start)."""
    if not isinstance(error, Exception) or isinstance(error, BenchbaseError | OSError):
        return None
    root = _source_root(backend_class)
    own = [(frame, line) for frame, line in traceback.walk_tb(error.__traceback__)
           if _is_backend_code(frame, backend_class, root)]
    if not own:
        return None
    method = own[0][0].f_code.co_name  # the outermost of the backend's frames: what the harness called
    innermost, line = own[-1]  # where the backend's own code raised, or called what raised
    where = f"{_shown_path(innermost.f_code.co_filename, root)}:{line}"
    kept = _keep_traceback(error, traceback_file)
    return BackendFailure(f"backend {backend_name!r} failed in {method}(): {type(error).__name__}: "
                          f"{_first_line(error)} (at {where}); " +
                          (f"the traceback is in {kept}" if kept else "`benchbase --traceback` prints its traceback"))


def _source_root(backend_class: type[Backend]) -> Path | None:
    """The backend's own code: its top-level package's folder, or the module's file when it is one."""
    top = sys.modules.get(backend_class.__module__.split(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    return path.parent if path.name == "__init__.py" else path


def _is_backend_code(frame: FrameType, backend_class: type[Backend], root: Path | None) -> bool:
    # A method the backend inherits from another package still runs with the backend as self.
    if isinstance(frame.f_locals.get("self"), backend_class):
        return True
    path = Path(frame.f_code.co_filename).resolve()
    return root is not None and (path == root or root in path.parents)


def _shown_path(filename: str, root: Path | None) -> str:
    """The file as its package names it (benchbase_torch_ds2/backend.py), not a site-packages path."""
    path = Path(filename).resolve()
    if root is not None and (path == root or root in path.parents):
        return str(path.relative_to(root.parent))
    return filename


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else "(no message)"
    return first if len(first) <= LONGEST_MESSAGE else first[:LONGEST_MESSAGE] + "..."


def _keep_traceback(error: BaseException, path: Path | None) -> Path | None:
    if path is None:
        return None
    try:
        path.write_text("".join(traceback.format_exception(error)), encoding="utf-8")
    except OSError:
        return None  # a full disk may be why the run failed: the one line must still come out
    return path
