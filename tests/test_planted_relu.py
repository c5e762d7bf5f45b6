"""Properties of the ReLU gated law (`relu`) that its other tests reach only on datasets whose
sample weights already sum to one."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_weights, tiny_dataset

from ctx_staircase import relu
from ctx_staircase.dataset import TokenDataset


def test_gated_problem_and_field_do_not_depend_on_the_scale_of_the_weights():
    """`gated_problem` of a dataset whose weights are scaled by 7 has p_n summing to one, and the
    same drive and gated field as the dataset itself."""
    ds = tiny_dataset()
    scaled = TokenDataset(ds.tokens, ds.labels, vocab_size=ds.vocab_size, weights=7.0 * ds.weights)
    reference, problem = relu.gated_problem(ds), relu.gated_problem(scaled)
    assert float(jnp.sum(problem.weights)) == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(problem.weights, reference.weights, rtol=1e-14)
    np.testing.assert_allclose(problem.drive, reference.drive, rtol=1e-14, atol=1e-16)
    W_E, W_U = (jnp.asarray(W) for W in random_weights(8, 5, seed=1, scale=0.7))
    for got, want in zip(
        relu.gated_field(problem, W_E, W_U, "linear"),
        relu.gated_field(reference, W_E, W_U, "linear"),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
