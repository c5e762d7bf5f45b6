"""Fig. 9: epochs to 95% train accuracy vs modulus M (N=20), slow iff M | N."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig9_modulus", root=Path(__file__).resolve().parent)
