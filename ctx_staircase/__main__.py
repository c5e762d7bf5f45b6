"""``python -m ctx_staircase`` and the ``ctx-staircase`` script: the command line of `cli`.

Ctrl-C is taken over (`interrupt.install`) before anything heavy is imported, so an interrupt at
any moment prints one line and exits 130 (see `cli.entry`).
"""

from ctx_staircase import interrupt

__all__ = [
    "main",
]


def main() -> None:
    interrupt.install()
    from ctx_staircase.cli import entry

    entry()


if __name__ == "__main__":
    main()
