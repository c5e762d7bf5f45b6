"""The regime study: every FFN and attention-only claim under vocabulary x optimizer (issue 10)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("regime_study", root=Path(__file__).resolve().parent)
