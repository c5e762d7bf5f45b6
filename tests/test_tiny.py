"""Every experiment's ``--tiny`` smoke run, end to end through `experiments.execute`: it writes
its record, states at least one claim, each with a verdict the table can show, produces its
figures as PNG only (a smoke run skips the PDF), and records that it was tiny. Each run is a
whole experiment (10-20 s), so these are slow; `benchmarks/README.md` has their wall times."""

from __future__ import annotations

import json

import pytest

from ctx_staircase import experiments, paths

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", experiments.names())
def test_tiny_run_writes_a_complete_smoke_record(name, tmp_path):
    experiment = experiments.get(name)
    options = {}
    if "corpus" in experiment.inputs:
        corpus = paths.shared_corpus()
        if not corpus.is_file():
            pytest.skip(f"real-text corpus not found at {corpus} (../shared/data is absent here)")
        options["text_path"] = corpus
    record = experiments.execute(name, tiny=True, root=tmp_path, **options)
    saved = json.loads(experiments.result_path(tmp_path, name).read_text())
    assert saved["tiny"] is True and saved["name"] == name
    # the regime study states no claims of its own: its rows are the other experiments' claims
    assert saved["claims"] or saved["numbers"]["rows"], "a smoke run still states its claims"
    for claim in saved["claims"]:
        assert experiments.verdict(claim) in {"pass", "FAIL", "vacuous", "—"}
        assert claim["measured"] and claim["criterion"]
    for relative in record["figures"].values():
        png = tmp_path / relative
        assert png.read_bytes()[:4] == b"\x89PNG"
        assert not png.with_suffix(".pdf").exists()
    assert not (tmp_path / "units" / name).exists(), "the finished run removes its lanes"
