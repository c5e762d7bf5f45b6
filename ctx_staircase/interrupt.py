"""Ctrl-C or SIGTERM (a scheduler's stop) on the command line: one line on stderr and exit
code 130 or 143, whatever is running.

`__main__` installs `_handler` before anything heavy is imported; `cli.entry` installs it again
(its worker thread runs the command while the main thread only waits). Every result file is
written atomically and every finished unit of work is already saved, so exiting at once loses
nothing and a rerun of the same command resumes.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = [
    "MESSAGE",
    "install",
]

#: The message after ``ctx-staircase[ COMMAND]: `` when a run is interrupted.
MESSAGE = "interrupted; rerun the same command to resume"

#: The exit code of an interrupted run (128 + SIGINT, the shell's convention); SIGTERM's is 143.
_EXIT_CODE = 130


def _handler(signum, frame) -> None:
    """SIGINT and SIGTERM handler: one line on stderr, exit 128 + the signal's number at once
    (results are written atomically)."""
    try:
        sys.stdout.flush()
    finally:
        os.write(2, f"ctx-staircase: {MESSAGE}\n".encode())
        os._exit(128 + int(signum))


def install() -> None:
    """Make `_handler` the SIGINT and SIGTERM handler (call from the main thread)."""
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
