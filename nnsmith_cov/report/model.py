"""The in-memory form of a campaign as reports see it: its covered branches by stable identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ReportError(Exception):
    """A report cannot be made as asked (missing or damaged input, mixed collectors): one line."""


@dataclass(frozen=True)
class Curve:
    """Coverage growth: after the test at `tests[i]` (or at `elapsed_s[i]`) `branches[i]` were covered."""

    x: tuple[float, ...]
    branches: tuple[int, ...]
    pass_branches: tuple[int, ...]


@dataclass
class Campaign:
    """One labelled coverage set: a campaign corpus, or a set imported from elsewhere.

    `covered` holds stable branch identities (`Branch.key()` for corpora, the same
    spelling for our own lcov/JSON exports, `file:line#block.branch` or `file:line` for
    foreign lcov), so sets from different universes and imports line up.
    """

    label: str
    source: str  # the path it was read from
    origin: str  # "corpus", "lcov" or "json"
    collector: str  # "python", "llvm", ... ; "lcov" for a foreign tracefile
    unit: str  # what one element is: "arc", "edge", "lcov-branch", "lcov-line"
    covered: frozenset[str]
    pass_covered: frozenset[str]
    pass_filters: tuple[str, ...]
    universe_size: int | None = None  # None: unknown (foreign imports)
    pass_universe: int | None = None
    universe_ident: str = ""
    build: dict[str, str] = field(default_factory=dict)  # package / library versions that were measured
    versions: dict[str, str] = field(default_factory=dict)  # the campaign's environment
    time_budget_s: float | None = None
    test_budget: int | None = None
    elapsed_s: float | None = None
    tests: int | None = None
    corpus: int | None = None
    findings: int | None = None
    unique_signatures: int | None = None
    internal_errors: int | None = None  # tests ended by nnsmith-cov's own errors (not findings)
    feedback: bool | None = None
    generator: str | None = None
    by_time: Curve | None = None
    by_tests: Curve | None = None
    ops: list[dict[str, Any]] = field(default_factory=list)  # per-operator statistics (corpora only)
    universe: Any = field(default=None, repr=False)  # the corpus's Universe, for exports (None for imports)

    @property
    def fingerprint(self) -> str:
        """The build that produced the numbers: the universe's content hash, else the measured versions."""
        if self.universe_ident:
            return self.universe_ident
        return ",".join(f"{k}={v}" for k, v in sorted(self.build.items())) or "unknown"


def key_file(key: str) -> str:
    """The source file of a branch identity (everything before its last `:`)."""
    return key.rpartition(":")[0]


def key_line(key: str) -> str:
    """A branch identity cut down to its source line: `file:line`."""
    head, _, tail = key.rpartition(":")
    digits = ""
    for ch in tail:
        if not ch.isdigit():
            break
        digits += ch
    return f"{head}:{digits}"
