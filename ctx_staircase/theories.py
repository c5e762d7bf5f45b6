"""The registry: every theory compared with training, and the theory of each model.

`REGISTRY` lists every `theory.Theory` (or `theory.PerOrder` family) in the order their numbers
are saved; a run solves those that apply to its model and activation (`selected`). `MODELS`
holds the `theory.ModelTheory` of each model with a theory. A new theory is its module (its
``solve`` and ``nbytes``) and one `register` call here; `comparison`, `budget`, `plots` and the
command line ask the records, never the names:

- FFN (theory/closed_form.md, theory/escape_feedback.md, theory/ffn.md, theory/relu.md): the
  signature flow at each ``max_order`` (ODE), the closed form (C3), the closed form with the
  softmax feedback, and with ``sigma = relu`` the gated flow (R5, ODE) and the frozen-gate closed
  form (R4); the escape before training is the closed form's.
- Attention-only (theory/attention.md): the uniform-attention flow (A3, ODE); the escape before
  training is the plateau law (A5b).
"""

from __future__ import annotations

import functools

import numpy as np

from ctx_staircase import closed_form, escape, flows, models, relu, relu_escape
from ctx_staircase.internal import check_choice
from ctx_staircase.theory import (
    ModelTheory,
    PerOrder,
    Setting,
    Size,
    Style,
    Theory,
    Validation,
)


def _linear_law(gammas: np.ndarray, experiment) -> tuple[np.ndarray, str]:
    """The FFN's escape law ``t = ln d / (C_1 s_1) gamma + offset`` (eq. C8), the offset
    fitted to the measured times."""
    analytic = experiment.escape_slope.analytic
    measured = np.asarray(experiment.escape.simulation) - analytic * np.asarray(
        experiment.escape.gamma
    )
    label = rf"$\ln d / (C_1 s_1)$, slope {analytic:.1f} (offset fitted)"
    return np.nanmean(measured) + analytic * gammas, label


def _power_law(gammas: np.ndarray, experiment) -> tuple[np.ndarray, str]:
    """The attention plateau's power ``T_Z d^{2 gamma}`` (A5b), slope ``2 ln d`` in ``ln t``."""
    analytic = experiment.escape_slope.analytic
    d = float(np.exp(analytic / 2))
    label = rf"$T_Z d^{{2\gamma}}$, slope $2 \ln d$ = {analytic:.2f}"
    return experiment.law.blowup_time_T_Z * d ** (2 * gammas), label


def _compare_bytes(size: Size, per_sample: int) -> int:
    """`comparison.compare`'s temporaries: the logit scale ``[T, n, (L + 1) d]``, the Gram
    matrices ``[T, V, V]`` (three), and ``per_sample`` more elements per sample and snapshot."""
    per_step = size.n * (size.L + 1) * size.d + size.n * per_sample + 3 * size.V * size.V
    return 8 * size.T * per_step


FFN = ModelTheory(
    model=models.get("ffn"),
    gamma_range=(0.5, 2.0),
    default_gammas=(0.6, 0.8, 1.0, 1.2, 1.4),
    roles=("W_E", "W_U"),
    model_kwargs={},
    predict=escape.closed_form_escape,
    log_time=False,
    analytic_slope=lambda p: float(np.log(p.d) / (p.setting.coefficients[0] * p.top)),
    analytic_curve=_linear_law,
    slope_words=("escape-time slope dt/dγ", "ln d / (C_1 s_1), eq. C8"),
    signature_order=flows.signature_order,
    compare_bytes=lambda size: _compare_bytes(size, 0),
    escape_bytes=escape.closed_form_escape_bytes,
)
# d = 128 puts the attention plateau, ~d^(2 gamma), past any CPU horizon above gamma = 1
# (t* ~ 3900 at gamma = 1)
ATTENTION = ModelTheory(
    model=models.get("attention"),
    gamma_range=(0.55, 1.0),
    default_gammas=(0.6, 0.65, 0.7, 0.75, 0.8),
    roles=("W_E", "W_U", "W_O", "W_V"),
    model_kwargs={"positional": False},  # the theory has no positional embeddings
    predict=escape.plateau_law,
    log_time=True,
    analytic_slope=lambda p: float(2 * np.log(p.d)),
    analytic_curve=_power_law,
    slope_words=("log-escape slope d ln t/dγ", "2 ln d"),
    signature_order=lambda L, max_orders, prediction: 0,
    compare_bytes=lambda size: _compare_bytes(size, size.V),  # the attention logits [n, V]
)
#: The theory of each model, by the model's name.
MODELS = (FFN, ATTENTION)


def _trajectories(size: Size) -> int:
    """A closed form's peak: its trajectories."""
    return size.trajectory_bytes


#: Every theory, in the order a run's numbers are saved (`register` appends).
REGISTRY: list = []


def register(entry):
    """Add a `theory.Theory` (or a `theory.PerOrder` family) to `REGISTRY`, after the others;
    returns it. ValueError if a theory of that name is registered."""
    if isinstance(entry, Theory) and entry.name in {
        e.name for e in REGISTRY if isinstance(e, Theory)
    }:
        raise ValueError(f"theory {entry.name!r} is registered already")
    REGISTRY.append(entry)
    return entry


def signature_flow(m: int) -> Theory:
    """The FFN signature flow truncated at context order ``m`` (theory/ffn.md), an ODE: evenly
    dotted at order 0, in groups of ``m + 2`` dots at order ``m >= 1``, so orders read apart."""
    dots = (1, 1) if m == 0 else (1, 1) * (m + 1) + (1, 5)
    return Theory(
        f"signature_flow_m{m}",
        Style("ode", f"ODE: signature flow to order {m}", (0, dots)),
        solve=functools.partial(flows.signature_flow_lanes, m=m),
        nbytes=flows.signature_flow_bytes,
        model=FFN,
    )


_SIGNATURE_FLOW = register(PerOrder(signature_flow))
UNIFORM_ATTENTION_FLOW = register(
    Theory(
        "uniform_attention_flow",
        Style("ode", "ODE: uniform-attention flow"),
        solve=flows.uniform_attention_lanes,
        nbytes=flows.uniform_attention_bytes,
        model=ATTENTION,
    )
)
CLOSED_FORM = register(
    Theory(
        "closed_form",
        Style("closed_form", "closed form: linear phase"),
        solve=closed_form.linear_lanes,
        nbytes=_trajectories,
        model=FFN,
    )
)
CLOSED_FORM_FEEDBACK = register(
    Theory(
        "closed_form_feedback",
        Style("closed_form", "closed form with softmax feedback", (0, (7, 2)), 1.2),
        solve=closed_form.feedback_lanes,
        nbytes=_trajectories,
        model=FFN,
        # it misses on weighted_mod and max3 (theory/escape_feedback.md §5)
        validated=Validation("poly:1,0.5", (0.6, 1.4)),
    )
)
RELU_GATED_FLOW = register(
    Theory(
        "relu_gated_flow",
        Style("ode", "ODE: ReLU gated flow", (0, (1, 1, 1, 4)), 1.6),
        solve=relu.gated_flow_lanes,
        nbytes=relu.gated_flow_bytes,
        model=FFN,
        activation="relu",
        validated=Validation("relu", (0.8, 1.4)),  # theory/relu.md §6
    )
)
CLOSED_FORM_FROZEN_GATES = register(
    Theory(
        "closed_form_frozen_gates",
        Style("closed_form", "closed form: ReLU, gates frozen at t = 0", (0, (3, 1, 1, 1)), 1.2),
        solve=relu.frozen_gate_lanes,
        nbytes=_trajectories,
        model=FFN,
        activation="relu",
    )
)

RELU_ESCAPE_LAW = register(
    Theory(
        "relu_escape_law",
        Style("closed_form", "closed form: ReLU escape law (unit flow, feedback clock)", None, 1.8),
        solve=relu_escape.escape_law_lanes,
        nbytes=relu_escape.escape_law_bytes,
        model=FFN,
        activation="relu",
        validated=Validation("relu", (0.8, 1.4)),  # theory/relu.md §8.2: d = 128, N 20-40
    )
)


def applicable(setting: Setting) -> tuple[Theory, ...]:
    """Every theory that applies to a run of ``setting`` (its model, activation and orders),
    in `REGISTRY` order, whatever ``setting.theories`` names."""
    return tuple(theory for entry in REGISTRY for theory in entry.instances(setting))


def selected(setting: Setting) -> tuple[Theory, ...]:
    """The theories a run of ``setting`` solves, in `REGISTRY` order: those of `applicable`
    that ``setting.theories`` names, or all of them when it is None."""
    chosen = applicable(setting)
    if setting.theories is None:
        return chosen
    return tuple(theory for theory in chosen if theory.name in setting.theories)


def validated() -> tuple[Theory, ...]:
    """The registered theories whose escape law is validated against training."""
    return tuple(e for e in REGISTRY if isinstance(e, Theory) and e.validated is not None)


def model_names() -> tuple[str, ...]:
    """The models with a theory: ``("ffn", "attention")``."""
    return tuple(theory.name for theory in MODELS)


def model(name: str) -> ModelTheory:
    """The `theory.ModelTheory` of model ``name``; ValueError naming ``model`` otherwise."""
    check_choice(name, "model", model_names())
    return next(theory for theory in MODELS if theory.name == name)


__all__ = [
    "ATTENTION",
    "CLOSED_FORM",
    "CLOSED_FORM_FEEDBACK",
    "CLOSED_FORM_FROZEN_GATES",
    "FFN",
    "MODELS",
    "REGISTRY",
    "RELU_ESCAPE_LAW",
    "RELU_GATED_FLOW",
    "UNIFORM_ATTENTION_FLOW",
    "applicable",
    "model",
    "model_names",
    "register",
    "selected",
    "signature_flow",
    "validated",
]
