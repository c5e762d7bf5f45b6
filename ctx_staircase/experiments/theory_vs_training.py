"""Theory against Flax training on `add`: closed form, signature flows, escape-time law.

SPEC.md §8 items 13–14 and the theory issue's acceptance: FFN with sigma(z) = z + z^2/2 on
`add` (N = 20), full-batch GD, gamma in {0.6, .., 1.4}; theory/closed_form.md has the definitions.
"""

from __future__ import annotations

import jax

from ctx_staircase import comparison, plots, tasks
from ctx_staircase.experiments import Claim, Outcome

NAME = "theory_vs_training"
TITLE = "Closed-form linear phase and signature flow against GD training (add, N=20)"


def run(full: bool = False) -> Outcome:
    jax.config.update("jax_enable_x64", True)
    config = dict(
        task="add",
        N=20,
        gammas=(0.6, 0.8, 1.0, 1.2, 1.4),
        max_orders=(0, 1),
        steps=1500,
        lr=0.2,
        d=128,
        activation="poly:1,0.5",
        threshold=0.5,
    )
    ds = tasks.make("add", N=config["N"])
    experiment = comparison.theory_vs_training(
        ds,
        gammas=config["gammas"],
        max_orders=config["max_orders"],
        steps=config["steps"],
        lr=config["lr"],
        d=config["d"],
        activation=config["activation"],
        threshold=config["threshold"],
    )
    summary = comparison.experiment_summary(experiment)
    closed = [run["comparisons"]["closed_form"] for run in summary["runs"]]
    errors = [c["weight_rel_error_max"] for c in closed]
    ratios = [c["escape_ratio"] for c in closed]
    slopes = summary["escape_slope"]
    slope_gap = abs(slopes["closed_form"] / slopes["simulation"] - 1)
    analytic_gap = abs(slopes["analytic"] / slopes["simulation"] - 1)
    claims = [
        Claim(
            "§8.13 / theory",
            "closed-form W_E(t) matches training before escape",
            "max rel. error " + ", ".join(f"{e:.3f}" for e in errors),
            "<= 0.05 on t <= t_esc/2, every gamma",
            max(errors) <= 0.05,
        ),
        Claim(
            "theory",
            "predicted escape times match measured ones",
            "ratios " + ", ".join(f"{r:.3f}" for r in ratios),
            "|ratio - 1| <= 0.10, every gamma",
            max(abs(r - 1) for r in ratios) <= 0.10,
            "escape = largest centred logit reaches 0.5 nats",
        ),
        Claim(
            "§8.14",
            "escape steps linear in gamma, slope ln d / (C_1 s_1)",
            f"measured {slopes['simulation']:.1f}, closed form {slopes['closed_form']:.1f}, "
            f"analytic {slopes['analytic']:.1f}",
            "closed-form and analytic slopes within 10% of measured",
            slope_gap <= 0.10 and analytic_gap <= 0.10,
        ),
    ]
    title = f"add N=20, FFN d=128, σ(z)=z+z²/2, GD lr {config['lr']}"
    figures = {
        "overlay": plots.theory_overlay_figure(experiment, title),
        "escape": plots.escape_time_figure(experiment, title),
    }
    return Outcome(
        claims,
        figures,
        summary,
        {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()} | {"seed": 0},
    )
