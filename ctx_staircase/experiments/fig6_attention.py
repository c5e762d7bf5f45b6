"""Fig. 6: the staircase in the attention-only model, and attention routing on Task 3.

Reproduces the paper's Fig. 6A–H and 6I–L (§5, claim §8.9) and the attention-weighted flow of
§5.2 (Theorem 3), on the attention-only model (paper §5.1), d = 128, d_k = 64, seed 0, in a
`regime.Regime` (primary: full-batch GD at lr 1, ``V = 2 V_min``; Adam at lr 1e-3).

(a) ``add`` and ``mod`` (N = 20), gamma = 0.75 (claims) with gamma = 1.0 beside it, 3000 epochs
    (``full``: 10000): ``S^emb`` early and late next to ``S^{sig,(0)}`` and ``S^{sig,(1)}_k``,
    with ``rho_0(t)``, ``rho_{(1),k}(t)`` and the first-order probe.
(b) Task 3 (``anchor_parity``, L = 8), gamma = 1.0, n = 2000 (``full``: 10000), 200 epochs or
    1.5 t* of the depth-4 plateau (eq. A5) where longer: anchor and noise cosines, per-token
    attention on the anchor and on the noise, and the two groups' embedding norms.

Each GD run takes the stable step (halved at most `HALVINGS` times, flow time kept; a verdict
the halving changes is *not tested*), and a claim about the end of a diverged run is *not
tested*. Null of every claim: the untrained initialization. ``quick``: one gamma, 1000 epochs
for (a), n = 500 for (b); ``tiny``: d = 32, d_k = 16, (a) N = 10 for 300 epochs, (b) n = 200.

Conventions, the horizon, and what was found while setting this up (GD at lr 1 diverges at the
escape): theory/experiments.md, fig6_attention.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ctx_staircase import (
    closed_form,
    geometry,
    metrics,
    plots,
    signatures,
    sweep,
    train,
)
from ctx_staircase.experiments import Claim, Outcome, verdict
from ctx_staircase.experiments.common import (
    EndState,
    curvature_text,
    end_of_run,
    failure_class,
    joined_outcome,
    plateau_failure,
    scored,
    train_gammas,
)
from ctx_staircase.experiments.regime import PRIMARY, Regime

#: [R] thresholds (0.9 for rho_0 as in claim §8.3; the paper's others are qualitative).
RHO0_EARLY = 0.9
FOURIER_LATE = 0.8
PARITY_CORR = 0.9
NOISE_ALIGNED = 0.9
NOISE_NEAR_ZERO = 0.1  # late per-token noise attention <= this fraction of the uniform 1/L
ANCHOR_RISE = 0.1  # the anchor's attention rises by at least this much
EARLY_WINDOW = 300  # the early phase: epochs <= 300
PLATEAU_MARGIN = 1.5  # a GD horizon covers 1.5 t* of eq. A5
#: The GD step search (theory/regimes.md, "The stable step"): from the regime's step down by at
#: most this many halvings, the flow time kept, until a run ends finite.
HALVINGS = 3


#: The ``tiny`` smoke run: d = 32 (so eq. A5's plateau, and (b)'s horizon, are short), (a) one
#: gamma lane on N = 10 for the early window only, (b) on n = 200 samples.
TINY = dict(d=32, d_k=16, N=10, epochs=EARLY_WINDOW, n=200)


@dataclasses.dataclass(frozen=True)
class ArithmeticSetup:
    """(a): the attention-only runs on add and mod, one lane per gamma (``primary_gamma``
    carries the claims), with eq. A5's plateau ``t*`` per task and gamma."""

    tasks: tuple[str, ...]
    N: int
    gammas: tuple[float, ...]
    primary_gamma: float
    epochs: int
    early_epoch: int
    early_window: int
    batch: str
    reduction: str | None
    plateau_A5: dict[str, dict[str, float]]

    def record(self) -> dict:
        """The setup as the JSON's ``config["arithmetic"]``."""
        return dict(dataclasses.asdict(self), tasks=list(self.tasks), gammas=list(self.gammas))


@dataclasses.dataclass(frozen=True)
class Task3Setup:
    """(b): Task 3 at one gamma, on a GD horizon lengthened past eq. A5's plateau ``t*`` when
    the paper's epochs end inside it (``horizon_note`` says so)."""

    task: str
    L: int
    n: int
    gamma: float
    paper_epochs: int
    plateau_A5: float
    horizon_note: str | None
    epochs: int

    def record(self) -> dict:
        """The setup as the JSON's ``config["task3"]`` (no ``horizon_note`` when not lengthened)."""
        record = dataclasses.asdict(self)
        if self.horizon_note is None:
            del record["horizon_note"]
        return record


def _arithmetic_setup(d: int, full: bool, quick: bool, tiny: bool, regime: Regime):
    epochs = TINY["epochs"] if tiny else 10000 if full else 1000 if quick else 3000
    N = TINY["N"] if tiny else 20
    gammas = (0.75,) if quick or tiny else (0.75, 1.0)
    tasks_ = ("add", "mod")
    return ArithmeticSetup(
        tasks=tasks_,
        N=N,
        gammas=gammas,
        primary_gamma=0.75,
        epochs=epochs,
        early_epoch=100,
        early_window=EARLY_WINDOW,
        batch="full",
        reduction=None
        if full
        else f"{epochs} epochs instead of the paper's 10000"
        + (", one gamma lane (quick)" if quick else "")
        + (f", one gamma lane, N={N}, d={d}, d_k={TINY['d_k']} (tiny)" if tiny else ""),
        plateau_A5={
            task: {
                f"{g:g}": round(closed_form.attention_plateau(regime.make(task, N=N), g, d), 1)
                for g in gammas
            }
            for task in tasks_
        },
    )


def _task3_setup(d: int, full: bool, quick: bool, tiny: bool, regime: Regime) -> Task3Setup:
    n = TINY["n"] if tiny else 10000 if full else 500 if quick else 2000
    gamma, paper_epochs = 1.0, 200
    plateau = round(
        closed_form.attention_plateau(regime.make("anchor_parity", L=8, n=n), gamma, d), 1
    )
    epochs, note = paper_epochs, None
    if regime.optimizer == "gd" and PLATEAU_MARGIN * plateau > paper_epochs:
        epochs = 100 * math.ceil(PLATEAU_MARGIN * plateau / 100)
        note = (
            f"GD horizon lengthened from {paper_epochs} to {epochs} epochs: eq. A5 "
            f"predicts the order-0 plateau lasts t* ≈ {plateau:.0f} epochs"
        )
    return Task3Setup("anchor_parity", 8, n, gamma, paper_epochs, plateau, note, epochs)


def run(
    full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> Outcome:
    d, d_k = (TINY["d"], TINY["d_k"]) if tiny else (128, 64)
    quick = quick and not tiny
    arithmetic = _arithmetic_setup(d, full, quick, tiny, regime)
    task3 = _task3_setup(d, full, quick, tiny, regime)
    config = dict(
        d=d,
        d_k=d_k,
        seed=0,
        adam_lr=1e-3,
        arithmetic=arithmetic.record(),
        task3=task3.record(),
        **regime.describe(),
    )
    jobs = {
        "task3": _task3_job(task3, config, regime),
        **{task: _arithmetic_job(task, arithmetic, config, regime) for task in arithmetic.tasks},
    }
    with ThreadPoolExecutor(max_workers=2) as pool:  # one run per CPU core
        searches = dict(zip(jobs, pool.map(step_search, jobs.values()), strict=True))
    parts = {
        "arithmetic": _arithmetic(arithmetic, config, jobs, searches),
        "task3": _task3(task3, config, jobs["task3"].ds, searches["task3"]),
    }
    return joined_outcome(parts, config, regime.name)


def claims(numbers: dict, config: dict) -> list[Claim]:
    """(a)'s claims from the run's ``numbers`` (as saved in its JSON), tagged with the regime.
    (b)'s are scored on the unrounded attention curves (`Task3Measures`), which the JSON keeps
    to 5 decimals only."""
    cfg = config["arithmetic"]
    claims = [
        claim
        for task in cfg["tasks"]
        for claim in _arithmetic_claims(task, numbers["arithmetic"][task], cfg)
    ]
    for claim in claims:
        claim.regime = config["regime"]
    return claims


def label_entropy(ds) -> float:
    """Entropy of the (weighted) label marginal: the loss once only the marginal is fitted."""
    weights = np.ones(ds.n) if ds.weights is None else np.asarray(ds.weights, dtype=float)
    p = np.bincount(ds.labels, weights=weights) / weights.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def finite_prefix(traj, lane: int) -> int:
    """How many leading snapshots of ``lane`` to score: all of them, unless it diverged; then up
    to the last one before the divergence whose loss is at most the initial (uniform-prediction)
    loss."""
    loss = np.asarray(traj.loss[lane])
    ok = np.isfinite(loss) & np.all(np.isfinite(np.asarray(traj.W_E[lane])), axis=(-2, -1))
    if ok.all():
        return ok.size
    n = int(np.argmin(ok))
    while n > 1 and loss[n - 1] > loss[0]:
        n -= 1
    return n


# --------------------------------------------------------------------------------------------
# (a) add / mod


class Job(NamedTuple):
    """One training job: the data, its horizon and snapshots in epochs (flow time under GD),
    the gamma lanes, the regime it starts in and the experiment's config."""

    ds: object
    epochs: int
    snapshots: tuple[int, ...]
    gammas: tuple[float, ...]
    regime: Regime
    config: dict

    def train(self, regime: Regime) -> sweep.SweepResult:
        """Every gamma lane of the job in ``regime`` (its GD step may be a halving of the
        job's)."""
        train_config = regime.train_config(
            self.ds, epochs=self.epochs, snapshots=self.snapshots, adam_lr=self.config["adam_lr"]
        )
        return train_gammas(
            "attention", self.ds, train_config, self.gammas, self.config, "d", "d_k"
        )

    def end(self, regime: Regime, gamma: float) -> EndState:
        """`common.end_of_run` of the ``gamma`` lane in ``regime`` (GD): the run again, to
        its last state, and the Hessian there."""
        train_config = regime.train_config(
            self.ds, epochs=self.epochs, snapshots=self.snapshots, adam_lr=self.config["adam_lr"]
        )
        return end_of_run(
            "attention",
            self.ds,
            train_config,
            regime,
            gamma=gamma,
            seed=self.config["seed"],
            d=self.config["d"],
            d_k=self.config["d_k"],
        )


class StepSearch(NamedTuple):
    """A job's runs. Under GD: from the regime's step down by at most `HALVINGS` halvings (the
    flow time kept) until every lane ends finite, then the same flow at half that step.

    Attributes:
        tried: ``(lr, status)`` of every run of the search, in order (one lane's status, the
            first that diverged, else ``"ok"``).
        regime, result: the run the claims are scored on: the stable step's, or the last one
            tried when none ended finite (then its claims about the end are not tested).
        check_regime, check: the run at half the stable step (``None`` when no step was
            stable, or under Adam, which has no step to halve).
    """

    tried: tuple[tuple[float, str], ...]
    regime: Regime
    result: sweep.SweepResult
    check_regime: Regime | None
    check: sweep.SweepResult | None

    def record(self) -> dict:
        """The search as the JSON keeps it (``numbers[...]["step_search"]``)."""
        return {
            "tried": [{"gd_lr": lr, "status": status} for lr, status in self.tried],
            "gd_lr": self.regime.gd_lr if self.regime.optimizer == "gd" else None,
            "stable": all(s.ok for s in self.result.status),
            "check_gd_lr": None if self.check_regime is None else self.check_regime.gd_lr,
        }


def _first_status(result: sweep.SweepResult) -> str:
    return str(next((s for s in result.status if not s.ok), sweep.RunStatus()))


def step_search(job: Job) -> StepSearch:
    """`StepSearch` of ``job``: the stable GD step and its halving check."""
    regime = job.regime
    result = job.train(regime)
    tried = [(regime.gd_lr, _first_status(result))]
    if regime.optimizer != "gd":
        return StepSearch(tuple(tried), regime, result, None, None)
    for _ in range(HALVINGS):
        if tried[-1][1] == "ok":
            break
        regime = regime.halved()
        result = job.train(regime)
        tried.append((regime.gd_lr, _first_status(result)))
    if tried[-1][1] != "ok":
        return StepSearch(tuple(tried), regime, result, None, None)
    check = regime.halved()
    return StepSearch(tuple(tried), regime, result, check, job.train(check))


def step_text(search: dict) -> str:
    """How the scored run's GD step was found, for a claim's measured text (``search`` as
    `StepSearch.record` writes it); empty when the regime's own step was stable or not GD."""
    tried = search["tried"]
    if len(tried) == 1:
        return ""
    diverged = "; ".join(f"lr {t['gd_lr']:g} {t['status']}" for t in tried if t["status"] != "ok")
    if not search["stable"]:
        return f"every step tried diverged ({diverged}). "
    return f"at GD lr {search['gd_lr']:g}, the largest stable step, same flow time ({diverged}). "


def halving_verdicts(claims: list[Claim], checks: list[Claim], search: dict) -> list[Claim]:
    """``claims`` with their halving check: each one's verdict against the same claim scored on
    the run at half the step (``checks``, in the same order). The same verdict is noted; a
    different one makes the claim not tested, as the step, not the flow, decides it."""
    if search["check_gd_lr"] is None:
        return claims
    lr, half = search["gd_lr"], search["check_gd_lr"]
    out = []
    for claim, check in zip(claims, checks, strict=True):
        got, again = verdict(claim), verdict(check)
        if got == again:
            note = (
                f"Halving check: at lr {half:g} (same flow time) the verdict is the same ({got})."
            )
            before = claim.note.strip()
            if before and not before.endswith("."):
                before += "."
            out.append(dataclasses.replace(claim, note=f"{before} {note}".strip()))
        else:
            why = (
                f"the verdict changes under one halving of the GD step (lr {lr:g}: {got}, "
                f"lr {half:g}: {again}), so the step, not the flow, decides it"
            )
            out.append(dataclasses.replace(claim, untested=claim.untested or why))
    return out


def _arithmetic_job(task: str, setup: ArithmeticSetup, config: dict, regime: Regime) -> Job:
    snapshots = sorted({*train.default_snapshots(setup.epochs), setup.early_epoch, EARLY_WINDOW})
    ds = regime.make(task, N=setup.N)
    return Job(ds, setup.epochs, tuple(snapshots), setup.gammas, regime, config)


def _arithmetic(setup: ArithmeticSetup, config: dict, jobs: dict, searches: dict):
    numbers, claims, panels = {}, [], {}
    cfg = setup.record()
    for task in setup.tasks:
        search, ds = searches[task], jobs[task].ds
        numbers[task], panels[task] = _arithmetic_task(
            setup, config, search.regime, ds, search.result
        )
        numbers[task]["step_search"] = search.record()
        main = numbers[task]["by_gamma"][f"{setup.primary_gamma:g}"]
        if search.regime.optimizer == "gd" and main["status"] == "ok":
            main["end"] = jobs[task].end(search.regime, setup.primary_gamma)._asdict()
        if search.check is not None:
            numbers[task]["halving_check"] = _arithmetic_task(
                setup, config, search.check_regime, ds, search.check
            )[0]
        claims += _arithmetic_claims(task, numbers[task], cfg)
    regime = searches[setup.tasks[0]].regime
    return claims, _arithmetic_figure(panels, cfg, regime, config), numbers


def _arithmetic_task(setup: ArithmeticSetup, config: dict, regime: Regime, ds, result):
    """One task's lanes: their JSON entry (`_lane_measures` per gamma) and the figure's panels."""
    traj = result.trajectory
    steps = regime.epochs_of(traj.steps[0])
    alphas = geometry.group_tokens(ds, geometry.default_group(ds))
    labels = np.unique(ds.labels[ds.weights > 0])
    ks = np.arange(0, alphas.size // 2 + 1)
    within = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
    phi1 = signatures.label_signature(
        ds, 1, alphas=alphas, labels=labels, context=np.unique(ds.tokens)
    )
    per_gamma, lanes = {}, []
    for lane, gamma in enumerate(result.gamma):
        entry, curves = _lane_measures(
            ds, result, lane, steps, (alphas, within, phi1, ks), setup, config["seed"]
        )
        per_gamma[f"{gamma:g}"] = entry
        lanes.append(curves)
    primary = setup.gammas.index(setup.primary_gamma)
    constant_k = metrics.constant_frequencies(within, ks)
    numbers = {
        "label_entropy": label_entropy(ds),
        "epochs": steps.tolist(),
        "rho0_method": lanes[primary][0].rho0_method,
        "frequencies": ks.tolist(),
        "frequency_scale": [
            f"k={k} (1−MSE)" if c else f"k={k}" for k, c in zip(ks, constant_k, strict=True)
        ],
        "by_gamma": per_gamma,
    }
    main = per_gamma[f"{setup.primary_gamma:g}"]
    curves, S_emb, _ = lanes[primary]
    h = signatures.fourier_projection(within, [main["k_star_late"]])[0]
    panels = dict(
        alphas=alphas,
        S_early=S_emb[min(int(np.searchsorted(steps, setup.early_epoch)), len(S_emb) - 1)],
        S_late=S_emb[-1],
        late_epoch=main["late_epoch"],
        S_sig0=curves.S_sig0,
        S_sig1=np.asarray(metrics.cosine_matrix(h)),
        k_star=main["k_star_late"],
        steps=steps,
        curves=[(c.rho0[0], sp[:, 1:].max(axis=-1)) for c, _, sp in lanes],
        method=curves.rho0_method,
        gammas=result.gamma,
    )
    return numbers, panels


def _lane_measures(ds, result, lane: int, steps, signature, setup: ArithmeticSetup, seed: int):
    """One gamma lane, scored on its snapshots before any divergence: ρ0 early and late, the
    first-order probe (init, early, late), the order-1 frequency spectrum ``[S, K]``; its JSON
    entry and ``(alignment curves, S^emb [S, A, A], spectrum)``."""
    alphas, within, phi1, ks = signature
    traj = result.trajectory
    i_early = int(np.searchsorted(steps, setup.early_epoch))
    n_ok = finite_prefix(traj, lane)
    curves = geometry.alignment_curves(
        traj.W_E[lane : lane + 1, :n_ok], steps[:n_ok], ds, probe_snapshots=0
    )
    S_emb = geometry.embedding_similarity(traj.W_E[lane, :n_ok], alphas)  # [S, A, A]
    spectrum = np.asarray(metrics.frequency_alignment(within, S_emb, ks))  # [S, K]
    i_late = n_ok - 1
    probe = {
        name: metrics.probe_fit(phi1, S_emb[i], seed=seed)
        for name, i in (("init", 0), ("early", min(i_early, i_late)), ("late", i_late))
    }
    rho0 = curves.rho0[0]
    window = steps[:n_ok] <= EARLY_WINDOW
    entry = {
        "status": str(result.status[lane]),
        "late_epoch": int(steps[i_late]),
        "loss_final": float(traj.loss[lane, i_late]),
        "accuracy_final": float(traj.accuracy[lane, i_late]),
        "rho0_init": float(rho0[0]),
        "rho0_at_early_epoch": float(rho0[min(i_early, i_late)]),
        "rho0_early_peak": float(rho0[window].max()),
        "rho0_early_peak_epoch": int(steps[:n_ok][window][np.argmax(rho0[window])]),
        "rho0_late": float(rho0[i_late]),
        "offdiag_cos_mean": [float(metrics.upper_triangle(S).mean()) for S in S_emb],
        "probe_init": float(probe["init"].heldout_corr),
        "probe_early": float(probe["early"].heldout_corr),
        "probe_late": float(probe["late"].heldout_corr),
        **frequency_numbers(spectrum, i_late),
        "rho1_spectrum_early": spectrum[min(i_early, i_late)].round(4).tolist(),
        "rho1_spectrum_late": spectrum[i_late].round(4).tolist(),
        "rho0_curve": rho0.round(4).tolist(),
        "rho1_best_curve": spectrum[:, 1:].max(axis=-1).round(4).tolist(),
        "loss_curve": np.asarray(traj.loss[lane]).round(4).tolist(),
    }
    return entry, (curves, S_emb, spectrum)


def frequency_numbers(spectrum: np.ndarray, i_late: int) -> dict:
    """What a lane's order-1 spectrum ``rho_(1),k`` ``[S, K]`` (k = 0..K-1; k = 0 is the
    constant mode, on the 1 - MSE scale for mod) says of the frequencies k >= 1: the best one
    at snapshot ``i_late``, ``k_star_late``, its value, and the best value at init."""
    k_late = 1 + int(np.argmax(spectrum[i_late, 1:]))
    return {
        "k_star_late": k_late,
        "rho1_kstar_late": float(spectrum[i_late, k_late]),
        "rho1_best_init": float(spectrum[0, 1:].max()),
    }


def _scored_at_end(criterion, end, init, finite: bool) -> dict:
    """`scored` for a claim about the run's end, which must also be finite (the init always
    is): ``criterion`` on the measurement at the end and at init."""
    return scored(lambda m: bool(criterion(m[0])) and m[1], (end, finite), (init, True))


def _arithmetic_claims(task: str, numbers: dict, cfg: dict) -> list[Claim]:
    """The three §8.3/§8.5/§8.6 analogues on the primary gamma's lane, with their halving check
    (`halving_verdicts`) when the run has one; null: its init."""
    claims = _arithmetic_run_claims(task, numbers, cfg)
    search = numbers.get("step_search")
    if search is None or "halving_check" not in numbers:
        return claims
    step = step_text(search)
    claims = [dataclasses.replace(c, measured=step + c.measured) for c in claims]
    checks = _arithmetic_run_claims(task, numbers["halving_check"], cfg)
    return halving_verdicts(claims, checks, search)


def _arithmetic_run_claims(task: str, numbers: dict, cfg: dict) -> list[Claim]:
    """The three claims on one run's numbers. A claim about the run's end also needs the run
    to end finite (its init always does)."""
    main = numbers["by_gamma"][f"{cfg['primary_gamma']:g}"]
    status = main["status"]
    end = (
        f"the run {status}; scored at its last snapshot before the blow-up, epoch "
        f"{main['late_epoch']} (loss {main['loss_final']:.3f}). "
        if status != "ok"
        else ""
    )
    return [
        _zero_order_claim(task, main, numbers, cfg),
        *untested_if_diverged(
            [
                _probe_claim(task, main, numbers["rho0_method"], cfg, end),
                _fourier_claim(task, main, cfg, end),
            ],
            status,
        ),
    ]


def untested_if_diverged(claims: list[Claim], status: str) -> list[Claim]:
    """Claims about a run's end, marked not tested when the run diverged (``status`` is not
    ``"ok"``): a blown-up run has no end state to read, so it neither confirms nor refutes."""
    if status == "ok":
        return claims
    why = f"the run {status}: a claim about its end reads no finite state"
    return [dataclasses.replace(claim, untested=why) for claim in claims]


def _other_gammas(numbers: dict, cfg: dict) -> str:
    return "; ".join(
        f"γ={k} ({v['status']}): early peak ρ0 {v['rho0_early_peak']:.3f}, late ρ0 "
        f"{v['rho0_late']:.3f}, probe {v['probe_late']:.3f}, k*={v['k_star_late']} ρ "
        f"{v['rho1_kstar_late']:.3f}, loss {v['loss_final']:.3f}, acc {v['accuracy_final']:.3f} "
        f"at epoch {v['late_epoch']}"
        for k, v in numbers["by_gamma"].items()
        if k != f"{cfg['primary_gamma']:g}"
    )


def _zero_order_claim(task: str, main: dict, numbers: dict, cfg: dict) -> Claim:
    cos = main["offdiag_cos_mean"]
    window = [i for i, t in enumerate(numbers["epochs"][: len(cos)]) if t <= EARLY_WINDOW]
    why = ""
    if main["rho0_early_peak"] < RHO0_EARLY:
        last = window[-1]
        why = (
            f"Why it misses: over epochs ≤ {EARLY_WINDOW} the mean off-diagonal cosine of the "
            f"numbers peaks at {max(cos[i] for i in window):.3f}; at epoch "
            f"{numbers['epochs'][last]} ρ0 is {main['rho0_curve'][last]:.3f} and the loss "
            f"{main['loss_curve'][last]:.3f} (the label marginal's entropy is "
            f"{numbers['label_entropy']:.3f}); the late cosine is {cos[-1]:.3f}. "
        )
    return Claim(
        "§7 Fig. 6A–H (§8.3 analogue)",
        f"attention-only, {task}: the early geometry is zero-order (ρ0 peaks near 1 early)",
        f"peak ρ0 ({numbers['rho0_method']}) over epochs ≤ {EARLY_WINDOW}: "
        f"{main['rho0_early_peak']:.3f} at epoch {main['rho0_early_peak_epoch']}; "
        f"ρ0 at epoch {cfg['early_epoch']}: {main['rho0_at_early_epoch']:.3f}",
        f"early peak ≥ {RHO0_EARLY} [§8.3 threshold]",
        note=f"γ={cfg['primary_gamma']:g} (primary). "
        + why
        + (
            "mod: S^{sig,(0)} ≡ 1, so ρ0 is 1 − MSE (collapse onto one direction). "
            if task == "mod"
            else ""
        )
        + _other_gammas(numbers, cfg),
        kind="paper",
        null=f"init: ρ0 {main['rho0_init']:.3f}",
        # the run covers the claim's whole window, finite: its FAIL is no budget's
        failure="false" if main["late_epoch"] >= EARLY_WINDOW else "unclassified",
        **scored(lambda rho0: rho0 >= RHO0_EARLY, main["rho0_early_peak"], main["rho0_init"]),
    )


def _probe_claim(task: str, main: dict, method: str, cfg: dict, end: str) -> Claim:
    finite = main["status"] == "ok"
    verdicts = _scored_at_end(
        lambda m: m[0] > m[1],
        (main["probe_late"], main["rho0_late"]),
        (main["probe_init"], main["rho0_init"]),
        finite,
    )
    return Claim(
        "§7 Fig. 6A–H (§8.5 analogue)",
        f"attention-only, {task}: first-order probe beats zero order late",
        f"late probe held-out corr {main['probe_late']:.3f} vs late ρ0 ({method}) "
        f"{main['rho0_late']:.3f} at epoch {main['late_epoch']} (early probe "
        f"{main['probe_early']:.3f})",
        "late probe corr > late ρ0 (§8.5), and the run ends finite",
        note=f"γ={cfg['primary_gamma']:g}; {end}final train accuracy "
        f"{main['accuracy_final']:.3f}"
        + (
            "; ρ0 is 1 − MSE and the probe a Pearson correlation: two scales"
            if method == "1-mse"
            else ""
        )
        + "."
        + _end_note(main, verdicts),
        kind="paper",
        failure=_end_failure(main),
        null=f"init: probe {main['probe_init']:.3f} vs ρ0 {main['rho0_init']:.3f}",
        **verdicts,
    )


def _end_failure(main: dict) -> str:
    """A FAIL about the lane's end: `common.plateau_failure` of its end state (GD runs that
    ended finite), else unclassified."""
    return plateau_failure(EndState(**main["end"])) if "end" in main else "unclassified"


def _end_note(main: dict, verdicts: dict) -> str:
    """The end state's curvature (`common.curvature_text`), for a claim that fails there."""
    failed = verdicts["passed"] is False
    return " " + curvature_text(EndState(**main["end"])) if failed and "end" in main else ""


def _fourier_claim(task: str, main: dict, cfg: dict, end: str) -> Claim:
    finite = main["status"] == "ok"
    verdicts = _scored_at_end(
        lambda rho: rho >= FOURIER_LATE, main["rho1_kstar_late"], main["rho1_best_init"], finite
    )
    why = ""
    if main["rho1_kstar_late"] < FOURIER_LATE or not finite:
        why = (
            f" Why it misses: {end}final train accuracy {main['accuracy_final']:.3f}, loss "
            f"{main['loss_final']:.3f}, late ρ0 {main['rho0_late']:.3f}; the spectrum at the end "
            "is " + ", ".join(f"{v:.2f}" for v in main["rho1_spectrum_late"][1:]) + " (k = 1..)."
        )
    return Claim(
        "§7 Fig. 6A–H (§8.6 analogue)",
        f"attention-only, {task}: the late geometry matches one order-1 frequency component",
        f"late max_k≥1 ρ_(1),k = {main['rho1_kstar_late']:.3f} at k* = "
        f"{main['k_star_late']} (epoch {main['late_epoch']})",
        f"≥ {FOURIER_LATE} [R], and the run ends finite",
        note=f"γ={cfg['primary_gamma']:g}; k ranges 1..N/2 on the context restricted to the "
        "numbers (p = N)." + why + _end_note(main, verdicts),
        kind="project",
        failure=_end_failure(main),
        null=f"init: max_k≥1 ρ_(1),k {main['rho1_best_init']:.3f}",
        **verdicts,
    )


def _arithmetic_figure(panels: dict, cfg: dict, regime: Regime, config: dict):
    tasks_ = list(panels)
    title = (
        f"Attention-only (d={config['d']}, $d_k$={config['d_k']}), N={cfg['N']}, {regime.label}, "
        f"$\\gamma$={cfg['primary_gamma']} (heatmaps, thick curves); thin with crosses: "
        "the other $\\gamma$"
    )
    fig, axes = plots.grid(len(tasks_), 5, panel=(3.8, 3.9), suptitle=title)
    for row, task in enumerate(tasks_):
        p = panels[task]
        early = cfg["early_epoch"]
        image = plots.heatmap(
            axes[row, 0], p["S_early"], p["alphas"], f"{task}: $S^{{emb}}$, epoch {early}"
        )
        plots.heatmap(
            axes[row, 1], p["S_late"], p["alphas"], f"{task}: $S^{{emb}}$, epoch {p['late_epoch']}"
        )
        plots.heatmap(axes[row, 2], p["S_sig0"], p["alphas"], f"{task}: $S^{{sig,(0)}}$")
        plots.heatmap(
            axes[row, 3],
            p["S_sig1"],
            p["alphas"],
            f"{task}: $S^{{sig,(1)}}_{{k={p['k_star']}}}$ (late best $k \\geq 1$)",
        )
        ax = axes[row, 4]
        for (rho0, rho1), gamma in zip(p["curves"], p["gammas"], strict=True):
            x = np.maximum(p["steps"][: len(rho0)], 1)
            primary = gamma == cfg["primary_gamma"]
            style = dict(lw=1.8) if primary else dict(lw=0.9, marker="x", ms=3, markevery=0.1)
            label0 = f"$\\rho_0$ ({p['method']}), $\\gamma$={gamma:g}"
            label1 = f"$\\max_{{k \\geq 1}} \\rho_{{(1),k}}$, $\\gamma$={gamma:g}"
            ax.plot(x, rho0, color=plots.order_colour(0), label=label0, **style)
            ax.plot(x, rho1, color=plots.order_colour(1), label=label1, **style)
        plots.reference(ax, x=cfg["early_epoch"], ls="-")
        ax.set_xscale("log")
        ax.set_ylim(-0.3, 1.05)
        plots.axis_labels(
            ax,
            "epoch (= flow time under GD lr 1)",
            plots.ALIGNMENT,
            f"{task}: alignment over training",
        )
        plots.legend(ax, loc="lower left")
    plots.colorbar(fig, image, axes[:, :4], shrink=0.6)
    return fig


# --------------------------------------------------------------------------------------------
# (b) Task 3


def _task3_job(setup: Task3Setup, config: dict, regime: Regime) -> Job:
    ds = regime.make(setup.task, L=setup.L, n=setup.n)
    recorded = sorted({0, 1, 2, 5, *range(0, setup.epochs + 1, 5 if setup.epochs <= 200 else 10)})
    return Job(ds, setup.epochs, tuple(recorded), (setup.gamma,), regime, config)


class Task3Measures(NamedTuple):
    """Task 3's run on its snapshots before any divergence ``[S]``: the per-token attention on
    the anchor and on a noise token, the two groups' mean embedding norms, and the geometry
    (`_task3_geometry`) at ``init`` and ``late``."""

    status: str
    epochs: np.ndarray
    loss: np.ndarray
    accuracy: np.ndarray
    A_anchor: np.ndarray
    A_noise: np.ndarray
    E_anchor: np.ndarray
    E_noise: np.ndarray
    geometry: dict
    L: int

    @property
    def finite(self) -> bool:
        return self.status == "ok"

    def record(self) -> dict:
        """The JSON's ``numbers["task3"]`` (curves to 5 decimals, no cosine matrices)."""
        return {
            "status": self.status,
            "epochs": self.epochs.tolist(),
            "late_epoch": int(self.epochs[-1]),
            "loss": self.loss.round(5).tolist(),
            "accuracy": self.accuracy.round(4).tolist(),
            "A_anchor_per_token": self.A_anchor.round(5).tolist(),
            "A_noise_per_token": self.A_noise.round(5).tolist(),
            "E_anchor": self.E_anchor.round(5).tolist(),
            "E_noise": self.E_noise.round(5).tolist(),
            "growth_anchor": float(self.E_anchor[-1] / self.E_anchor[0]),
            "growth_noise": float(self.E_noise[-1] / self.E_noise[0]),
            "final_accuracy": float(self.accuracy[-1]),
            **{
                f"{key}_{when}": value
                for when, g in self.geometry.items()
                for key, value in g.items()
                if not key.startswith("_")
            },
        }


def _task3(setup: Task3Setup, config: dict, ds, search: StepSearch):
    regime = search.regime
    measures = _task3_measures(ds, search.result, regime)
    record = measures.record() | {"step_search": search.record()}
    claims = _task3_claims(measures, setup)
    if search.check is not None:
        check = _task3_measures(ds, search.check, search.check_regime)
        record["halving_check"] = check.record()
        step = step_text(record["step_search"])
        claims = halving_verdicts(
            [dataclasses.replace(c, measured=step + c.measured) for c in claims],
            _task3_claims(check, setup),
            record["step_search"],
        )
    late = measures.geometry["late"]
    figure = _task3_figure(
        config,
        regime,
        measures.epochs,
        (measures.A_anchor, measures.A_noise, measures.E_anchor, measures.E_noise),
        (late["_S_anchor"], late["_S_noise"]),
        ds.groups["anchors"],
        ds.groups["noise"],
        ds.L,
        int(measures.epochs[-1]),
    )
    return claims, figure, record


def _task3_measures(ds, result, regime: Regime) -> Task3Measures:
    n_ok = finite_prefix(result.trajectory, 0)
    traj = result.lane(0)
    anchors, noise = ds.groups["anchors"], ds.groups["noise"]
    return Task3Measures(
        status=str(result.status[0]),
        epochs=regime.epochs_of(traj.steps)[:n_ok],
        loss=np.asarray(traj.loss)[:n_ok],
        accuracy=np.asarray(traj.accuracy)[:n_ok],
        A_anchor=np.asarray(traj.attention_group["anchors"])[:n_ok],
        A_noise=np.asarray(traj.attention_group["noise"])[:n_ok] / (ds.L - 1),
        E_anchor=np.asarray(traj.group_norms["anchors"])[:n_ok],
        E_noise=np.asarray(traj.group_norms["noise"])[:n_ok],
        geometry={
            "init": _task3_geometry(traj.W_E[0], anchors, noise),
            "late": _task3_geometry(traj.W_E[n_ok - 1], anchors, noise),
        },
        L=ds.L,
    )


def _task3_end(m: Task3Measures) -> str:
    loss, accuracy = m.loss.round(5), float(m.accuracy[-1])
    if not m.finite:
        return (
            f"The run {m.status}, leaving the plateau (loss {loss[0]:.3f} at epoch 0); "
            f"scored at its last snapshot before the blow-up, epoch {int(m.epochs[-1])} (loss "
            f"{loss[-1]:.3f}, accuracy {accuracy:.3f}). "
        )
    return f"Final loss {loss[-1]:.3f}, accuracy {accuracy:.3f}. "


def _attention_series(m: Task3Measures, epochs: int) -> str:
    """``A_anchor/A_noise`` at a few epochs up to the last scored one."""
    marks = sorted({0, 20, 40, 100, epochs // 2, int(m.epochs[-1])})
    at = {e: int(np.argmin(np.abs(m.epochs - e))) for e in marks if e <= m.epochs[-1]}
    return ", ".join(f"{e}: {m.A_anchor[i]:.3f}/{m.A_noise[i]:.4f}" for e, i in at.items())


def _task3_claims(m: Task3Measures, setup: Task3Setup) -> list[Claim]:
    """§8.9 and Fig. 6I at the run's end (not tested when the run diverged), a FAIL classed by
    whether the run was still learning at its cap (`failure_class`); null: its init."""
    failure = failure_class(m.accuracy)
    claims = [dataclasses.replace(c, failure=failure) for c in _task3_end_claims(m, setup)]
    return untested_if_diverged(claims, m.status)


def _task3_end_claims(m: Task3Measures, setup: Task3Setup) -> list[Claim]:
    end = _task3_end(m)
    return [*_task3_attention_claims(m, setup, end), *_task3_embedding_claims(m, end)]


def _task3_attention_claims(m: Task3Measures, setup: Task3Setup, end: str) -> list[Claim]:
    """§8.9's attention claims at the end of the run: the anchor's rises above the noise's, the
    noise's decays to about 0; null: the init."""
    uniform = 1.0 / m.L
    init_null = f"init: A_anchor {m.A_anchor[0]:.3f}, A_noise {m.A_noise[0]:.4f}"
    return [
        Claim(
            "§8.9",
            "Task 3: attention on the anchor exceeds attention on noise and rises",
            f"per-token A_anchor/A_noise by epoch {_attention_series(m, setup.epochs)}",
            f"A_anchor > A_noise at the end, and A_anchor(end) − A_anchor(0) ≥ {ANCHOR_RISE} "
            "[R], the run ending finite",
            note=end + "A_noise = total noise mass / 7 (one anchor, 7 noise tokens per sample)",
            kind="paper",
            null=init_null + " (rise 0)",
            **_scored_at_end(
                lambda a: a[0] > a[1] and a[2] >= ANCHOR_RISE,
                (m.A_anchor[-1], m.A_noise[-1], m.A_anchor[-1] - m.A_anchor[0]),
                (m.A_anchor[0], m.A_noise[0], 0.0),
                m.finite,
            ),
        ),
        Claim(
            "§8.9",
            "Task 3: attention to noise decays to about 0",
            f"late per-token A_noise {m.A_noise[-1]:.2e} (uniform 1/L = {uniform:.3f}); "
            f"total noise mass {m.A_noise[-1] * (m.L - 1):.2e}",
            f"≤ {NOISE_NEAR_ZERO} × 1/L [R], the run ending finite",
            note=end,
            kind="paper",
            null=init_null,
            **_scored_at_end(
                lambda a: a <= NOISE_NEAR_ZERO * uniform, m.A_noise[-1], m.A_noise[0], m.finite
            ),
        ),
    ]


def _task3_embedding_claims(m: Task3Measures, end: str) -> list[Claim]:
    """§8.9 and Fig. 6I's embedding claims at the end of the run: the anchors grow faster than
    the noise, split by parity, and the noise aligns along one direction; null: the init."""
    late, init = m.geometry["late"], m.geometry["init"]
    growth = (m.E_anchor[-1] / m.E_anchor[0], m.E_noise[-1] / m.E_noise[0])
    return [
        Claim(
            "§8.9",
            "Task 3: anchor embeddings grow faster than noise embeddings",
            f"E(end)/E(0): anchors {growth[0]:.2f} ({m.E_anchor[0]:.3f} → {m.E_anchor[-1]:.3f}), "
            f"noise {growth[1]:.2f} ({m.E_noise[0]:.3f} → {m.E_noise[-1]:.3f})",
            "anchor growth > noise growth, the run ending finite",
            note=end,
            kind="paper",
            null="init: growth 1.00 vs 1.00",  # E(0)/E(0) for both groups
            **_scored_at_end(lambda g: g[0] > g[1], growth, (1.0, 1.0), m.finite),
        ),
        Claim(
            "§8.9",
            "Task 3: the anchor cosine matrix has a 2-block parity structure",
            f"Pearson with the ±1 parity block matrix {late['parity_block_corr']:.3f}; mean "
            f"cosine within parity {late['anchor_cos_within_parity']:.3f}, across "
            f"{late['anchor_cos_across_parity']:.3f}",
            f"Pearson ≥ {PARITY_CORR} [R], the run ending finite",
            note=end,
            kind="paper",
            null=f"init: Pearson {init['parity_block_corr']:.3f}",
            **_scored_at_end(lambda g: g["parity_block_corr"] >= PARITY_CORR, late, init, m.finite),
        ),
        Claim(
            "§7 Fig. 6I",
            "Task 3: noise tokens align along one direction",
            f"mean pairwise cosine of noise embeddings {late['noise_cos_mean']:.3f}; top "
            f"direction carries {100 * late['noise_top_direction_share']:.1f}% of their "
            "(uncentered) energy",
            f"mean cosine ≥ {NOISE_ALIGNED} [R], the run ending finite",
            note=end,
            kind="paper",
            null=f"init: mean cosine {init['noise_cos_mean']:.3f}",
            **_scored_at_end(lambda g: g["noise_cos_mean"] >= NOISE_ALIGNED, late, init, m.finite),
        ),
    ]


def _task3_geometry(W_E, anchors: np.ndarray, noise: np.ndarray) -> dict:
    """Parity structure of the anchors and alignment of the noise tokens in one snapshot."""
    W_E = np.asarray(W_E)
    S_anchor = geometry.embedding_similarity(W_E, anchors)
    S_noise = geometry.embedding_similarity(W_E, noise)
    parity = anchors % 2
    same = parity[:, None] == parity[None, :]
    block = np.where(same, 1.0, -1.0)
    off = ~np.eye(anchors.size, dtype=bool)
    singular = np.linalg.svd(W_E[noise], compute_uv=False)
    return {
        "parity_block_corr": float(
            metrics.pearson(metrics.upper_triangle(S_anchor), metrics.upper_triangle(block))
        ),
        "anchor_cos_within_parity": float(S_anchor[same & off].mean()),
        "anchor_cos_across_parity": float(S_anchor[~same].mean()),
        "noise_cos_mean": float(metrics.upper_triangle(S_noise).mean()),
        "noise_top_direction_share": float(singular[0] ** 2 / np.sum(singular**2)),
        "_S_anchor": S_anchor,
        "_S_noise": S_noise,
    }


def _task3_figure(config, regime, epochs, curves, cosines, anchors, noise, L, late_epoch):
    cfg = config["task3"]
    A_anchor, A_noise, E_anchor, E_noise = curves
    fig, axes = plots.figure(
        1,
        4,
        panel=(4.5, 4.2),
        suptitle=(
            f"Task 3 (anchor parity, L={L}, n={cfg['n']}), attention-only d={config['d']}, "
            f"$\\gamma$={cfg['gamma']}, {regime.label}, {cfg['epochs']} epochs"
        ),
    )
    image = plots.heatmap(axes[0], cosines[0], anchors, f"anchor cosines, epoch {late_epoch}")
    plots.heatmap(axes[1], cosines[1], noise, f"noise cosines, epoch {late_epoch}")
    plots.colorbar(fig, image, axes[:2])
    ax = axes[2]
    ax.plot(epochs, A_anchor, "C3", label="anchor (mass on the anchor)")
    ax.plot(epochs, A_noise, "C0", label=f"noise (mass on noise / {L - 1}, per token)")
    plots.reference(ax, y=1 / L, label=f"uniform 1/L = {1 / L:.3f}")
    ax.set_ylim(-0.02, 1.02)
    plots.axis_labels(
        ax, plots.EPOCH, "dataset-mean attention per token", "attention of the last position"
    )
    plots.legend(ax)
    ax = axes[3]
    ax.plot(epochs, E_anchor, "C3", label="anchors")
    ax.plot(epochs, E_noise, "C0", label="noise")
    plots.axis_labels(ax, plots.EPOCH, r"mean $\|w^E_\alpha\|$ over the group", "embedding norms")
    plots.legend(ax)
    return fig
