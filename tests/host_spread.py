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
  snapshot, loss and logit scale instead: their analysis is what runs);
- ``float64``: the models built in float64 from the same (float32-drawn) initial weights (for
  `ANALYSED`: the recorded snapshots cast to float64 before the analysis reads them).

``python tests/host_spread.py`` runs every perturbation and writes ``tests/data/tiny/spread.json``:
for each experiment a digest of its recorded numbers, the perturbations under which a verdict moved,
and each number some perturbation moved (a path such as ``numbers.add.rho0[3]``) with its gap, the
largest distance between two of its seven values (the record and the six perturbations), and the
perturbations that moved it (a chaotic number also with its range). `admits` is the rule
`test_tiny_records` applies to a replayed number; ``--table`` prints the summary tests/README.md
shows. ``--names`` restricts the experiments, ``--variants`` the perturbations. The suite's XLA
flags (tests/xla_flags.py) and its float64 and dtype settings (tests/conftest.py) apply here too.
Rerun it whenever the records are re-recorded (``RECORD_TINY=1``, tiny_records.py).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
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


#: The tolerance around the record, in measured gaps: a host not measured may land outside the
#: measured range by about as much as the range again (two gaps); four leave room for that.
SAFETY = 4.0
#: A floor for numbers that no perturbation moved: a few float32 roundings of their size.
FLOOR_RTOL, FLOOR_ATOL = 1e-5, 1e-8
#: A number whose gap exceeds this times ``max(|x|, 1)`` is chaotic, not rounded: it is compared
#: with the range its perturbations span, not with its recorded value.
CHAOTIC = 1e-3


def spread_of(values: list) -> tuple[float, float | None, float | None]:
    """``(gap, low, high)`` of ``values``: the largest distance between two of them and their
    range (0 and None for equal non-numbers, NaNs or Nones; inf where they differ otherwise)."""
    numeric = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numeric) == len(values) and all(math.isfinite(v) for v in numeric):
        return max(numeric) - min(numeric), min(numeric), max(numeric)
    same = all(_same(v, values[0]) for v in values)
    return (0.0 if same else math.inf), None, None


def _same(a, b) -> bool:
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or (a == b and type(a) is type(b))


def admits(value, recorded, moved: dict | None) -> tuple[bool, str]:
    """Whether a replayed ``value`` agrees with the ``recorded`` one, given how the perturbations
    ``moved`` it (`collect`'s entry; None: none moved it), and the rule applied:

    - unmoved, or not a finite number: equal, a finite number to the floor (`FLOOR_RTOL`,
      `FLOOR_ATOL`); a non-number that perturbations changed may be any value they gave;
    - rounded (a gap of at most `CHAOTIC` times ``max(|x|, 1)``): within `SAFETY` gaps;
    - chaotic: within the range the perturbations spanned, widened by the gap on each side.
    """
    finite = isinstance(recorded, int | float) and not isinstance(recorded, bool)
    finite = finite and math.isfinite(recorded)
    if not finite:
        seen = moved["seen"] if moved else [recorded]
        return any(_same(value, v) for v in seen), f"one of {seen}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False, "a finite number"
    gap = moved["spread"] if moved else 0.0
    if gap > CHAOTIC * max(abs(recorded), 1.0):
        low, high = moved["low"] - gap, moved["high"] + gap
        return low <= value <= high, f"chaotic: within [{low:.6g}, {high:.6g}]"
    tolerance = max(SAFETY * gap, FLOOR_RTOL * abs(recorded), FLOOR_ATOL)
    return abs(value - recorded) <= tolerance, f"within {tolerance:.3g} of {recorded!r}"


def digest(numbers: dict) -> str:
    """A digest of a record's numbers (its JSON), to tell a spread record that is stale."""
    from ctx_staircase import results

    return hashlib.sha256(results.dumps(numbers).encode()).hexdigest()[:16]


def load(name: str, path: Path = SPREAD) -> dict:
    """Experiment ``name``'s spread record (`collect`): ``digest``, ``moved`` and
    ``verdicts_moved_under``."""
    from ctx_staircase import results

    return results.read_json(path)["experiments"][name]


def collect(names: list[str], variants: list[str]) -> dict:
    """The spread record of ``names`` under ``variants``. For each experiment: the `digest` of
    its recorded numbers; ``moved``, every number some variant moved, with its gap and range
    over the record and the variants (``seen``, the values, for non-numbers) and the variants
    that moved it (``by``; the range ``low``, ``high`` of a chaotic number only); and the
    variants under which a verdict moved."""
    import jax
    import tiny_records

    from ctx_staircase import results

    runs = {variant: _run_variant(names, variant) for variant in variants}
    record = {
        "made": datetime.date.today().isoformat(),
        "host": {"cpu": results.cpu(), "machine": platform.machine()},
        "versions": {"jax": jax.__version__, "python": platform.python_version()},
        "variants": list(variants),
        "rule": {"safety": SAFETY, "floor_rtol": FLOOR_RTOL, "floor_atol": FLOOR_ATOL,
                 "chaotic": CHAOTIC},
        "experiments": {},
    }  # fmt: skip
    for name in names:
        saved = results.read_json(tiny_records.path(name))
        moved = {}
        for where, value in flatten(saved["numbers"]).items():
            seen = {v: runs[v][name]["numbers"].get(where, "missing") for v in variants}
            by = [v for v, x in seen.items() if not _same(x, value)]
            if not by:
                continue
            gap, low, high = spread_of([value, *seen.values()])
            moved[where] = {"spread": gap, "by": ", ".join(by)}
            if low is None:
                moved[where]["seen"] = [value, *(seen[v] for v in by)]
            elif gap > CHAOTIC * max(abs(value), 1.0):
                moved[where] |= {"low": low, "high": high}
        verdicts = [[c["passed"], c["null_passed"]] for c in saved["claims"]]
        record["experiments"][name] = {
            "digest": digest(saved["numbers"]),
            "moved": moved,
            "verdicts_moved_under": [v for v in variants if runs[v][name]["verdicts"] != verdicts],
        }
    return record


def table(record: dict) -> str:
    """tests/README.md's summary of a spread record: per experiment, how many numbers no
    perturbation moved, how many it rounded (and the largest gap relative to ``max(|x|, 1)``)
    and how many are chaotic; then every chaotic number with its range."""
    import tiny_records

    from ctx_staircase import results

    rows = [
        "| experiment | numbers | unmoved | rounded | largest rounded gap | chaotic |",
        "|---|---|---|---|---|---|",
    ]
    chaotic_rows = ["| experiment | number | range | moved by |", "|---|---|---|---|"]
    for name, experiment in record["experiments"].items():
        recorded = flatten(results.read_json(tiny_records.path(name))["numbers"])
        rounded, chaotic, worst, worst_at = 0, 0, 0.0, ""
        for where, entry in experiment["moved"].items():
            relative = entry["spread"] / max(abs(recorded[where]), 1.0)
            if relative > CHAOTIC:
                chaotic += 1
                chaotic_rows.append(
                    f"| {name} | `{where}` | {entry['low']:.6g} to {entry['high']:.6g} | "
                    f"{entry['by']} |"
                )
            else:
                rounded += 1
                worst, worst_at = max((worst, worst_at), (relative, where))
        unmoved = len(recorded) - rounded - chaotic
        at = f" (`{worst_at}`)" if worst_at else ""
        rows.append(
            f"| {name} | {len(recorded)} | {unmoved} | {rounded} | {worst:.1e}{at} | {chaotic} |"
        )
    return "\n".join([*rows, "", *chaotic_rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", help="experiments (default: every replayed one)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=SPREAD)
    parser.add_argument("--table", action="store_true", help="print --out's summary table")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import tiny_records

    from ctx_staircase import results

    names = args.names or [*tiny_records.RECORDED, *tiny_records.ANALYSED]
    if args.child:
        args.out.write_text(json.dumps(_measure(names, args.child)))
    elif args.table:
        print(table(results.read_json(args.out)))
    else:
        results.write_json(args.out, collect(names, args.variants))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
