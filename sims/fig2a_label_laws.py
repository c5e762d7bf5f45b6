"""Fig. 2A: the anchor's predicted label law matches p_a (Task 1, four laws)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig2a_label_laws", root=Path(__file__).resolve().parent)
