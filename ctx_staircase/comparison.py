"""Theory against simulation: one set of numbers from two independent trajectories.

A theory trajectory (the closed form, or a signature-flow ODE) and a training trajectory go in on
the same time grid ``t = lr * step``; `compare` returns the numbers of theory/closed_form.md §5:

- the relative Frobenius error of ``W_E(t)`` and of the Gram matrix ``W_E W_E^T`` in the window
  before escape (``t <= window * t_esc``, measured escape; default the first half of the plateau),
  next to the same error of the null predictor "nothing moves", ``W_E(t) = W_E(0)``: a theory
  is informative only where it beats that null;
- the distance (max and mean absolute difference) between the ``rho_m(t)`` curves, m = 0, 1;
- predicted and measured escape times, both by `closed_form.logit_scale` crossing ``threshold``;
- predicted and measured onset times of order-m alignment: the first time ``rho_m(t)`` reaches
  half of its maximum over the run (theory/closed_form.md eq. C9).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ctx_staircase import closed_form, geometry, metrics, signatures
from ctx_staircase.dataset import TokenDataset


class Trajectory(NamedTuple):
    """Weights over time: ``ts [T]``, ``W_E [T, V, d]``, ``W_U [T, V, d]``."""

    ts: np.ndarray
    W_E: np.ndarray
    W_U: np.ndarray


def alignment_orders(ds: TokenDataset, W_E, *, group: str | None = None) -> np.ndarray:
    """``rho_0(t)`` and ``rho_1(t)`` of an embedding trajectory, ``[2, T]``.

    ``rho_0`` is the Pearson alignment with ``S^{sig,(0)}`` (1-MSE where that is constant);
    ``rho_1`` is the best frequency-resolved first-order alignment ``max_{k>=1} rho_{(1),k}``
    (SPEC §3, with the context restricted to the group, p = group size).
    """
    alphas = geometry.group_tokens(ds, group or geometry.default_group(ds))
    labels = np.unique(ds.labels[ds.weights > 0])
    S_emb = np.asarray(metrics.cosine_matrix(np.asarray(W_E)[:, alphas]))
    phi0 = signatures.label_signature(ds, 0, alphas=alphas, labels=labels)
    rho0 = np.asarray(metrics.alignment(S_emb, np.asarray(metrics.cosine_matrix(phi0))).value)
    if ds.L < 2:
        return np.stack([rho0, np.full_like(rho0, np.nan)])
    phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
    ks = np.arange(1, alphas.size // 2 + 1)
    rho1 = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks)).max(axis=-1)
    return np.stack([rho0, rho1])


def onset_time(ts, curve) -> float:
    """First time the curve reaches half of its maximum (eq. C9); NaN for a flat curve."""
    curve = np.asarray(curve, dtype=np.float64)
    if not np.any(np.isfinite(curve)) or np.nanmax(curve) <= 0:
        return float("nan")
    return closed_form.crossing_time(ts, np.maximum(curve, 1e-12), 0.5 * np.nanmax(curve))


def compare(
    theory: Trajectory,
    simulation: Trajectory,
    ds: TokenDataset,
    *,
    coefficients,
    threshold: float = 0.5,
    window: float = 0.5,
    group: str | None = None,
) -> dict:
    """Every comparison number between a theory and a simulated trajectory (module docstring)."""
    if not np.allclose(theory.ts, simulation.ts):
        raise ValueError("theory and simulation must share the time grid ts")
    ts = np.asarray(simulation.ts, dtype=np.float64)
    escape, scales = {}, {}
    for name, traj in (("theory", theory), ("simulation", simulation)):
        scales[name] = np.asarray(
            closed_form.logit_scale(
                jnp.asarray(traj.W_E), jnp.asarray(traj.W_U), ds.tokens, tuple(coefficients)
            )
        )
        escape[name] = closed_form.crossing_time(ts, scales[name], threshold)
    end = window * (escape["simulation"] if np.isfinite(escape["simulation"]) else ts[-1])
    before = ts <= end
    W_th, W_sim = np.asarray(theory.W_E), np.asarray(simulation.W_E)
    weight_error = _relative(W_th[before], W_sim[before], axes=(1, 2))
    # the null predictor "nothing moves", W_E(t) = W_E(0), scored on the same window
    frozen_error = _relative(W_sim[:1], W_sim[before], axes=(1, 2))
    gram_th = np.einsum("tvd,twd->tvw", W_th[before], W_th[before])
    gram_sim = np.einsum("tvd,twd->tvw", W_sim[before], W_sim[before])
    gram_error = _relative(gram_th, gram_sim, axes=(1, 2))
    rho_th, rho_sim = (
        alignment_orders(ds, W_th, group=group),
        alignment_orders(ds, W_sim, group=group),
    )
    gap = np.abs(rho_th - rho_sim)
    return {
        "escape_threshold": threshold,
        "window_end": float(end),
        "weight_rel_error_max": float(weight_error.max()),
        "null_weight_rel_error_max": float(frozen_error.max()),
        "gram_rel_error_max": float(gram_error.max()),
        "escape_time": escape,
        "escape_ratio": escape["theory"] / escape["simulation"],
        "rho_distance_max": [float(np.nanmax(g)) for g in gap],
        "rho_distance_mean": [float(np.nanmean(g)) for g in gap],
        "onset_time": {
            "theory": [onset_time(ts, c) for c in rho_th],
            "simulation": [onset_time(ts, c) for c in rho_sim],
        },
        "rho": {"theory": rho_th, "simulation": rho_sim},
        "logit_scale": scales,
    }


def _relative(a: np.ndarray, b: np.ndarray, axes) -> np.ndarray:
    return np.linalg.norm(a - b, axis=axes) / np.linalg.norm(b, axis=axes)


def theory_vs_training(
    ds: TokenDataset,
    *,
    model: str = "ffn",
    gammas=(0.6, 0.8, 1.0, 1.2, 1.4),
    max_orders=(0, 1),
    seed: int = 0,
    d: int = 128,
    activation: str = "poly:1,0.5",
    lr: float = 0.2,
    steps: int = 1000,
    snapshot_every: int = 10,
    threshold: float = 0.5,
    prediction: str = "uniform",
) -> dict:
    """Integrate the theory and train the same models, then `compare` them lane by lane.

    For every gamma (same seed, so the same standard-normal draw scaled by ``d^{-gamma}``):
    full-batch GD training (`sweep.train_sweep`), the closed form (FFN: eq. C3) and the
    signature-flow ODE for every ``max_order`` (FFN: `flows.ffn_signature_flow`; attention-only:
    the uniform-attention flow, which has no context order), all on ``t = lr * step``. The ODE
    solves run as one vmapped call over gamma x max_order.

    Returns:
        A dict with ``ts``, the per-lane trajectories and one `compare` dict per (gamma, theory),
        plus the escape-time law: measured and predicted escape times against gamma and their
        slopes, next to the analytic slope ``ln d / (C_1 s_1)`` (eq. C8).
    """
    import jax

    from ctx_staircase import activations, flows, ode, sweep, train

    if model not in ("ffn", "attention"):
        raise ValueError(f"model must be 'ffn' or 'attention'; got {model!r}")
    act = activations.get(activation)
    coefficients = activations.effective_coefficients(act)
    gammas = np.asarray(gammas, dtype=np.float64)
    max_orders = tuple(int(m) for m in max_orders)
    if any(not 0 <= m <= ds.L - 1 for m in max_orders):
        raise ValueError(f"max_orders must lie in [0, L-1] = [0, {ds.L - 1}]; got {max_orders}")
    snapshots = tuple(range(0, steps + 1, snapshot_every))
    ts = lr * np.asarray(snapshots, dtype=np.float64)
    model_kwargs = dict(d=d, dtype="float64")
    if model == "ffn":
        model_kwargs["activation"] = activation
    else:
        model_kwargs["positional"] = False  # the theory has no positional embeddings
    config = train.TrainConfig(optimizer="gd", lr=lr, steps=steps, snapshots=snapshots)
    trained = sweep.train_sweep(model, ds, config, gammas=gammas, seeds=[seed], **model_kwargs)

    initial = [
        train.init_state(model, ds, gamma=float(g), seed=seed, **model_kwargs)[1] for g in gammas
    ]
    keys = ("W_E", "W_U") if model == "ffn" else ("W_E", "W_U", "W_O", "W_V")
    y0 = {k: jnp.stack([state[k][...] for state in initial]) for k in keys}
    # Only occurring tokens carry signature mass: restricting the axes to them keeps the flow's
    # contractions small (4-6x faster on add; benchmarks/README.md) and changes no number.
    occurring = np.unique(ds.tokens)
    sigs = signatures.signature_set(
        ds,
        max(max_orders) if model == "ffn" else 0,
        alphas=occurring,
        labels=np.unique(ds.labels[ds.weights > 0]),
        context=occurring,
    )
    M = flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
    if model == "ffn":
        field = flows.ffn_signature_flow(sigs, coefficients, prediction=prediction)
    else:
        field = flows.attention_uniform_flow(sigs, ds.vocab_size)
        max_orders = (0,)
    field = _frozen_past(field, cap=1.0)
    lanes_y0 = jax.tree.map(lambda x: jnp.repeat(x, len(max_orders), axis=0), y0)
    lanes_order = jnp.tile(jnp.asarray(max_orders), len(gammas))

    def solve(y, order):
        return ode.integrate(
            field, y, jnp.asarray(ts), order, rtol=1e-7, atol=1e-12, max_steps=20_000
        )

    solutions = jax.jit(jax.vmap(solve))(lanes_y0, lanes_order)
    runs = []
    for i, gamma in enumerate(gammas):
        sim = Trajectory(ts, trained.trajectory.W_E[i], trained.trajectory.W_U[i])
        theories = {}
        if model == "ffn":
            solution = closed_form.linear_solution(M, y0["W_E"][i], y0["W_U"][i], coefficients[0])
            W_E, W_U = solution(ts)
            theories["closed_form"] = Trajectory(ts, np.asarray(W_E), np.asarray(W_U))
        for j, m in enumerate(max_orders):
            lane = i * len(max_orders) + j
            name = f"signature_flow_m{m}" if model == "ffn" else "uniform_attention_flow"
            theories[name] = Trajectory(
                ts, np.asarray(solutions.ys["W_E"][lane]), np.asarray(solutions.ys["W_U"][lane])
            )
            theories[name + "_ok"] = bool(solutions.ok[lane])
        comparisons = {
            name: compare(theory, sim, ds, coefficients=coefficients, threshold=threshold)
            for name, theory in theories.items()
            if isinstance(theory, Trajectory)
        }
        runs.append(
            {
                "gamma": float(gamma),
                "status": trained.status[i],
                "simulation": sim,
                "theories": theories,
                "comparisons": comparisons,
            }
        )
    top = float(np.linalg.svd(M, compute_uv=False)[0])
    escape = {
        "gamma": gammas.tolist(),
        "simulation": [
            r["comparisons"][next(iter(r["comparisons"]))]["escape_time"]["simulation"]
            for r in runs
        ],
    }
    for name in runs[0]["comparisons"]:
        escape[name] = [r["comparisons"][name]["escape_time"]["theory"] for r in runs]
    slopes = {name: _slope(gammas, values) for name, values in escape.items() if name != "gamma"}
    slopes["analytic"] = float(np.log(d) / (coefficients[0] * top))
    return {
        "ts": ts,
        "threshold": threshold,
        "coefficients": coefficients,
        "top_singular_value": top,
        "runs": runs,
        "escape": escape,
        "escape_slope": slopes,
    }


def experiment_summary(experiment: dict) -> dict:
    """The JSON-ready numbers of `theory_vs_training` (no trajectories)."""
    runs = [
        {
            "gamma": run["gamma"],
            "status": run["status"],
            "solver_ok": {k[:-3]: v for k, v in run["theories"].items() if k.endswith("_ok")},
            "comparisons": {
                name: {k: v for k, v in c.items() if k not in ("rho", "logit_scale")}
                for name, c in run["comparisons"].items()
            },
        }
        for run in experiment["runs"]
    ]
    keys = ("threshold", "coefficients", "top_singular_value", "escape", "escape_slope")
    return {**{k: experiment[k] for k in keys}, "runs": runs}


def _frozen_past(field, cap: float):
    """Stop a flow once some weight reaches ``cap`` in absolute value (far past escape).

    The truncated flows have no softmax saturation, so with ``C_2 != 0`` they blow up in finite
    time after escape; the theory is only compared before escape, and freezing there keeps the
    adaptive solver from chasing the blow-up.
    """

    def guarded(t, y, args):
        dy = field(t, y, args)
        running = jnp.all(jnp.asarray([jnp.max(jnp.abs(v)) < cap for v in y.values()]))
        return {k: jnp.where(running, v, jnp.zeros_like(v)) for k, v in dy.items()}

    return guarded


def _slope(gammas, values) -> float:
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.asarray(gammas)[keep], values[keep], 1)[0])
