"""``python -m ctx_staircase`` and the ``ctx-staircase`` script: the command line of `cli`.

Ctrl-C is taken over before anything heavy is imported, so an interrupt at any moment prints
one line and exits 130 (see `cli.entry`).
"""

import os
import signal
import sys

INTERRUPTED = "interrupted; rerun the same command to resume"


def interrupted(signum, frame) -> None:
    """SIGINT handler: one line on stderr, exit 130 at once (results are written atomically)."""
    try:
        sys.stdout.flush()
    finally:
        os.write(2, f"ctx-staircase: {INTERRUPTED}\n".encode())
        os._exit(130)


def main() -> None:
    signal.signal(signal.SIGINT, interrupted)
    from ctx_staircase.cli import entry

    entry()


if __name__ == "__main__":
    main()
