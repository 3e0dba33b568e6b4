"""The folder of one fuzzing run: its configuration, findings, statistics and worker logs.

RUN/config.json       RUN_SCHEMA, the run's settings and package versions, e.g.
                      {"schema": 1, "seed": 1, "backends": ["ort", "tvm"], "nodes": 10, ...,
                       "versions": {"torch": "2.13.0+cpu", "tvm": "0.27.0.post1"}}
RUN/stats.json        counters, rewritten (temp file + rename) every few seconds and at the end
RUN/findings.jsonl    one line per finding: {"test": 3, "seed": 77, "signature": "...",
                       "new": true, "bundle": "findings/crash-tvm-compile-3fa2c1d0e9ab", ...}
RUN/findings/<kind>-<backend>-<stage>-<id>/   one bundle per unique signature (oracle/bundle.py)
RUN/workers/w0.log    what the worker printed (cut when it grows past a limit)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nnsmith_cov.oracle.finding import Finding
from nnsmith_cov.oracle.signature import short_id

RUN_SCHEMA = 1


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
        tmp = self.root / f".{name}.tmp"
        tmp.write_text(json.dumps(obj, indent=1) + "\n")
        os.replace(tmp, self.root / name)

    def bundle_path(self, finding: Finding) -> Path:
        name = f"{finding.symptom}-{_safe(finding.backend)}-{finding.stage}-{short_id(finding.signature)}"
        return self.root / "findings" / name

    def log_finding(self, record: dict[str, Any]) -> None:
        with open(self.root / "findings.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def worker_log(self, k: int) -> Path:
        return self.root / "workers" / f"w{k}.log"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
