"""Language model on real text: rho_next rises to an early peak, then settles (SPEC §8 item 16).

Usage: python sims/lm_text.py [--text ../shared/data/tinyshakespeare.txt] [--full]
"""

from pathlib import Path

from ctx_staircase.experiments.cli import main

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"

if __name__ == "__main__":
    main("lm_text", root=Path(__file__).resolve().parent, text=SHAKESPEARE)
