"""Fig. 3: the staircase in one run (add and mod, N=40): rho_0(t), probe, early/late geometry."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig3_staircase", root=Path(__file__).resolve().parent)
