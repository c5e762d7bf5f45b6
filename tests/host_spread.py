"""How far each replayed number moves between hosts (`test_tiny_records`'s tolerances).

A recorded smoke run (`tiny_records`) is float32 arithmetic compiled for the recording host's
vector width. Another host rounds differently, so the test may only ask a number to agree within
the spread such rounding produces. This tool measures that spread by perturbing the computation
the way another host does, each perturbation in its own process:

- ``isa=NONE`` (this host's widest vector ISA), ``isa=AVX2``, ``isa=AVX``, ``isa=SSE4_2``: XLA
  capped at that instruction set (``--xla_cpu_max_isa``), which changes the order of its
  vectorized reductions;
- ``ulp``: one unit in the last place added to every initial weight (the trainings of
  `tiny_records.ANALYSED`, replayed from their recordings, get it on every recorded weight
  snapshot instead: their analysis is what runs);
- ``float64``: the models built in float64 from the same (float32-drawn) initial weights (for
  `ANALYSED`: the recorded snapshots cast to float64 before the analysis reads them).

``python tests/host_spread.py`` runs every perturbation and writes ``tests/data/tiny/spread.json``:
for each experiment and each number (a path such as ``numbers.add.rho0[3]``), the recorded value,
the value under each perturbation and the spread, the largest distance between any two of them;
and for each claim, whether its verdicts moved. ``--names`` restricts the experiments,
``--variants`` the perturbations. The test settings of tests/conftest.py (float64 enabled, four
host devices, XLA's classic CPU emitters) are applied here too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import xla_flags

HERE = Path(__file__).resolve().parent
SPREAD = HERE / "data" / "tiny" / "spread.json"
VARIANTS = ("isa=NONE", "isa=AVX2", "isa=AVX", "isa=SSE4_2", "ulp", "float64")


def flatten(value, where: str = "numbers") -> dict[str, object]:
    """A JSON value as ``{path: leaf}``: dict keys as ``.key``, list items as ``[i]``."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out |= flatten(item, f"{where}.{key}")
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out |= flatten(item, f"{where}[{i}]")
        return out
    return {where: value}


def _perturbed(create, variant: str):
    """`models.create` whose model is perturbed as ``variant`` says: every floating parameter
    one ulp up (``ulp``) or widened to float64 after its float32 draw (``float64``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    def change(x):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        if variant == "ulp":
            return jnp.nextafter(x, jnp.asarray(jnp.inf, x.dtype))
        return x.astype(np.float64)

    def perturbed(*args, **kwargs):
        graphdef, state = nnx.split(create(*args, **kwargs))
        return nnx.merge(graphdef, jax.tree.map(change, state))

    return perturbed


def _measure(names: list[str], variant: str) -> dict:
    """Each experiment's ``{"numbers": {path: leaf}, "verdicts": [[passed, null_passed]...]}``
    under ``variant`` (run in this process, whose XLA flags the caller set)."""
    import jax
    import pytest

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    import tiny_records

    from ctx_staircase import models, train

    out = {}
    for name in names:
        with pytest.MonkeyPatch.context() as patch:
            if name not in tiny_records.ANALYSED:
                if variant in ("ulp", "float64"):
                    patch.setattr(models, "create", _perturbed(models.create, variant))
                got = tiny_records.tiny_record(name)
            else:
                replayed = _replayed(train.trajectory_from_arrays, variant)
                patch.setattr(train, "trajectory_from_arrays", replayed)
                with tiny_records.recorded_sweeps(patch, name, record=False):
                    got = tiny_records.tiny_record(name)
        out[name] = {
            "numbers": flatten(got["numbers"]),
            "verdicts": [[c["passed"], c["null_passed"]] for c in got["claims"]],
        }
    return out


def _replayed(from_arrays, variant: str):
    """`train.trajectory_from_arrays` whose recorded weights, loss and logit scale are
    perturbed as ``variant`` says: one ulp up (``ulp``) or cast to float64 (``float64``)."""
    import numpy as np

    def replayed(arrays):
        arrays = dict(arrays)
        for key in ("W_E", "W_U", "loss", "logit_scale"):
            value = arrays.get(key)
            if value is None or not np.issubdtype(value.dtype, np.floating):
                continue
            if variant == "ulp":
                arrays[key] = np.nextafter(value, np.inf).astype(value.dtype)
            elif variant == "float64":
                arrays[key] = value.astype(np.float64)
        return from_arrays(arrays)

    return replayed


def _run_variant(names: list[str], variant: str) -> dict:
    """`_measure` in a fresh process with ``variant``'s XLA flags."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", xla_flags.EXTRA)}
    if variant.startswith("isa=") and variant != "isa=NONE":
        env[xla_flags.EXTRA] = f"--xla_cpu_max_isa={variant[4:]}"
    env["XLA_FLAGS"] = xla_flags.flags(env)
    with tempfile.TemporaryDirectory() as scratch:
        answer = Path(scratch) / "numbers.json"
        command = [sys.executable, __file__, "--child", variant, "--out", str(answer)]
        done = subprocess.run(
            [*command, "--names", *names], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{variant} failed:\n{done.stderr[-4000:]}")
        return json.loads(answer.read_text())


def _spread(values: list) -> float | None:
    """The largest distance between two finite values (None: not all numbers; inf: some are
    finite and some are not, or the non-numbers differ)."""
    if all(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        return 0.0 if all(v == values[0] for v in values) else math.inf
    floats = [math.nan if v is None else float(v) for v in values]
    finite = [v for v in floats if math.isfinite(v)]
    if len(finite) != len(floats):
        same = all(a == b or (math.isnan(a) and math.isnan(b)) for a in floats for b in floats)
        return 0.0 if same else math.inf
    return max(finite) - min(finite)


def collect(names: list[str], variants: list[str]) -> dict:
    """The spread record of ``names`` under ``variants`` (and the recorded values)."""
    import jax
    import tiny_records

    from ctx_staircase import results

    runs = {variant: _run_variant(names, variant) for variant in variants}
    record = {
        "made": datetime.date.today().isoformat(),
        "host": {"cpu": results.cpu(), "machine": platform.machine()},
        "versions": {"jax": jax.__version__, "python": platform.python_version()},
        "variants": list(variants),
        "experiments": {},
    }
    for name in names:
        saved = results.read_json(tiny_records.path(name))
        recorded = flatten(saved["numbers"])
        numbers = {}
        for where, value in recorded.items():
            seen = {v: runs[v][name]["numbers"].get(where, "missing") for v in variants}
            spread = _spread([value, *seen.values()])
            numbers[where] = {"recorded": value, "spread": spread, "values": seen}
        verdicts_recorded = [[c["passed"], c["null_passed"]] for c in saved["claims"]]
        moved = [v for v in variants if runs[v][name]["verdicts"] != verdicts_recorded]
        record["experiments"][name] = {"numbers": numbers, "verdicts_moved_under": moved}
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", help="experiments (default: every replayed one)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=SPREAD)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import tiny_records

    names = args.names or [*tiny_records.RECORDED, *tiny_records.ANALYSED]
    if args.child:
        args.out.write_text(json.dumps(_measure(names, args.child)))
        return
    from ctx_staircase import results

    results.write_json(args.out, collect(names, args.variants))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
