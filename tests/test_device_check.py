"""benchmarks/device_check.py, the script a lent GPU runs, at its CPU sizes (``--small``): it
must finish and write every ratio it documents."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctx_staircase import results

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_check.py"


@pytest.mark.slow  # the benchmark script end to end: over 20 s
def test_device_check_small_writes_every_ratio(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--small", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = results.read_json(out)
    ratios = (
        report["sweep_vs_loop"]["ratio_loop_over_sweep"],
        report["lm_vs_matmul_peak"]["fraction_of_matmul_peak"],
        report["two_devices"]["ratio_one_over_two"],
    )
    assert all(math.isfinite(r) and r > 0 for r in ratios), ratios
    assert report["lm_vs_matmul_peak"]["fraction_of_matmul_peak"] < 1.5  # a FLOP count gone wrong
    # on CPU a sweep runs lane by lane on the first device: the layouts agree bitwise
    assert report["two_devices"]["W_E_max_rel_difference"] == 0.0
    assert report["environment"]["packages"]["jax"]
