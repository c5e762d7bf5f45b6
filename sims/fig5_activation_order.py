"""Fig. 5: activation order gates learnability (modsum, sigma = z^K)."""

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig5_activation_order")
