"""Elementwise activations σ of the models (paper §4.1) and their derivatives σ'.

An ``Activation`` is a small, hashable description: ReLU, GELU (the activation of Wang et al.,
"Probability-Signature Dynamics", 2026), or a polynomial σ(z) = Σ_{k=1}^K C_k z^k (the paper's
Assumption 1, §4.3), which covers the identity (C = (1,)) and the monomials z^K of main Fig. 5. Its
``coefficients`` (C_1, ..., C_K) are exactly what the signature expansion of the gradient needs
(``flows.order_contributions``); they are ``None`` for ReLU and GELU, whose expansion is not finite.

``apply`` and ``derivative`` are pure, elementwise and jit-safe; the activation itself is static
(pass it through ``functools.partial`` or as a static argument, not as a traced pytree). ``z`` must
be floating; the coefficients enter as Python floats (weakly typed), so the result has the dtype
of ``z`` under strict dtype promotion.

Accepted specs (``get``):

- ``"relu"``; ``"gelu"`` (the exact, erf-based GELU, as in PyTorch's default);
- ``"identity"``, the polynomial with C = (1,); an ``Activation``, returned after validation;
- ``"poly:c1,c2,..."`` or ``("poly", (c1, c2, ...))``: σ(z) = c1 z + c2 z² + ...;
- ``"z^K"``, ``"monomial:K"`` or ``("monomial", K)``: σ(z) = z^K, K an int in [1, 64]
  (`_MAX_DEGREE`, also the most coefficients a polynomial may have).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Activation",
    "affine_on",
    "apply",
    "derivative",
    "effective_coefficients",
    "get",
    "names",
]

#: Highest polynomial degree K accepted (Fig. 5 uses K <= 6; the signature expansion and the
#: traced Horner loop grow with K, and ``"z^1000000000"`` would build a 10^9-entry tuple).
_MAX_DEGREE = 64

_ALLOWED = (
    "one of 'relu', 'gelu', 'identity', 'poly:c1,c2,...', 'z^K', 'monomial:K', "
    "('poly', (c1, c2, ...)), ('monomial', K) or an Activation"
)


class Activation(NamedTuple):
    """An elementwise activation.

    ``name`` is one of ``names()``; ``coefficients`` is (C_1, ..., C_K) of σ(z) = Σ_k C_k z^k for
    ``"identity"``, ``"poly"`` and ``"monomial"`` (the paper §4.3), and ``None`` for ``"relu"`` and
    ``"gelu"``.
    """

    name: str
    coefficients: tuple[float, ...] | None


def names() -> tuple[str, ...]:
    """The activation names: ``("relu", "gelu", "identity", "poly", "monomial")``."""
    return ("relu", "gelu", "identity", "poly", "monomial")


def _error(spec, why: str = "") -> ValueError:
    detail = f" ({why})" if why else ""
    return ValueError(f"activation must be {_ALLOWED}; got {spec!r}{detail}")


def _polynomial(spec, coefficients) -> Activation:
    """A validated ``"poly"`` activation from a sequence of numbers (C_1, ..., C_K)."""
    try:
        values = tuple(float(c) for c in coefficients)
    except (TypeError, ValueError) as error:
        raise _error(spec, "coefficients must be real numbers") from error
    if not values:
        raise _error(spec, "a polynomial needs at least one coefficient C_1")
    if len(values) > _MAX_DEGREE:
        raise _error(spec, f"at most {_MAX_DEGREE} coefficients (degree K <= {_MAX_DEGREE})")
    if not all(math.isfinite(c) for c in values):
        raise _error(spec, "coefficients must be finite")
    return Activation("poly", values)


def _monomial(spec, degree) -> Activation:
    """σ(z) = z^K as the coefficient tuple (0, ..., 0, 1) of length K."""
    if isinstance(degree, str):
        try:
            degree = int(degree.strip())
        except ValueError as error:
            raise _error(spec, f"K must be an integer in [1, {_MAX_DEGREE}]") from error
    if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= _MAX_DEGREE:
        raise _error(spec, f"K must be an integer in [1, {_MAX_DEGREE}]")
    return Activation("monomial", (0.0,) * (degree - 1) + (1.0,))


def get(spec) -> Activation:
    """Parse an activation spec (see the module docstring) into an ``Activation``.

    Raises ``ValueError`` naming ``activation`` and the allowed forms for anything else.
    """
    if isinstance(spec, Activation):
        if spec.name in ("relu", "gelu"):
            if spec.coefficients is not None:
                raise _error(spec, f"{spec.name} has no coefficients")
            return spec
        if spec.name == "monomial":
            checked = _polynomial(spec, spec.coefficients or ())
            if checked.coefficients[-1] != 1.0 or any(checked.coefficients[:-1]):
                raise _error(spec, "a monomial has coefficients (0, ..., 0, 1)")
            return spec._replace(coefficients=checked.coefficients)
        if spec.name in ("identity", "poly"):
            checked = _polynomial(spec, spec.coefficients or ())
            if spec.name == "identity" and checked.coefficients != (1.0,):
                raise _error(spec, "identity has coefficients (1.0,)")
            return spec._replace(coefficients=checked.coefficients)
        raise _error(spec)
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text in ("relu", "gelu"):
            return Activation(text, None)
        if text == "identity":
            return Activation("identity", (1.0,))
        if text.startswith("poly:"):
            return _polynomial(spec, text[len("poly:") :].split(","))
        if text.startswith("monomial:"):
            return _monomial(spec, text[len("monomial:") :])
        if text.startswith("z^"):
            return _monomial(spec, text[len("z^") :])
        raise _error(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        kind, argument = spec
        if kind == "poly":
            if isinstance(argument, str | bytes) or not hasattr(argument, "__iter__"):
                raise _error(spec, "('poly', ...) takes a sequence of coefficients")
            return _polynomial(spec, argument)
        if kind == "monomial":
            return _monomial(spec, argument)
    raise _error(spec)


def _horner(coefficients: tuple[float, ...], z: jax.Array) -> jax.Array:
    """Σ_{j=0}^{n-1} a_j z^j for ``coefficients`` = (a_0, ..., a_{n-1}), in the dtype of ``z``."""
    result = jnp.full_like(z, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        result = result * z + coefficient
    return result


def _gelu_derivative(z: jax.Array) -> jax.Array:
    """d/dz [z Φ(z)] = Φ(z) + z φ(z) for the exact GELU."""
    cdf = 0.5 * (1.0 + jax.lax.erf(z / math.sqrt(2.0)))
    density = jnp.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return cdf + z * density


def apply(activation: Activation, z: jax.Array) -> jax.Array:
    """σ(z) elementwise; ``z`` floating, any shape; the result has the shape and dtype of ``z``."""
    z = jnp.asarray(z)
    if activation.name == "relu":
        return jax.nn.relu(z)
    if activation.name == "gelu":
        return jax.nn.gelu(z, approximate=False)
    if activation.coefficients is None:
        raise _error(activation)
    # σ(z) = z (C_1 + C_2 z + ... + C_K z^{K-1})
    return z * _horner(activation.coefficients, z)


def derivative(activation: Activation, z: jax.Array) -> jax.Array:
    """σ'(z) elementwise, same shape and dtype as ``z``.

    ReLU: the step 1{z > 0} (0 at 0). GELU: Φ(z) + z φ(z). Polynomial: Σ_k k C_k z^{k-1}, the
    series of the paper's expansion of σ' (§4.3, App. B.1).
    """
    z = jnp.asarray(z)
    if activation.name == "relu":
        return (z > 0).astype(z.dtype)
    if activation.name == "gelu":
        return _gelu_derivative(z)
    if activation.coefficients is None:
        raise _error(activation)
    scaled = tuple(k * c for k, c in enumerate(activation.coefficients, start=1))
    return _horner(scaled, z)


def effective_coefficients(activation: Activation) -> tuple[float, ...]:
    """Polynomial coefficients ``(C_1, .., C_K)`` the signature flows use for an activation.

    Polynomials give their own. GELU, ``z Phi(z)``, has the Taylor series
    ``z/2 + z^2/sqrt(2 pi) - z^4/(6 sqrt(2 pi)) + ...``, exact at small pre-activations; it is
    truncated at degree 4. ReLU has no expansion at 0 and no scale-free higher term; it gets the
    mean slope ``(0.5,)``, a linear (m = 0) flow only. Measured on `add` (theory/ffn.md §6), this
    rate predicts the early alignment (rho_0 onset within 2%) but not the escape: the escaping
    mode lives on active units and grows at rate ~1. ReLU escape times come from the exact gated
    law instead (`relu.gated_flow`, theory/relu.md).
    """
    activation = get(activation)
    if activation.coefficients is not None:
        return activation.coefficients
    if activation.name == "gelu":
        c = 1.0 / math.sqrt(2.0 * math.pi)
        return (0.5, c, 0.0, -c / 6.0)
    return (0.5,)


def affine_on(activation: Activation, low, high) -> np.ndarray:
    """Whether σ is affine on each interval ``[low, high]`` (arrays of one shape; bool, that shape).

    ReLU is affine on an interval that does not cross 0 (its gate is the same on all of it:
    ``low > 0`` or ``high <= 0``, the gate being ``1[z > 0]``); the identity everywhere; every other
    activation only on a point.
    """
    activation = get(activation)
    low, high = np.asarray(low), np.asarray(high)
    if activation.name == "relu":
        return (low > 0) | (high <= 0)
    if activation.coefficients is not None and not any(activation.coefficients[1:]):
        return np.ones(np.broadcast(low, high).shape, bool)
    return low == high
