"""[RB] reasoning vs memory anchors at three init scales."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("rb_anchor_tasks", root=Path(__file__).resolve().parent)
