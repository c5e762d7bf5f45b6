"""The command line end to end: outputs on success, one-line errors and no files on bad input."""

import json

import numpy as np
import pytest

from ctx_staircase import cli


def test_list_names_every_task(capsys):
    from ctx_staircase import tasks

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in tasks.names():
        assert name in out


def test_signatures_writes_figure_arrays_and_summary(tmp_path):
    out = tmp_path / "sig"
    assert cli.main(["signatures", "add", "--param", "N=8", "--order", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["task"] == "add" and summary["params"]["N"] == 8
    assert summary["status"] == "ok" and "jax" in summary["environment"]["packages"]
    assert set(summary["geometry"]) == {"order0", "order1", "order1_k1", "order1_k4"}
    arrays = np.load(out / "arrays.npz")
    a = np.arange(1, 9)
    expected = np.maximum(0, 1 - np.abs(a[:, None] - a[None, :]) / 8)  # theory/signatures.md (S3)
    np.testing.assert_allclose(arrays["order0"], expected, atol=1e-12)
    png = (out / "signature_geometry.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 300_000


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["signatures", "nope"], "name"),
        (["signatures", "add", "--param", "N=1"], "N"),
        (["signatures", "add", "--param", "N=nan"], "N"),
        (["signatures", "add", "--param", "bogus=3"], "bogus"),
        (["signatures", "add", "--param", "N"], "--param"),
        (["signatures", "add", "--order", "2"], "--order"),
        (["signatures", "add", "--group", "anchors"], "group"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_files(tmp_path, capsys, argv, needle):
    out = tmp_path / "never"
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and needle in err
    assert not out.exists()
