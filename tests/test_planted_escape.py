"""`escape`: the closed form's escape on a drive that is not symmetric and initial weights that
are not equal, so that ``M`` and ``M^T``, and ``W_E0`` and ``W_U0``, cannot stand in for each
other; the first search grid it solves on; and every field of the attention plateau law."""

from __future__ import annotations

import numpy as np
import pytest

from ctx_staircase import closed_form, escape, flows, signatures, tasks, theory
from ctx_staircase.dataset import TokenDataset


def _problem(W_E0, W_U0, M, s, C1, threshold):
    G = W_E0.shape[0]
    ds = TokenDataset(np.array([[0]]), np.array([1]), vocab_size=3)
    setting = theory.Setting(None, np.zeros(G), (1,), "linear", "linear", (C1,))
    return theory.Problem(
        setting, ds, 1, {}, {"W_E": W_E0, "W_U": W_U0}, M, s, threshold, None, None, {}
    )


def test_closed_form_escape_with_a_one_way_drive_and_distinct_embedding_and_unembedding_rows():
    """M = s e_1 e_0^T (M[1, 0] = s), d = 1, W_E0 = eps e_0 and W_U0 = eps e_1, one sample
    [token 0]: a = W_E[0] and b = W_U[1] obey a' = C_1 s b, b' = C_1 s a, so both grow as
    eps e^{C_1 s t}; the centred logit is (2/3) C_1 a b and the escape is
    t* = ln(threshold / ((2/3) C_1 eps^2)) / (2 C_1 s). With M transposed, or W_E0 and W_U0
    exchanged, the token's row never moves and there is no escape at all."""
    s, C1, threshold = 2.0, 0.5, 3.0
    eps = np.array([1e-2, 1e-3])
    M = np.zeros((3, 3))
    M[1, 0] = s
    W_E0, W_U0 = np.zeros((eps.size, 3, 1)), np.zeros((eps.size, 3, 1))
    W_E0[:, 0, 0] = eps
    W_U0[:, 1, 0] = eps
    predicted = escape.closed_form_escape(_problem(W_E0, W_U0, M, s, C1, threshold))
    expected = np.log(threshold / (2 / 3 * C1 * eps**2)) / (2 * C1 * s)
    np.testing.assert_allclose(predicted.escape, expected, rtol=1e-9)
    # the same weights under the transposed drive: nothing grows, nothing escapes
    frozen = escape.closed_form_escape(_problem(W_E0, W_U0, M.T.copy(), s, C1, threshold))
    assert np.all(np.isnan(frozen.escape))


def test_plateau_law_record_holds_the_unit_scale_escape_it_returns_and_the_law():
    """`plateau_law` of a small attention problem: the law's unit-scale escape times are the
    prediction's escape, its law is T_Z d^(2 gamma) - c with c = sqrt(A / threshold), and its
    A5 is the single balanced mode's at rate s_1 / L."""
    ds = tasks.make("add", N=4)
    d, gammas, threshold = 8, np.array([0.6, 0.9]), 2.0
    rng = np.random.default_rng(0)
    V = ds.vocab_size
    unit = {
        "W_E": rng.standard_normal((V, d)),
        "W_U": rng.standard_normal((V, d)),
        "W_O": rng.standard_normal((d, d)),
        "W_V": rng.standard_normal((d, d)),
    }
    M = np.asarray(flows.drive_matrix(signatures.signature_set(ds, 0), V))
    top = float(np.linalg.svd(M, compute_uv=False)[0])
    setting = theory.Setting(None, gammas, (0,), "linear", "linear", (1.0,))
    problem = theory.Problem(setting, ds, d, unit, {}, M, top, threshold, None, None, {})
    predicted = escape.plateau_law(problem)
    law = predicted.law
    assert np.all(np.isfinite(predicted.escape)) and law.solver_ok
    assert law.unit_scale_escape == np.asarray(predicted.escape).tolist()
    assert law.offset_c == pytest.approx(np.sqrt(law.amplitude_A / threshold), rel=1e-12)
    np.testing.assert_allclose(
        law.plateau_law, law.blowup_time_T_Z * d ** (2 * gammas) - law.offset_c, rtol=1e-12
    )
    assert law.escape == law.plateau_law
    eps = d**-gammas
    a5 = [closed_form.attention_plateau_time(top / ds.L, (e * np.sqrt(d)) ** 4) for e in eps]
    np.testing.assert_allclose(law.single_mode_a5, a5, rtol=1e-12)
    # the unit-scale solve and the law are two numbers: the record keeps both
    assert not np.allclose(law.unit_scale_escape, law.plateau_law, rtol=1e-6)
