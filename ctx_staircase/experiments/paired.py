"""A paired comparison over seeds that calls a tie a tie: one-sided paired t-tests both ways.

Given per-seed differences ``d_s = a_s - b_s`` (``s`` = 1..n, one number per seed, e.g. a late
mean of two correlations on the same embedding), the two one-sided one-sample t-tests of the mean
``mu`` of ``d`` give ``p_greater`` (H0: ``mu <= 0`` against ``mu > 0``) and ``p_less`` (H0:
``mu >= 0`` against ``mu < 0``). The comparison is decided three ways at level ``alpha``:
``"greater"`` (``p_greater < alpha``), ``"less"`` (``p_less < alpha``) or ``"tie"`` (neither):
a true tie is called a tie in all but about ``2 alpha`` of runs, not a coin flip on the sign of
the mean.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats

#: The significance level of each one-sided test.
ALPHA = 0.05
#: The fewest seeds a paired test is run on (fewer: not applicable).
MIN_SEEDS = 5
OUTCOMES = ("greater", "less", "tie")


@dataclasses.dataclass(frozen=True)
class PairedTest:
    """The paired comparison of ``n`` per-seed differences.

    Attributes:
        n: the number of seeds.
        mean, sd: the mean and the sample standard deviation (ddof 1) of the differences.
        p_greater, p_less: the one-sided p-values (NaN when ``n < MIN_SEEDS``).
        outcome: one of `OUTCOMES`, or ``None`` when ``n < MIN_SEEDS`` (not applicable).
        positive: how many differences are > 0.
    """

    n: int
    mean: float
    sd: float
    p_greater: float
    p_less: float
    outcome: str | None
    positive: int

    def text(self) -> str:
        """``mean ± sd over n seeds (k of n > 0); one-sided paired t: p(>) = ..., p(<) = ...``."""
        spread = f" ± {self.sd:.4f}" if self.n > 1 else ""
        seeds = "seed" if self.n == 1 else "seeds"
        head = f"{self.mean:+.4f}{spread} over {self.n} {seeds} ({self.positive} > 0)"
        if self.outcome is None:
            return f"{head}; paired test not applicable (fewer than {MIN_SEEDS} seeds)"
        return f"{head}; one-sided paired t: p(>) = {self.p_greater:.3g}, p(<) = {self.p_less:.3g}"


def paired_test(differences, alpha: float = ALPHA) -> PairedTest:
    """`PairedTest` of ``differences [n]`` (one per seed). Differences with no spread (every
    seed the same) give p = 0 on the side of their sign and 1 on the other, and p = 1 both
    ways when they are all 0."""
    d = np.asarray(differences, dtype=np.float64).ravel()
    if not np.all(np.isfinite(d)):
        raise ValueError(f"differences must be finite; got {d.tolist()}")
    n = d.size
    mean = float(d.mean()) if n else float("nan")
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    positive = int(np.sum(d > 0))
    if n < MIN_SEEDS:
        return PairedTest(n, mean, sd, float("nan"), float("nan"), None, positive)
    if sd == 0.0:
        p_greater = 0.0 if mean > 0 else 1.0
        p_less = 0.0 if mean < 0 else 1.0
    else:
        p_greater = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
        p_less = float(stats.ttest_1samp(d, 0.0, alternative="less").pvalue)
    outcome = "greater" if p_greater < alpha else "less" if p_less < alpha else "tie"
    return PairedTest(n, mean, sd, p_greater, p_less, outcome, positive)
