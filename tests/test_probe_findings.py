"""A crash in the op-support probe is a finding of the campaign, filed by its first tests
(that the crashing signature stays in the generator's choices and a refusal is left out is
tested in test_op_support.py)."""

from __future__ import annotations

import json
import zipfile

from nnsmith_cov.cli import main
from nnsmith_cov.corpus.store import CorpusStore

FAKE = "probe_backends:RefusesF64CrashesF16"


def test_a_probe_crash_is_filed_as_a_finding_with_a_bundle_that_replays(tmp_path, capsys):
    folder, cache = tmp_path / "c", tmp_path / "cache"
    argv = ["fuzz", "-o", str(folder), "--backends", FAKE, "--collector", "none", "--support-cache", str(cache)]
    assert main([*argv, "--tests", "4", "--nodes", "2", "--ops", "Relu", "--search", "sampling", "--no-localize"]) == 0
    out = capsys.readouterr()
    assert "crashes of the op-support probe are run first" in out.out + out.err
    lines = [json.loads(x) for x in (folder / "findings.jsonl").read_text().splitlines()]
    probe = [x for x in lines if x["test"] == 0]
    assert probe and probe[0]["symptom"] == "crash" and probe[0]["stage"] == "compile" and probe[0]["new"]
    bundle = folder / probe[0]["bundle"]
    graph = json.loads((bundle / "graph.json").read_text())
    assert {i["op"] for i in graph["insts"]} == {"Relu"}  # the probe's one-operator model that crashed
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        record = store.record(0)
        assert record is not None and record.gen.get("origin") == "probe"
    with zipfile.ZipFile(bundle / "inputs.npz") as z:  # bundles keep their values deflated (issue 34)
        assert z.infolist() and all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    assert main(["repro", str(bundle), "--plugin", FAKE]) == 0  # it replays, like any finding
