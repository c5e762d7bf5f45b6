"""Fig. 2B-F: early embedding geometry vs the zero-order signature (add, sub, mul; N=20)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig2_geometry", root=Path(__file__).resolve().parent)
