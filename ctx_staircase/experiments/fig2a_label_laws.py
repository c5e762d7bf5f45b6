"""Fig. 2A: the anchor embedding of Task 1 encodes its prescribed label law (SPEC §8 item 4).

Task 1 (SPEC §4.1): inputs ``(a, x1, x2)`` with anchor ``a = 100`` and ``x_i in X = {0..50}``,
all 2601 pairs, one label per input drawn once from ``p_a`` (``labels="sampled"``), for the four
laws uniform / normal(25, 1) / Poisson(10) / exponential(rate 5). After 200 epochs the model's
prediction for the anchor is compared with ``p_a`` over the label vocabulary ``X``
(``metrics.distribution_match``: Pearson r, KL(p_a || p̂_a), JSD).

Conventions ([GAP] choices, also in ``config``):

- Model: ReLU FFN (SPEC §5.1), ``d = 128``, std ``d^{-gamma}`` init with ``gamma = 1.0``, seed 0,
  float32. Training: full-batch Adam, lr 1e-3, 200 steps (= epochs).
- Readout [GAP/R]: SPEC §3 writes ``p̂_a = softmax(W^U w^E_a)``, which skips the activation the
  model applies. The primary readout is the anchor alone passed through the model's FFN,
  ``p̂_a = softmax(W^U σ(w^E_a))`` restricted to the logits of X (the model's prediction for the
  one-token input ``(a)``). The literal SPEC formula ``softmax(W^U w^E_a)`` is reported too.
- The uniform law has a constant ``p_a``, so its Pearson r is undefined (``metrics`` reports 0);
  for that law the Pearson half of the criterion is not applicable and only the JSD decides. The
  r against the empirical zero-order signature ``phi^{y;0}_a`` (sampled labels, not constant) is
  reported instead.
- Diagnostic [R]: the same runs with full-batch GD (lr 0.3), and the readout at temperature
  ``1/L`` (``softmax(L W^U σ(w^E_a))``, L = 3 tokens per input), to test the explanation of the
  Adam result (see the claims' notes).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ctx_staircase import metrics, signatures, sweep, tasks, train
from ctx_staircase.experiments import Claim, Outcome

NAME = "fig2a_label_laws"
TITLE = "Task 1: the anchor's predicted label law matches p_a (Fig. 2A)"

LAWS = ("uniform", "normal", "poisson", "exponential")
PEARSON_MIN = 0.9  # SPEC §8.4 [R]
JSD_MAX = 0.05  # SPEC §8.4 [R]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def _match(p, q) -> dict:
    m = metrics.distribution_match(p, q)
    return {"pearson": float(m.pearson), "kl": float(m.kl), "jsd": float(m.jsd)}


def _readouts(W_E: np.ndarray, W_U: np.ndarray, anchor: int, X: np.ndarray, L: int) -> dict:
    """The anchor's predicted law over X: through the FFN, literal, and at temperature 1/L."""
    w = np.asarray(W_E[anchor], dtype=np.float64)
    U = np.asarray(W_U[X], dtype=np.float64)
    ffn_logits = U @ np.maximum(w, 0.0)
    return {
        "ffn": _softmax(ffn_logits),
        "literal": _softmax(U @ w),
        "ffn_times_L": _softmax(L * ffn_logits),
    }


def _train(ds, optimizer: str, lr: float, cfg: dict):
    config = train.TrainConfig(
        optimizer=optimizer, lr=lr, steps=cfg["steps"], snapshots=(0, cfg["steps"])
    )
    result = sweep.train_sweep(
        "ffn",
        ds,
        config,
        gammas=[cfg["gamma"]],
        seeds=list(cfg["seeds"]),
        d=cfg["d"],
        activation=cfg["activation"],
    )
    return result


def run(full: bool = False) -> Outcome:
    cfg = dict(
        task="label_law",
        laws=list(LAWS),
        anchor=100,
        x_max=50,
        labels="sampled",
        label_seed=0,
        model="ffn",
        d=128,
        activation="relu",
        gamma=1.0,
        seeds=[0, 1, 2] if full else [0],
        optimizer="adam",
        lr=1e-3,
        steps=200,
        dtype="float32",
        readout="softmax over X of W_U relu(w_a) (anchor alone through the FFN)",
        diagnostic_optimizer="gd",
        diagnostic_lr=0.3,
    )
    numbers: dict = {"laws": {}}
    curves: dict = {}
    for law in LAWS:
        ds = tasks.make(
            "label_law",
            law=law,
            labels="sampled",
            anchor=cfg["anchor"],
            x_max=cfg["x_max"],
            seed=cfg["label_seed"],
        )
        X = ds.groups["numbers"]
        anchor = int(ds.groups["anchors"][0])
        p = tasks.label_law_distribution(law, cfg["x_max"])
        phi0 = signatures.label_signature(ds, 0, alphas=[anchor], labels=X)[0]
        entry = {"empirical_signature_vs_p": _match(p, phi0)}
        for tag, optimizer, lr in (
            ("adam", cfg["optimizer"], cfg["lr"]),
            ("gd", cfg["diagnostic_optimizer"], cfg["diagnostic_lr"]),
        ):
            result = _train(ds, optimizer, lr, cfg)
            traj = result.trajectory
            per_seed = []
            for lane in range(len(result.seed)):
                W_E, W_U = traj.W_E[lane, -1], traj.W_U[lane, -1]
                q = _readouts(W_E, W_U, anchor, X, ds.L)
                norms = np.linalg.norm(np.asarray(W_E, dtype=np.float64), axis=1)
                per_seed.append(
                    {
                        "seed": int(result.seed[lane]),
                        "final_loss": float(traj.loss[lane, -1]),
                        "status": result.status[lane],
                        "ffn": _match(p, q["ffn"]),
                        "ffn_vs_empirical_signature": _match(phi0, q["ffn"]),
                        "literal": _match(p, q["literal"]),
                        "ffn_times_L": _match(p, q["ffn_times_L"]),
                        "anchor_norm": float(norms[anchor]),
                        "number_norm_mean": float(norms[X].mean()),
                    }
                )
                if lane == 0:
                    curves[(law, tag)] = q
            entry[tag] = per_seed
        curves[(law, "p")] = p
        numbers["laws"][law] = entry

    claims = []
    for law in LAWS:
        runs = numbers["laws"][law]["adam"]
        r = [s["ffn"]["pearson"] for s in runs]
        jsd = [s["ffn"]["jsd"] for s in runs]
        r_emp = [s["ffn_vs_empirical_signature"]["pearson"] for s in runs]
        lit = runs[0]["literal"]
        if law == "uniform":
            ok = max(jsd) <= JSD_MAX
            measured = (
                f"r n/a (p_a constant; r vs empirical φ^(y;0)_a = {min(r_emp):.3f}), "
                f"JSD {max(jsd):.4f}; literal W_U w_a: JSD {lit['jsd']:.4f}"
            )
            criterion = f"JSD ≤ {JSD_MAX} (Pearson ≥ {PEARSON_MIN} undefined for a constant p_a)"
        else:
            ok = min(r) >= PEARSON_MIN and max(jsd) <= JSD_MAX
            measured = (
                f"r {min(r):.3f}, KL {max(s['ffn']['kl'] for s in runs):.3f}, JSD {max(jsd):.4f}; "
                f"literal W_U w_a: r {lit['pearson']:.3f}, JSD {lit['jsd']:.4f}"
            )
            criterion = f"Pearson ≥ {PEARSON_MIN} and JSD ≤ {JSD_MAX}"
        note = ""
        if not ok:
            tempered = runs[0]["ffn_times_L"]
            note = (
                f"direction right, scale wrong: at temperature 1/L the same readout has JSD "
                f"{tempered['jsd']:.4f} (r {tempered['pearson']:.3f}). Adam moves every embedding "
                f"coordinate at ~lr per step whatever its gradient size, so the 51 number tokens "
                f"(same zero-order signature ≈ p_a) grow as fast as the anchor (norms "
                f"{runs[0]['number_norm_mean']:.2f} vs {runs[0]['anchor_norm']:.2f}) and the "
                f"anchor carries only ~1/L of the logit; see the GD claim"
            )
        claims.append(
            Claim(
                "§8.4",
                f"{law}: softmax(W_U σ(w_a)) ≈ p_a at epoch 200 (Adam)",
                measured,
                criterion,
                ok,
                note,
            )
        )
    gd_ok = []
    gd_parts = []
    for law in LAWS:
        s = numbers["laws"][law]["gd"][0]
        r_ok = law == "uniform" or s["ffn"]["pearson"] >= PEARSON_MIN
        gd_ok.append(r_ok and s["ffn"]["jsd"] <= JSD_MAX)
        r_text = "n/a" if law == "uniform" else f"{s['ffn']['pearson']:.3f}"
        gd_parts.append(f"{law}: r {r_text}, JSD {s['ffn']['jsd']:.4f}")
    claims.append(
        Claim(
            "§8.4 (diagnostic, [GAP] optimizer)",
            "same, trained with full-batch GD (lr 0.3, 200 steps)",
            "; ".join(gd_parts),
            f"Pearson ≥ {PEARSON_MIN} (not for uniform) and JSD ≤ {JSD_MAX}, all four laws",
            all(gd_ok),
            "under GD the anchor's gradient is ~25x each number's (it occurs in every input), so "
            "the anchor alone carries the learned law",
        )
    )
    figure = _figure(curves, numbers)
    return Outcome(claims, {"panels": figure}, numbers, cfg)


def _figure(curves: dict, numbers: dict):
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.2), layout="constrained")
    for ax, law in zip(axes.ravel(), LAWS, strict=True):
        p = curves[(law, "p")]
        y = np.arange(p.size)
        q_adam, q_gd = curves[(law, "adam")]["ffn"], curves[(law, "gd")]["ffn"]
        support = np.flatnonzero((p > 2e-3) | (q_adam > 2e-3) | (q_gd > 2e-3))
        lo, hi = max(support.min() - 2, 0), min(support.max() + 2, p.size - 1)
        ax.bar(y, p, color="0.75", width=0.9, label="$p_a$ (prescribed)")
        ax.plot(y, q_adam, "o-", ms=3, lw=1, color="C0", label="$\\hat p_a$, Adam (primary)")
        ax.plot(y, q_gd, "s--", ms=3, lw=1, color="C3", label="$\\hat p_a$, GD (diagnostic)")
        ax.set_xlim(lo - 0.5, hi + 0.5)
        adam = numbers["laws"][law]["adam"][0]["ffn"]
        gd = numbers["laws"][law]["gd"][0]["ffn"]
        r_adam = "n/a" if law == "uniform" else f"{adam['pearson']:.2f}"
        r_gd = "n/a" if law == "uniform" else f"{gd['pearson']:.2f}"
        ax.set_title(
            f"{law}\nAdam: r={r_adam} KL={adam['kl']:.3f} JSD={adam['jsd']:.3f} | "
            f"GD: r={r_gd} JSD={gd['jsd']:.3f}",
            fontsize=8,
        )
        ax.set_xlabel("label y ∈ X")
        ax.set_ylabel("probability")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        "Task 1, epoch 200: $p_a$ vs $\\hat p_a=\\mathrm{softmax}(W^U\\sigma(w^E_a))$ "
        "(ReLU FFN d=128, γ=1)",
        fontsize=10,
    )
    return fig
