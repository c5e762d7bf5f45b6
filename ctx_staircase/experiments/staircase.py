"""The flagship run: the context staircase on `add` and `mod`, with the theory beside it.

`ctx-staircase run` with no arguments runs this (CPU: about 3 minutes on 2 cores):

1. `add` and `mod` (N = 40), ReLU FFN (d = 128), small init (gamma = 1), in the primary regime
   of theory/regimes.md: full-batch GD at lr 1 for 1200 epochs (gradient-flow time t = epoch)
   with a label vocabulary twice the minimal one, the regime the gradient-flow theory describes;
2. the staircase: rho_0(t), the alignment with the zero-order signature geometry, against the
   held-out correlation of the first-order probe (SPEC eq. 7) over training;
3. the frequency heatmap rho_{(1),k}(t) (SPEC §3, Fig. 4);
4. the theory overlay on `add` (sigma(z) = z + z^2/2, full-batch GD so that t = lr * step, the
   same wide vocabulary):
   the closed-form linear phase and the signature flow against training, and the escape time
   against gamma, theory lines and measured points (theory/closed_form.md).
"""

from __future__ import annotations

import jax
import numpy as np

from ctx_staircase import budget, comparison, geometry, metrics, plots, signatures, sweep, train
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.regime import PRIMARY


def sizes(full: bool = False, tiny: bool = False) -> tuple[int, int, int, tuple[int, ...]]:
    """``(N, d, epochs, snapshots)`` of the staircase runs."""
    N, d, epochs = (8, 16, 120) if tiny else (40, 128, 1200)
    snapshots = tuple(sorted({*range(0, epochs + 1, 25), *train.default_snapshots(epochs)}))
    return N, d, epochs, snapshots


def theory_gammas(full: bool = False, tiny: bool = False) -> tuple[float, ...]:
    if tiny:
        return (0.8, 1.2)
    return (0.6, 0.8, 1.0, 1.2, 1.4, 1.6) if full else (0.8, 1.0, 1.2, 1.4)


def memory_bytes(full: bool = False, tiny: bool = False) -> int:
    """Peak bytes of the run (`budget` estimates): the larger of its training sweeps (add and
    mod, one lane each) and its theory run on add; the stages run one after another."""
    N, d, epochs, snapshots = sizes(full, tiny)
    peaks = []
    for task in ("add", "mod"):
        ds = PRIMARY.make(task, N=N)
        config = PRIMARY.train_config(ds, epochs=epochs, snapshots=snapshots)
        peaks.append(budget.train_bytes("ffn", ds, config, lanes=1, d=d))
    add = PRIMARY.make("add", N=N)
    peaks.append(
        budget.theory_bytes(add, gammas=theory_gammas(full, tiny), d=d, steps=THEORY_STEPS[tiny])
    )
    return max(peaks)


THEORY_STEPS = {True: 200, False: 900}  # by ``tiny``


def run(full: bool = False, tiny: bool = False) -> Outcome:
    """The flagship; ``tiny`` shrinks it to a smoke test (N=8, d=16, a few hundred steps)."""
    N, d, epochs, snapshots = sizes(full, tiny)
    claims, figures, numbers = [], {}, {}
    staircase_axes = plots.figure(2, 3, panel=(5.0, 4.0))
    for row, task in enumerate(("add", "mod")):
        ds = PRIMARY.make(task, N=N)
        config = PRIMARY.train_config(ds, epochs=epochs, snapshots=snapshots)
        result = sweep.train_sweep("ffn", ds, config, gammas=[1.0], seeds=[0], d=d)
        trajectory = result.lane(0)
        steps = np.asarray(trajectory.steps)
        curves = geometry.alignment_curves(
            result.trajectory.W_E, steps, ds, probe_snapshots=40 if full else 4 if tiny else 10
        )
        numbers[task] = _staircase_numbers(ds, trajectory, curves)
        _draw_staircase(staircase_axes[1][row], ds, task, trajectory, curves, numbers[task])
        claims += _staircase_claims(task, numbers[task])
    figures["staircase"] = staircase_axes[0]

    with jax.enable_x64(True):  # the theory comparison runs in float64, this block only
        add = PRIMARY.make("add", N=N)
        gammas = theory_gammas(full, tiny)
        theory = comparison.theory_vs_training(
            add,
            gammas=gammas,
            max_orders=(0, 1),
            lr=0.5,
            steps=THEORY_STEPS[tiny],
            d=d,
            activation="poly:1,0.5",
        )
        title = f"add N={N}, V={add.vocab_size}, FFN d={d}, σ(z)=z+z²/2, GD lr 0.5"
        figures["theory_overlay"] = plots.theory_overlay_figure(theory, title)
        figures["escape_time"] = plots.escape_time_figure(theory, title)
        summary = comparison.experiment_summary(theory)
        numbers["theory"] = summary
    closed = [r["comparisons"]["closed_form"] for r in summary["runs"]]
    ratios = [c["escape_ratio"] for c in closed]
    slopes = summary["escape_slope"]
    frozen = [c["null_weight_rel_error_max"] for c in closed]
    escapes = np.array([c["escape_time"]["simulation"] for c in closed])
    constant = np.abs(np.mean(escapes) / escapes - 1)
    gammas_arr = np.asarray(gammas, dtype=np.float64)
    through_origin = float(gammas_arr @ escapes / (gammas_arr @ gammas_arr))
    theory_regime = f"full-batch GD lr 0.5, σ = z + z²/2, V = {add.vocab_size}, float64"
    claims += [
        Claim(
            "theory",
            "closed form matches training before escape (t <= t_esc/2)",
            "max rel. error of W_E "
            + ", ".join(f"{c['weight_rel_error_max']:.3f}" for c in closed),
            "<= 0.05",
            max(c["weight_rel_error_max"] for c in closed) <= 0.05,
            kind="beyond",
            regime=theory_regime,
            null="W_E(t) = W_E(0): max rel. error " + ", ".join(f"{e:.3f}" for e in frozen),
            null_passed=bool(max(frozen) <= 0.05),
        ),
        Claim(
            "theory",
            "escape times predicted",
            "ratios " + ", ".join(f"{r:.3f}" for r in ratios),
            "|ratio - 1| <= 0.10",
            max(abs(r - 1) for r in ratios) <= 0.10,
            kind="beyond",
            regime=theory_regime,
            null="constant (mean measured escape): |ratio - 1| up to " + f"{constant.max():.3f}",
            null_passed=bool(constant.max() <= 0.10),
        ),
        Claim(
            "§8.14",
            "escape time linear in gamma",
            f"slope measured {slopes['simulation']:.0f}, closed form {slopes['closed_form']:.0f}",
            "within 10%",
            abs(slopes["closed_form"] / slopes["simulation"] - 1) <= 0.10,
            kind="beyond",
            regime=theory_regime,
            null=f"t_esc ∝ γ through the origin (fitted): slope {through_origin:.0f}",
            null_passed=bool(abs(through_origin / slopes["simulation"] - 1) <= 0.10),
        ),
    ]
    return Outcome(
        claims,
        figures,
        numbers,
        {
            "N": N,
            "model": f"ffn relu d={d}",
            "gamma": 1.0,
            **PRIMARY.describe(optimizer="gd", lr=1.0),
            "epochs": epochs,
            "theory": "poly:1,0.5, GD lr 0.5",
            "theory_gammas": list(gammas),
            "tiny": tiny,
        },
    )


def _staircase_numbers(ds, trajectory, curves) -> dict:
    numbers_ids = ds.groups["numbers"]
    labels = np.unique(ds.labels)
    phi1 = signatures.label_signature(ds, 1, alphas=numbers_ids, labels=labels, context=numbers_ids)
    S_emb = np.asarray(metrics.cosine_matrix(np.asarray(trajectory.W_E)[:, numbers_ids]))
    ks = np.arange(0, numbers_ids.size // 2 + 1)
    spectrum = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks))  # [S, K]
    steps = np.asarray(trajectory.steps)
    early = int(np.searchsorted(steps, 100))
    peak0 = int(np.nanargmax(curves.rho0[0]))
    probe = curves.probe_corr[0]
    mean_cosine = np.asarray(metrics.upper_triangle(S_emb)).mean(axis=-1)  # [S]
    return {
        "N": int(numbers_ids.size),
        "steps": steps,
        "rho0": curves.rho0[0],
        "rho0_method": curves.rho0_method,
        "rho0_init": float(curves.rho0[0, 0]),
        "rho0_peak": float(curves.rho0[0, peak0]),
        "rho0_peak_step": int(steps[peak0]),
        "rho0_final": float(curves.rho0[0, -1]),
        "probe_steps": curves.probe_steps,
        "probe_corr": probe,
        "probe_init": float(probe[0]),
        "probe_final": float(probe[-1]),
        "spectrum": spectrum,
        "k0_one_minus_mse": bool(metrics.constant_frequencies(phi1, ks)[0]),
        "k_best_init": int(np.argmax(spectrum[0])),
        "k_best_early": int(np.argmax(spectrum[early])),
        "k_best_late": int(np.argmax(spectrum[-1])),
        "k_star_late": int(1 + np.argmax(spectrum[-1, 1:])),
        "mean_cosine_init": float(mean_cosine[0]),
        "mean_cosine_early": float(mean_cosine[early]),
        "accuracy_early": float(trajectory.accuracy[early]),
        "final_accuracy": float(trajectory.accuracy[-1]),
    }


def _staircase_claims(task: str, n: dict) -> list[Claim]:
    """The staircase claims with their nulls: the untrained init (snapshot 0) by the same rule."""
    regime = PRIMARY.name
    if task == "add":
        rise = Claim(
            "§8.3",
            "add: rho_0 peaks near 1 early, then declines",
            f"peak {n['rho0_peak']:.3f} at epoch {n['rho0_peak_step']}, "
            f"final {n['rho0_final']:.3f}",
            "peak >= 0.9 and final < peak [R]",
            n["rho0_peak"] >= 0.9 and n["rho0_final"] < n["rho0_peak"],
            regime=regime,
            null=f"init: rho_0 {n['rho0_init']:.3f}",
            null_passed=n["rho0_init"] >= 0.9,
        )
    else:
        bound = 2 / n["N"]
        rise = Claim(
            "Fig. 3A/B",
            "mod: no progress and one collapsed direction early (epoch 100)",
            f"accuracy {n['accuracy_early']:.3f}, mean off-diagonal S^emb "
            f"{n['mean_cosine_early']:.3f}",
            f"accuracy <= 2/N = {bound:.3f} and mean S^emb >= 0.9 [R]",
            n["accuracy_early"] <= bound and n["mean_cosine_early"] >= 0.9,
            regime=regime,
            null=f"init: mean S^emb {n['mean_cosine_init']:.3f}",
            null_passed=n["mean_cosine_init"] >= 0.9,
        )
    k0 = "k = 0 (1−MSE)" if n["k0_one_minus_mse"] else "k = 0"
    frequency = Claim(
        "§8.6",
        f"{task}: low frequencies dominate early (epoch 100)",
        f"argmax_k early {n['k_best_early']}, late {n['k_best_late']}; late argmax_(k>=1) "
        f"{n['k_star_late']} ({k0} is the zero-order geometry)",
        "early argmax_k <= 2 [R 'small']",
        n["k_best_early"] <= 2,
        regime=regime,
        null=f"init: argmax_k {n['k_best_init']}",
        null_passed=n["k_best_init"] <= 2,
    )
    return [
        rise,
        Claim(
            "§8.5",
            f"{task}: first-order probe beats rho_0 after the early phase",
            f"final probe {n['probe_final']:.3f}, rho_0 {n['rho0_final']:.3f} ({n['rho0_method']})",
            "probe > rho_0 at the end",
            n["probe_final"] > n["rho0_final"],
            regime=regime,
            null=f"init: probe {n['probe_init']:.3f}, rho_0 {n['rho0_init']:.3f}",
            null_passed=n["probe_init"] > n["rho0_init"],
        ),
        frequency,
    ]


def _draw_staircase(axes, ds, task, trajectory, curves, n) -> None:
    steps = np.maximum(n["steps"], 1)
    axes[0].plot(steps, trajectory.loss, color="k", label="loss (nats)")
    axes[0].plot(steps, trajectory.accuracy, color="C3", label="accuracy")
    plots.axis_labels(
        axes[0],
        y="loss (nats), accuracy",
        title=f"{task} N={ds.groups['numbers'].size}: loss, accuracy",
    )
    axes[1].plot(
        steps,
        n["rho0"],
        color=plots.order_colour(0),
        label=f"$\\rho_0$ vs $S^{{sig,(0)}}$ ({n['rho0_method']})",
    )
    axes[1].plot(
        np.maximum(n["probe_steps"], 1),
        n["probe_corr"],
        "o-",
        color=plots.order_colour(1),
        ms=3,
        label="first-order probe (held out)",
    )
    plots.axis_labels(axes[1], y=plots.ALIGNMENT, title=f"{task}: the staircase")
    # the snapshots are not evenly spaced (dense early): each column spans its own epochs
    image = axes[2].pcolormesh(
        n["steps"],
        np.arange(n["spectrum"].shape[1]),
        n["spectrum"].T,
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        shading="nearest",
    )
    axes[2].grid(False)
    plots.axis_labels(
        axes[2],
        y="frequency $k$" + (" ($k$ = 0: 1−MSE)" if n["k0_one_minus_mse"] else ""),
        title=f"{task}: $\\rho_{{(1),k}}(t)$",
    )
    plots.colorbar(axes[2].figure, image, axes[2], label="Pearson", shrink=1.0)
    for ax in axes[:2]:
        ax.set_xscale("log")
        plots.legend(ax)
    for ax in axes:
        ax.set_xlabel("epoch = gradient-flow time (full-batch GD, lr 1)")
