"""Fig. 6: attention-only staircase on add/mod and attention routing on Task 3."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig6_attention", root=Path(__file__).resolve().parent)
