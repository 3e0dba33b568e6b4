"""The folder of one fuzzing run: its configuration, findings, statistics and worker logs.

RUN/config.json       the run's settings (FuzzConfig.to_json, its own CONFIG_SCHEMA: see
                      campaign/fuzz_config.py) and package versions, e.g.
                      {"schema": 2, "seed": 1, "backends": ["ort", "tvm"], "nodes": 10, ...,
                       "versions": {"torch": "2.13.0+cpu", "tvm": "0.27.0.post1"}}
RUN/stats.json        counters, rewritten (temp file + rename) every few seconds and at the end
RUN/findings.jsonl    one line per finding: {"test": 3, "seed": 77, "signature": "...",
                       "new": true, "bundle": "findings/crash-tvm-compile-3fa2c1d0e9ab", ...}
RUN/findings/<kind>-<backend>-<stage>-<id>/   one bundle per unique signature (oracle/bundle.py)
RUN/internal.jsonl, RUN/internal/   nnsmith-cov's own errors, apart from findings (campaign/internal.py)
RUN/findings/.staged/, RUN/internal/.staged/   bundles of a test not yet committed (campaign/ledger.py)
RUN/workers/w0.log    what the worker printed (cut when it grows past a limit)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.signature import short_id

RUN_SCHEMA = 1
# RUN/stats.json: {"schema": RUN_SCHEMA} | RunStats.to_json() (campaign/run_stats.py), plus
# "scheduler" (Scheduler.summary()) with feedback on. Counts run from the campaign's start (a
# resumed campaign carries them on); times are campaign seconds, before a resume included.
#
#   {"schema": 1,
#    "elapsed_s": 3600.125,
#    "tests": 412,                  test cases started (graphs asked for)
#    "executed": 380,               reached at least one backend
#    "passed": 371,
#    "no_values": 9,                the value search found no NaN/Inf-free values: not tested
#    "generation_failed": 2,
#    "infeasible_dropped": 21,      graphs the generator dropped as proven to have no valid values
#    "internal_errors": 1,          tests ended by an error of nnsmith-cov's own code
#    "internal_signatures": 1,      ... distinct ones (RUN/internal.jsonl has each)
#    "findings": {"crash/compile/tvm": 6, "inconsistency/execute/ort": 3},   symptom/stage/backend
#    "unique_signatures": 4,
#    "last_unique_s": 2810.5,       when the last new signature came (null before the first)
#    "worker_restarts": 1,          by this process (not carried over a resume)
#    "corpus": 57,                  tests kept for new coverage
#    "op_tests": {"Add": 118, "Conv2d": 40, ...},                generated tests holding each op
#    "export_tests": {"opset 13": 380, "static": 380, ...},      ... by export plan
#    "coverage": {"branches": 4466, "pass_branches": 210, "universe": 105304,
#                 "interesting_tests": 57, "last_new_s": 3522.0,
#                 "parts": {"python": {"branches": 3100, "pass_branches": 150, "universe": 61000}, ...}},
#                 (null without a collector; "parts" with a composite collector only)
#    "scheduler": {"feedback": true, "tests": 412, "rate": 0.14, "op": [["Conv2d", 0.031], ...],
#                  "nodes": [[10, 0.41], ...], ...}}        (with feedback only)


class RunDirError(Exception):
    """The output folder cannot take a new run."""


class RunDir:
    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, config: dict[str, Any]) -> None:
        """Start a new run here; refuses a folder that already holds one (never overwrite findings)."""
        if (self.root / "config.json").exists():
            raise RunDirError(f"{self.root} already holds a run; choose another output folder")
        if self.root.exists() and not self.root.is_dir():
            raise RunDirError(f"{self.root} is not a folder")
        try:
            (self.root / "findings").mkdir(parents=True, exist_ok=True)
            self.write_json("config.json", {"schema": RUN_SCHEMA} | config)
        except OSError as e:
            raise RunDirError(f"cannot write to {self.root}: {e.strerror}") from None

    def write_json(self, name: str, obj: Any) -> None:
        write_atomic(self.root / name, json.dumps(obj, indent=1) + "\n")

    def write_lines(self, name: str, lines: list[str]) -> None:
        """Replace a line file whole (temp file + rename: a reader sees the old or the new one)."""
        write_atomic(self.root / name, "".join(line + "\n" for line in lines))

    def bundle_path(self, finding: Finding) -> Path:
        name = f"{finding.symptom}-{_safe(finding.backend)}-{finding.stage}-{short_id(finding.signature)}"
        return self.root / "findings" / name

    def log_finding(self, record: dict[str, Any]) -> None:
        with open(self.root / "findings.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def worker_log(self, k: int) -> Path:
        return self.root / "workers" / f"w{k}.log"

    def generator_log(self, k: int) -> Path:
        """The log of worker k's generator (`campaign.ahead`)."""
        return self.root / "workers" / f"g{k}.log"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
