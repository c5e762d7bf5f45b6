"""The flagship run: the context staircase on `add` and `mod`, with the theory beside it.

`ctx-staircase run` with no arguments runs this (CPU: about 3 minutes on 2 cores):

1. `add` and `mod` (N = 40), ReLU FFN (d = 128), small init (gamma = 1), in the primary regime
   of theory/regimes.md: full-batch GD at lr 1 for 1200 epochs (gradient-flow time t = epoch)
   with a label vocabulary twice the minimal one, the regime the gradient-flow theory describes;
2. the staircase: rho_0(t), the alignment with the zero-order signature geometry, against the
   held-out correlation of the first-order probe (paper eq. 7) over training;
3. the frequency heatmap rho_{(1),k}(t) (paper §4.5, Fig. 4);
4. the theory overlay on `add` (sigma(z) = z + z^2/2, full-batch GD so that t = lr * step, the
   same wide vocabulary):
   the closed-form linear phase and the signature flow against training, and the escape time
   against gamma, theory lines and measured points (theory/closed_form.md).
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from ctx_staircase import budget, comparison, metrics, plots, signatures, sweep, theories, train
from ctx_staircase.experiments import Claim, Outcome, regime
from ctx_staircase.experiments import fig3_staircase as fig3
from ctx_staircase.experiments import staircase_claims as scoring
from ctx_staircase.experiments import theory_vs_training as theory_claims
from ctx_staircase.experiments.common import scored
from ctx_staircase.experiments.regime import PRIMARY


def sizes(full: bool = False, tiny: bool = False) -> tuple[int, int, int, tuple[int, ...]]:
    """``(N, d, epochs, snapshots)`` of the staircase runs."""
    N, d, epochs = (8, 16, 120) if tiny else (40, 128, 1200)
    grid = {*range(0, epochs + 1, 25), *train.default_snapshots(epochs), *probe_epochs(tiny)}
    snapshots = tuple(sorted(grid | ({*fig3.SNAPSHOTS} if not tiny else set())))
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
    datasets = {task: PRIMARY.make(task, N=N) for task in ("add", "mod")}
    add = datasets["add"]
    # The three trainings compile their own programs, most of a small run's cost: two at a
    # time (the theory block scopes float64 in its own thread); figures stay on this thread.
    with ThreadPoolExecutor(max_workers=2) as pool:
        theory_run = pool.submit(_theory, add, theory_gammas(full, tiny), d, THEORY_STEPS[tiny])
        runs = {
            task: pool.submit(_measured, ds, epochs, snapshots, d, tiny, task == "mod")
            for task, ds in datasets.items()
        }
        for row, (task, ds) in enumerate(datasets.items()):
            measured = runs[task].result()
            numbers[task] = _staircase_numbers(ds, *measured)
            _draw_staircase(staircase_axes[1][row], ds, task, measured[0], numbers[task])
            claims += scored_claims(task, numbers[task], measured)
        theory = theory_run.result()
    figures["staircase"] = staircase_axes[0]

    with jax.enable_x64(True):
        title = f"add N={N}, V={add.vocab_size}, FFN d={d}, σ(z)=z+z²/2, GD lr 0.5"
        figures["theory_overlay"] = plots.theory_overlay_figure(theory, title)
        figures["escape_time"] = plots.escape_time_figure(theory, title)
        numbers["theory"] = comparison.experiment_summary(theory)
    claims += _theory_claims(theory, add.vocab_size)
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
            "theory_gammas": list(theory_gammas(full, tiny)),
            "tiny": tiny,
        },
        # the theory runs beside the staircase's trainings, which share the cores with it
        {"theory": comparison.cost_summary(theory)},
    )


def theory_rows(numbers: dict, config: dict) -> list[Claim]:
    """The flagship's theory rows of a saved run, scored again from ``numbers["theory"]``
    (`comparison.experiment_from_summary`) and ``config``."""
    vocab_size = PRIMARY.make("add", N=config["N"]).vocab_size
    return _theory_claims(comparison.experiment_from_summary(numbers["theory"]), vocab_size)


def saved_criteria(numbers: dict, config: dict) -> list[str]:
    """The criterion of each claim of a saved run, in `run`'s order, from its ``numbers`` and
    ``config``: the staircase claims' (`scored_claims`, whose verdicts need the accuracy and
    loss curves the record does not keep) and the theory rows' (`theory_rows`)."""
    texts = []
    for task in ("add", "mod"):
        n = numbers[task]
        first = (
            scoring.rho0_peak_criterion({"steps": np.asarray(n["steps"])})
            if task == "add"
            else scoring.collapse_criterion(n["N"])
        )
        texts += [
            first,
            scoring.probe_criterion(n["rho0_method"]),
            scoring.low_frequency_criterion(n["early_epoch"]),
        ]
    return texts + [c.criterion for c in theory_rows(numbers, config)]


def _theory_claims(theory: comparison.TheoryVsTraining, vocab_size: int) -> list[Claim]:
    """The closed form against training on add: its weights before escape, its escape times
    and the escape-time slope (§8.14), each against its null."""
    closed = theory.comparisons(theories.CLOSED_FORM)
    ratios = [c.escape_ratio for c in closed]
    slopes = theory.escape_slope
    nulls = theory_claims.null_numbers(theory)  # the same nulls as theory_vs_training's
    frozen = nulls["static_weight_rel_error_max"]
    constant = np.asarray(nulls["constant_escape_ratio"])
    through_origin = nulls["origin_escape_slope"]
    claim = functools.partial(
        Claim,
        kind="beyond",
        regime=f"full-batch GD lr 0.5, σ = z + z²/2, V = {vocab_size}, float64",
    )
    return [
        claim(
            "theory",
            "closed form matches training before escape (t <= t_esc/2)",
            "max rel. error of W_E " + ", ".join(f"{c.weight_rel_error_max:.3f}" for c in closed),
            f"<= {theory_claims.WEIGHT_ERROR}",
            null="W_E(t) = W_E(0): max rel. error " + ", ".join(f"{e:.3f}" for e in frozen),
            **scored(theory_claims.weights_match, [c.weight_rel_error_max for c in closed], frozen),
        ),
        claim(
            "theory",
            "escape times predicted",
            "ratios " + ", ".join(f"{r:.3f}" for r in ratios),
            f"|ratio - 1| <= {theory_claims.ESCAPE_RATIO}",
            null="constant (mean measured escape): |ratio - 1| up to "
            + f"{np.abs(constant - 1).max():.3f}",
            **scored(theory_claims.within(theory_claims.ESCAPE_RATIO), ratios, constant),
        ),
        claim(
            "§8.14",
            "escape time linear in gamma",
            f"slope measured {slopes.simulation:.0f}, closed form "
            f"{slopes.of(theories.CLOSED_FORM):.0f}, analytic {slopes.analytic:.0f}",
            f"closed-form and analytic slopes within {100 * theory_claims.SLOPE_GAP:.0f}% of "
            "measured",
            null=f"t_esc ∝ γ through the origin (fitted): slope {through_origin:.0f}",
            **scored(
                theory_claims.within(theory_claims.SLOPE_GAP),
                [s / slopes.simulation for s in (slopes.of(theories.CLOSED_FORM), slopes.analytic)],
                [through_origin / slopes.simulation],
            ),
        ),
    ]


def _theory(add, gammas, d: int, steps: int) -> comparison.TheoryVsTraining:
    """The closed form and the signature flows against GD (lr 0.5) on ``add``, in float64."""
    with jax.enable_x64(True):  # thread-local: this block only
        return comparison.theory_vs_training(
            add, gammas=gammas, max_orders=(0, 1), lr=0.5, steps=steps, d=d,
            activation="poly:1,0.5",
        )  # fmt: skip


def probe_epochs(tiny: bool = False) -> tuple[int, ...]:
    """The probe's epochs: Fig. 3's, so that the flagship and Fig. 3 score the same fits."""
    return (25, 50, 100, 120) if tiny else fig3.PROBE_EPOCHS


def _measured(ds, epochs: int, snapshots, d: int, tiny: bool, collapse: bool) -> tuple:
    """``(trajectory, measurement, shuffled measurement)`` of one task: seed 0 and its
    label-shuffled null, each measured by `fig3_staircase.measure` against the true signatures;
    with ``collapse``, the trained run's with the collapse the plateau flow predicts
    (`fig3_staircase.predicted_collapse`)."""
    sig = fig3.signatures_of(ds)
    cfg = {"probe_epochs": list(probe_epochs(tiny)), "probe_seed": 0, "early": None, "late": None}
    config = PRIMARY.train_config(ds, epochs=epochs, snapshots=snapshots)
    out = []
    for data in (ds, regime.shuffled_labels(ds, 0)):
        trajectory = sweep.train_sweep("ffn", data, config, gammas=[1.0], seeds=[0], d=d).lane(0)
        early = scoring.early_epoch({"steps": PRIMARY.epochs_of(trajectory.steps)})
        out.append(
            (
                trajectory,
                fig3.measure(sig, trajectory, PRIMARY, {**cfg, "early": early, "late": epochs}),
            )
        )
    if collapse:
        out[0][1]["collapse_predicted"] = fig3.predicted_collapse(ds, out[0][0], PRIMARY, epochs)
    return out[0][0], out[0][1], out[1][1]


def _staircase_numbers(ds, trajectory, measured: dict, shuffled: dict) -> dict:
    numbers_ids = ds.groups["numbers"]
    labels = np.unique(ds.labels)
    phi1 = signatures.label_signature(ds, 1, alphas=numbers_ids, labels=labels, context=numbers_ids)
    S_emb = np.asarray(metrics.cosine_matrix(np.asarray(trajectory.W_E)[:, numbers_ids]))
    ks = np.arange(0, numbers_ids.size // 2 + 1)
    spectrum = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks))  # [S, K]
    steps = measured["steps"]
    return {
        "N": int(numbers_ids.size),
        "steps": steps,
        "rho0": measured["rho0"],
        "rho0_method": measured["rho0_method"],
        "rho0_shuffled_labels": shuffled["rho0"],
        "probe_steps": measured["probe_steps"],
        "probe_corr": measured["probe_corr"],
        "probe_mse": measured["probe_mse"],
        "init_probe_corr_mse": measured["init_probe"],
        "mean_offdiag_S_emb": measured["mean_offdiag_S_emb"],
        "collapse_predicted": measured.get("collapse_predicted"),
        "spectrum": spectrum,
        "constant_ks": metrics.constant_frequencies(phi1, ks),
        **spectrum_numbers(spectrum, steps, int(scoring.early_epoch(measured))),
        "final_accuracy": float(trajectory.accuracy[-1]),
    }


def spectrum_numbers(spectrum, steps, early_epoch: int) -> dict:
    """What the staircase reads of the frequency spectrum ``rho_(1),k`` ``[S, K]`` (snapshots
    at epochs ``steps [S]``, frequencies k = 0..K-1): the ``early_epoch`` and the spectrum
    there, and at the last snapshot the best frequency ``k_best_late`` (k = 0 included) and
    ``k_star_late``, the best of k >= 1."""
    spectrum = np.asarray(spectrum)
    early = int(np.flatnonzero(np.asarray(steps) == early_epoch)[0])
    return {
        "early_epoch": early_epoch,
        "early_spectrum": spectrum[early],
        "k_best_late": int(np.argmax(spectrum[-1])),
        "k_star_late": int(1 + np.argmax(spectrum[-1, 1:])),
    }


def scored_claims(task: str, n: dict, measured: tuple) -> list[Claim]:
    """The flagship's six staircase claims, scored by the functions Fig. 3 and Fig. 4 use."""
    _, run, shuffled = measured
    regime_name, N = PRIMARY.name, n["N"]
    first = (
        scoring.rho0_peak_claim(run, shuffled, N, regime_name)
        if task == "add"
        else scoring.collapse_claim(run, N, regime_name)
    )
    frequency = scoring.low_frequency_claim(
        n["early_spectrum"],
        n["spectrum"][0],
        n["constant_ks"],
        task,
        regime_name,
        epoch=n["early_epoch"],
    )
    return [first, scoring.probe_claim(run, task, regime_name), frequency]


def _draw_staircase(axes, ds, task, trajectory, n) -> None:
    steps = np.maximum(n["steps"], 1)
    axes[0].plot(steps, trajectory.loss, color="k", label="loss (nats)")
    plots.axis_labels(
        axes[0], y="loss (nats)", title=f"{task} N={ds.groups['numbers'].size}: loss, accuracy"
    )
    accuracy = axes[0].twinx()  # its own axis: nats and a fraction share no scale
    accuracy.plot(steps, trajectory.accuracy, color="C3", label="accuracy")
    accuracy.set_ylim(0, 1.02)
    accuracy.set_ylabel("accuracy", color="C3")
    accuracy.tick_params(axis="y", colors="C3")
    accuracy.grid(False)
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
        y="frequency $k$" + (" ($k$ = 0: 1−MSE)" if n["constant_ks"][0] else ""),
        title=f"{task}: $\\rho_{{(1),k}}(t)$",
    )
    plots.colorbar(axes[2].figure, image, axes[2], label="Pearson", shrink=1.0)
    for ax in axes[:2]:
        ax.set_xscale("log")
    plots.legend(axes[0], handles=axes[0].get_lines() + accuracy.get_lines(), loc="center left")
    plots.legend(axes[1])
    for ax in axes:
        ax.set_xlabel("epoch = gradient-flow time (full-batch GD, lr 1)")
