"""The curvature of a loss at one state: is a plateau a saddle the flow will leave?

A run whose loss has settled sits near a stationary point of the gradient flow. If the loss
Hessian there has a negative eigenvalue ``-lambda``, the point is a strict saddle: a deviation
along its eigenvector grows like ``exp(lambda t)`` and the flow leaves (the plateau ends later).
If every eigenvalue is ``>= 0`` the point is a minimum to second order, and no linear
instability is left to end the plateau (theory/regimes.md, "A plateau's end, read from its
curvature").

`lanczos` finds the extreme eigenvalues of a symmetric operator from its products alone (the
Lanczos method with full reorthogonalization); `curvature` applies it to the Hessian of any loss
``loss(params) -> scalar`` of a parameter pytree by forward-over-reverse Hessian-vector
products, in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ctx_staircase.internal import check_int

__all__ = ["Curvature", "Spectrum", "curvature", "lanczos"]


class Spectrum(NamedTuple):
    """Extreme eigenpairs of a symmetric operator (`lanczos`).

    Attributes:
        least: ``[m]`` the ``m`` least eigenvalues, ascending.
        vectors: ``[m, n]`` their unit eigenvectors (Ritz vectors).
        greatest: the greatest eigenvalue.
    """

    least: np.ndarray
    vectors: np.ndarray
    greatest: float


class Curvature(NamedTuple):
    """The loss, its gradient and the extreme Hessian eigenvalues at one state (`curvature`).

    Attributes:
        loss: the loss there.
        gradient_norm: ``|grad L|`` (Euclidean, over every parameter).
        least: ``[m]`` the least eigenvalues of the Hessian, ascending.
        greatest: its greatest eigenvalue.
    """

    loss: float
    gradient_norm: float
    least: np.ndarray
    greatest: float

    def unstable_rate(self, tolerance: float) -> float:
        """``lambda = -least[0]`` when it exceeds ``tolerance * |greatest|`` (a strict saddle: a
        deviation along its direction grows like ``exp(lambda t)`` under gradient flow), else 0."""
        rate = -float(self.least[0])
        return rate if rate > tolerance * abs(self.greatest) else 0.0


def lanczos(
    product: Callable[[np.ndarray], np.ndarray],
    size: int,
    *,
    modes: int = 1,
    iterations: int = 60,
    seed: int = 0,
) -> Spectrum:
    """The ``modes`` least eigenpairs and the greatest eigenvalue of the symmetric ``[size,
    size]`` operator ``v -> product(v)``, from ``iterations`` products (Lanczos with full
    reorthogonalization, twice, from a standard normal start drawn with ``seed``).

    The tridiagonal ``T = Q^T A Q`` of the Krylov basis ``Q`` has Ritz values that converge to
    the extreme eigenvalues first; an invariant subspace found early ends the iteration.
    """
    check_int(size, "size", 1)
    check_int(modes, "modes", 1)
    check_int(iterations, "iterations", modes + 1)
    iterations = min(iterations, size)
    q = np.random.default_rng(seed).standard_normal(size)
    q /= np.linalg.norm(q)
    basis = np.zeros((iterations, size))
    alpha, beta = np.zeros(iterations), np.zeros(iterations)
    for i in range(iterations):
        basis[i] = q
        w = np.array(product(q), dtype=np.float64)
        alpha[i] = q @ w
        w -= basis[: i + 1].T @ (basis[: i + 1] @ w)
        w -= basis[: i + 1].T @ (basis[: i + 1] @ w)
        beta[i] = np.linalg.norm(w)
        if beta[i] <= 1e-14 * max(1.0, abs(alpha[i])):
            basis, alpha, beta = basis[: i + 1], alpha[: i + 1], beta[: i + 1]
            break
        q = w / beta[i]
    T = np.diag(alpha) + np.diag(beta[:-1], 1) + np.diag(beta[:-1], -1)
    values, vectors = np.linalg.eigh(T)
    m = min(modes, values.size)
    return Spectrum(values[:m], vectors[:, :m].T @ basis, float(values[-1]))


def curvature(
    loss: Callable[[Any], jax.Array],
    params: Any,
    *,
    modes: int = 1,
    iterations: int = 60,
    seed: int = 0,
) -> Curvature:
    """`Curvature` of ``loss`` at ``params`` (any pytree of arrays), evaluated in float64: the
    loss, ``|grad L|`` and the Hessian's ``modes`` least eigenvalues and greatest one by
    `lanczos` on ``H v = d/de grad L(params + e v)`` (one compiled product)."""
    with jax.enable_x64(True):
        # every leaf in float64 first: the pytree's own dtypes would round the point back down
        flat, unravel = ravel_pytree(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params))

        def flat_loss(x):
            return loss(unravel(x))

        gradient = jax.jit(jax.grad(flat_loss))
        hvp = jax.jit(lambda v: jax.jvp(gradient, (flat,), (v,))[1])
        spectrum = lanczos(
            lambda v: np.asarray(hvp(jnp.asarray(v))),
            flat.size,
            modes=modes,
            iterations=iterations,
            seed=seed,
        )
        return Curvature(
            float(flat_loss(flat)),
            float(jnp.linalg.norm(gradient(flat))),
            spectrum.least,
            spectrum.greatest,
        )
