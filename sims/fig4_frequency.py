"""Fig. 4 and App. D: frequency-resolved first-order alignment and the 10-seed k* study."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig4_frequency", root=Path(__file__).resolve().parent)
