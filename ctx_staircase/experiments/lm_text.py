"""Language model on real text: signature alignment over GPT training (the paper §6.1 and
Fig. 7, scaled down [R]).

Reproduces Fig. 7 and claim §8.16: ``rho_next`` rises to an early peak, then settles lower, and
a rank-one prefix probe with a linear readout fits the embeddings. A `models.GPT` (d = 128,
2 layers, 4 heads, untied) is trained on a word-level text with AdamW warm-up-cosine (peak lr
3e-3), batches of 32 windows of 64 tokens, 2000 steps, at gamma = 1 and 0.5 in one compiled
program (same seed and batches), a snapshot every 25 steps.

Measures with `lm.lm_metrics` (definitions: theory/lm.md) ``rho_next``, the held-out prefix
probe, ``rho^l_attn`` per layer and ``rho_pre``. Claims: the rho_next shape and the probe (kind
"paper") and "small init is clearer" (kind "project"), with [R] criteria fixed before the runs,
in one fixed setting (``regime``); null: the untrained init. Writes the figure ``curves``.

``run(text_path=PATH)`` uses that file: the package reads nothing outside itself unless given
a path (``sims/lm_text.py`` passes ``../shared/data/tinyshakespeare.txt``). `lm_builtin` runs
the same analysis on the built-in corpus and adds the semantic structure claims.

The model and metrics in detail, the [R] criteria and the nulls: theory/experiments.md, lm_text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ctx_staircase import lm, lm_study, records, text
from ctx_staircase.experiments import Claim, Kind, Outcome, get
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion

START_MAX = 0.1  # [R] |rho_next(0)|: random init has no structure
PEAK_MIN = 0.3  # [R] a real rise
DROP_MIN = 0.05  # [R] "settles at a lower level"
FINAL_MIN = 0.1  # [R] "nonzero"
CLEARER_MIN = 0.05  # [R] small-init peak above standard-init peak


def lm_config(full: bool = False, tiny: bool = False) -> lm.LMConfig:
    """CPU size (d=128, 2 layers, 2000 steps); ``full``: d=256, 4 layers, 10000 steps;
    ``tiny``: a seconds-long smoke run."""
    if tiny:
        return lm.LMConfig(
            d=32,
            n_layers=1,
            n_heads=2,
            context_length=16,
            batch_size=8,
            steps=40,
            snapshot_every=10,
            tracked=24,
            min_count=5,
            probe_vocabulary=24,
            signature_windows=16,
            validation_windows=8,
        )
    if full:
        return lm.LMConfig(d=256, n_layers=4, n_heads=8, steps=10000, snapshot_every=100)
    return lm.LMConfig(steps=2000, snapshot_every=25)


@dataclasses.dataclass(frozen=True)
class Lane:
    """One gamma lane of `lm_study.summarize`: the rise-peak-settle shape of ``rho_next``, the
    probe's ratios and correlations, the losses, the step it diverged at (-1: never)."""

    rho_next_start: float
    rho_next_peak: float
    rho_next_peak_step: int
    rho_next_final: float
    rho_next_min_after_peak: float
    rho_previous_peak: float
    rho_previous_final: float
    rho_attention_early_max: tuple[float, ...]
    rho_attention_final: tuple[float, ...]
    probe_mse_ratio_median: float
    probe_mse_ratio_max: float
    probe_mse_ratio_init: float
    probe_constant_ratio_median: float
    probe_corr_at_peak: float
    probe_corr_median: float
    probe_slope_median: float
    loss_final: float
    validation_loss_final: float
    diverged_step: int


_T = TypeVar("_T")


def lanes(by_gamma: Mapping[str, _T]) -> tuple[_T, _T]:
    """The small-init (gamma = 1) and standard-init (gamma = 0.5) entries of a mapping keyed by
    gamma (`lm_study.GAMMAS`, as ``f"{gamma:g}"``): a summary's `Lane`s, or any per-lane
    measure."""
    small, standard = (by_gamma[f"{gamma:g}"] for gamma in lm_study.GAMMAS)
    return small, standard


class _Summary(NamedTuple):
    summary: dict[str, Lane]


class _Steps(NamedTuple):
    steps: int


def claims(summary: dict, steps: int, regime: str) -> list[Claim]:
    """The item-16 claims (`CLAIMS`) for the small-init lane (``"1"``) against standard init
    (``"0.5"``), each with its init null (theory/experiments.md, lm_text); ``regime`` names the
    fixed setting."""
    run = _Summary(records.decode(dict[str, Lane], summary))
    return [spec.score(run, _Steps(steps), regime) for spec in CLAIMS]


def _shape(lane: Lane) -> str:
    return (
        f"rho_next(0) {lane.rho_next_start:.3f}, peak {lane.rho_next_peak:.3f} at step "
        f"{lane.rho_next_peak_step}, final {lane.rho_next_final:.3f} (lowest after the peak "
        f"{lane.rho_next_min_after_peak:.3f})"
    )


def _small(record, config) -> Lane:
    return lanes(record.summary)[0]


def _untrained(record, config) -> Lane:
    """The small-init lane as the untrained init leaves it: at its step-0 value (peak = final =
    start, at step 0)."""
    small = _small(record, config)
    start = small.rho_next_start
    return dataclasses.replace(
        small, rho_next_peak=start, rho_next_peak_step=0, rho_next_final=start
    )


def _rose(lane: Lane) -> bool:
    return abs(lane.rho_next_start) <= START_MAX and lane.rho_next_peak >= PEAK_MIN


def _settles(lane: Lane) -> bool:
    final = lane.rho_next_final
    return final <= lane.rho_next_peak - DROP_MIN and final >= FINAL_MIN


def _early(value: tuple[Lane, int]) -> bool:
    lane, steps = value
    return lane.rho_next_peak >= PEAK_MIN and lane.rho_next_peak_step <= steps / 2


def _init_text(record, config) -> str:
    start = _small(record, config).rho_next_start
    return f"init: rho_next stays at {start:.3f} (peak = final, at step 0)"


def _margin(lane: Callable[[Lane], float]) -> Callable[[Any, Any], float]:
    """Small init's value of ``lane`` minus standard init's."""

    def margin(record, config) -> float:
        small, standard = lanes(record.summary)
        return lane(small) - lane(standard)

    return margin


def _probe_note(record, config) -> str:
    small, standard = lanes(record.summary)
    numbers = (
        f"readout slope median {small.probe_slope_median:.2f}; MSE / MSE of the training "
        f"pairs' mean, median {small.probe_constant_ratio_median:.2f}; standard init: median "
        f"ratio {standard.probe_mse_ratio_median:.2f}"
    )
    if not small.probe_mse_ratio_median < 1:
        return (
            f"fails: the fitted probe predicts the held-out pairs worse than their mean "
            f"({numbers}); theory/lm.md §5"
        )
    if small.probe_mse_ratio_init < 1:
        return (
            "vacuous: the probe beats the best constant on the untrained embeddings too, so "
            f"beating it says nothing about training ({numbers})"
        )
    return (
        "the probe beats the best constant after training but not on the untrained init "
        f"({numbers})"
    )


_rho_next_peak = _margin(lambda lane: lane.rho_next_peak)
_rho_next_start = _margin(lambda lane: lane.rho_next_start)


def _on_curve(claim: str, measured, criterion: Criterion, steps: bool = False) -> ClaimSpec:
    """A rho_next shape claim scored on the small-init curve and on the untrained one (with the
    steps trained where ``steps``); ``measured`` a function of the small-init `Lane` and the
    steps."""

    def on(lane):
        return lambda r, c: (lane(r, c), c.steps) if steps else lane(r, c)

    return ClaimSpec(
        item="§8.16",
        claim=claim,
        statistic=on(_small),
        measured=lambda r, c: measured(_small(r, c), c.steps),
        criterion=criterion,
        null=on(_untrained),
        null_text=_init_text,
    )


#: The item-16 claims, functions of a record with a ``summary`` keyed by gamma (`lanes`) and a
#: config with the ``steps`` trained. The rho_next shape is scored on the small-init curve and
#: on the untrained one, which stays at its step-0 value.
CLAIMS = (
    _on_curve(
        "rho_next rises from about 0 (small init, gamma = 1)",
        lambda small, steps: _shape(small),
        Criterion(
            f"|rho_next(0)| <= {START_MAX} and peak >= {PEAK_MIN} [R: readings of 'about 0' and "
            "'rises', fixed before the runs]",
            _rose,
        ),
    ),
    _on_curve(
        "the peak of rho_next comes early",
        lambda small, steps: (
            f"peak {small.rho_next_peak:.3f} at step {small.rho_next_peak_step} of {steps}"
        ),
        Criterion(
            f"a peak >= {PEAK_MIN} in the first half of training [R: 'early' read as the first "
            f"half; ≥ {PEAK_MIN} so that a flat curve (argmax at step 0) fails]",
            _early,
        ),
        steps=True,
    ),
    _on_curve(
        "rho_next then settles at a lower, nonzero level",
        lambda small, steps: f"final {small.rho_next_final:.3f} vs peak {small.rho_next_peak:.3f}",
        Criterion(
            f"final <= peak - {DROP_MIN} and final >= {FINAL_MIN} [R: 'lower' as §8.3's decline "
            f"of {DROP_MIN}, 'nonzero' as above the rise's 'about 0']",
            _settles,
        ),
    ),
    ClaimSpec(
        item="§8.16 [R]",
        claim="small init shows the rise and peak more clearly than standard init (gamma = 0.5)",
        statistic=_rho_next_peak,
        measured=lambda r, c: (
            "standard init: "
            + _shape(lanes(r.summary)[1])
            + f"; peak margin {_rho_next_peak(r, c):+.3f}"
        ),
        criterion=Criterion(
            f"small-init peak >= standard-init peak + {CLEARER_MIN} [R: 'more clearly' read as "
            "a margin the size of the drop that counts as 'lower']",
            lambda margin: margin >= CLEARER_MIN,
        ),
        null=_rho_next_start,
        null_text=lambda r, c: (
            f"init: margin {_rho_next_start(r, c):+.3f} (one draw at two scales: equal cosines)"
        ),
        kind=Kind.PROJECT,
    ),
    ClaimSpec(
        item="§8.16",
        claim="the rank-one first-order (prefix) probe with its linear readout has a low "
        "held-out MSE",
        statistic=lambda r, c: _small(r, c).probe_mse_ratio_median,
        measured=lambda r, c: (
            f"held-out MSE / best-constant MSE (held-out variance): median "
            f"{_small(r, c).probe_mse_ratio_median:.2f}, max "
            f"{_small(r, c).probe_mse_ratio_max:.2f}; held-out corr median "
            f"{_small(r, c).probe_corr_median:.2f}, at the rho_next peak "
            f"{_small(r, c).probe_corr_at_peak:.2f}"
        ),
        criterion=Criterion(
            "median ratio < 1 [R: 'low' read against the best constant, ratio 1: a held-out "
            "R² > 0]",
            lambda ratio: ratio < 1,
        ),
        null=lambda r, c: _small(r, c).probe_mse_ratio_init,
        null_text=lambda r, c: (
            f"probe fitted to the init embeddings: ratio {_small(r, c).probe_mse_ratio_init:.2f}"
        ),
        note=_probe_note,
    ),
)


def run(
    full: bool = False, tiny: bool = False, text_path: str | Path | None = None, seed: int = 0
) -> Outcome:
    if text_path is None:
        raise ValueError("text_path: lm_text needs a UTF-8 text file (--text FILE)")
    path = Path(text_path)
    source = text.load_text(path)
    config = lm_config(full, tiny)
    corpus = text.prepare_corpus(source, vocab_size=text.DEFAULT_VOCAB_SIZE)
    probe_steps = 50 if tiny else 300
    trajectory, _, curves = lm_study.train_and_measure(
        corpus, config, seed=seed, probe_steps=probe_steps
    )
    summary = lm_study.summarize(trajectory, curves)
    return Outcome(
        claims=claims(summary, config.steps, regime(path.name, corpus.vocab_size)),
        figures={
            "curves": lm_study.curves_figure(
                trajectory, curves, f"{path.name}: {get('lm_text').title}"
            )
        },
        numbers=dict(summary=summary, curves=lm_study.curve_lists(trajectory, curves)),
        config=dict(
            text=path.name,
            tokens_train=int(corpus.train.size),
            tokens_validation=int(corpus.validation.size),
            vocab_size=corpus.vocab_size,
            gammas=list(lm_study.GAMMAS),
            seed=seed,
            probe_steps=probe_steps,
            tracked_first=[corpus.vocabulary.tokens[i] for i in trajectory.tracked[:20]],
            **dataclasses.asdict(config),
        ),
    )


def regime(corpus_name: str, vocab_size: int) -> str:
    """The fixed setting of the LM claims (the FFN regime axis does not apply)."""
    return f"GPT, AdamW warm-up-cosine, {corpus_name} (V={vocab_size})"
