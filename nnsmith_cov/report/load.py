"""Campaigns from their corpora (read-only) and coverage sets from files, as labelled `Campaign`s.

A spec on the command line is `PATH`, `PATH=LABEL`, `lcov:PATH[=LABEL]` or
`json:PATH[=LABEL]`; PATH of a corpus is a run folder (holding `lmdb/`) or the LMDB
folder itself. The label defaults to the folder (or file) name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nnsmith_cov.bounded_read import read_json as read_json_file
from nnsmith_cov.corpus.records import CorpusError, TimelineRow
from nnsmith_cov.corpus.store import CorpusStore
from nnsmith_cov.coverage.collector import pass_filters
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.report.model import Campaign, Curve, ReportError
from nnsmith_cov.report.opstats import OpTally


def parse_spec(spec: str) -> tuple[str, Path, str]:
    """(kind, path, label) of one command-line campaign spec."""
    kind = "corpus"
    for prefix in ("lcov", "json"):
        if spec.startswith(prefix + ":"):
            kind, spec = prefix, spec[len(prefix) + 1 :]
    path_text, eq, label = spec.rpartition("=")
    if not eq:
        path_text, label = spec, ""
    if not path_text:
        raise ReportError(f"{spec!r}: no path")
    path = Path(path_text)
    if not label:
        name = path.resolve().name
        label = path.resolve().parent.name if name == "lmdb" else (path.stem if kind != "corpus" else name)
    return kind, path, label


def load_any(spec: str, pass_filters: Sequence[str] | None = None, part: str | None = None) -> Campaign:
    """The campaign a spec names (of a composite collector's corpus: its `part`); imports are
    read by `report.lcov` / `report.export`."""
    kind, path, label = parse_spec(spec)
    if kind == "lcov":
        from nnsmith_cov.report.lcov import read_lcov

        return read_lcov(path, label, pass_filters)
    if kind == "json":
        from nnsmith_cov.report.export import read_json

        return read_json(path, label, pass_filters)
    return load_corpus(path, label, pass_filters, part)


def spec_parts(spec: str) -> list[str]:
    """The collectors of a composite campaign's corpus, in map order; [] for anything else."""
    kind, path, _ = parse_spec(spec)
    if kind != "corpus":
        return []
    try:
        with CorpusStore.open(corpus_folder(path), readonly=True) as store:
            collector = store.meta.collector
    except CorpusError as e:
        raise ReportError(str(e)) from None
    return collector.split("+") if "+" in collector else []


def corpus_folder(path: Path) -> Path:
    """The LMDB folder of a run folder or of the corpus itself."""
    if (path / "lmdb" / "data.mdb").exists():
        return path / "lmdb"
    return path


def load_corpus(path: Path, label: str, pass_filters: Sequence[str] | None = None, part: str | None = None) -> Campaign:
    """Read a campaign corpus readonly (a running campaign may keep writing it); of a composite
    collector's campaign, the `part` one collector measured, as if that collector had run alone."""
    try:
        with CorpusStore.open(corpus_folder(path), readonly=True) as store:
            return _read(store, path, label, pass_filters, part)
    except CorpusError as e:
        raise ReportError(str(e)) from None


def _read(store: CorpusStore, path: Path, label: str, pass_filters: Sequence[str] | None, part: str | None) -> Campaign:
    meta = store.meta
    if meta.collector == "none":
        raise ReportError(f"{path}: the campaign measured no coverage (no collector): nothing to report")
    with store.snapshot() as view:
        data = view.get("meta", b"universe")
        counters = view.counters()
        virgin = view.virgin()
        headers = [h for _, h in view.findings()]
    # nnsmith-cov's own errors are counted apart from the compilers' findings
    internal = sum(h.get("symptom") == "internal" for h in headers)
    signatures = {h.get("signature") for h in headers if h.get("symptom") != "internal"}
    if data is None or virgin is None:
        raise ReportError(f"{path}: damaged corpus (no universe or coverage map stored)")
    try:
        universe = Universe.from_bytes(bytes(data))
    except ValueError as e:
        raise ReportError(f"{path}: damaged universe ({e})") from None
    if len(universe) != meta.universe_size:
        raise ReportError(
            f"{path}: damaged corpus (universe of {len(universe)} branches, meta says {meta.universe_size})"
        )
    offset, universe = _part(universe, part, path)
    config = meta.config
    filters = _filters(pass_filters, config.get("pass_filters"), universe.collector)
    mask = universe.file_mask(filters)
    within = lambda index: index[(index >= offset) & (index < offset + len(universe))] - offset

    tally = OpTally()
    points: list[tuple[float, int, np.ndarray]] = []  # (elapsed, test id, branch indices) per corpus entry
    for test_id, record in store.entries(include_finding_only=True):
        hits = store.hits(test_id)
        tally.add(record, hits is not None)
        if hits is not None:
            points.append((record.elapsed_s, test_id, within(hits.index.astype(np.int64))))
    covered = within(virgin.covered())
    keys = frozenset(universe.key(int(i)) for i in covered)
    pass_keys = frozenset(universe.key(int(i)) for i in covered if mask[i])
    end_tests = max(counters.next_test_id, counters.tests_run)
    gen = config.get("generator")
    return Campaign(
        label=label,
        source=str(path),
        origin="corpus",
        collector=universe.collector,
        unit=universe.kind,
        covered=keys,
        pass_covered=pass_keys,
        pass_filters=tuple(filters),
        universe_size=len(universe),
        pass_universe=int(np.count_nonzero(mask)),
        universe_ident=universe.ident,
        build=dict(universe.build),
        versions=dict(meta.versions),
        time_budget_s=_num(config.get("time_s")),
        test_budget=config.get("max_tests") if isinstance(config.get("max_tests"), int) else None,
        elapsed_s=counters.elapsed_s,
        tests=counters.tests_run,
        corpus=counters.corpus,
        findings=counters.findings - internal,
        unique_signatures=len(signatures),
        internal_errors=internal,
        feedback=config.get("feedback") if isinstance(config.get("feedback"), bool) else None,
        generator=_generator_name(gen, config),
        by_time=_curve(points, len(universe), mask, key=0, end=(counters.elapsed_s, len(keys), len(pass_keys))),
        by_tests=_curve(points, len(universe), mask, key=1, end=(float(end_tests), len(keys), len(pass_keys))),
        ops=tally.rows(_op_tests(path)),
        universe=universe,
    )


def _part(universe: Universe, part: str | None, path: Path) -> tuple[int, Universe]:
    """(offset, universe) of the part asked for; the whole universe when it has no parts."""
    if not universe.parts:
        if part is not None and part != universe.collector:
            raise ReportError(f"{path}: measured by {universe.collector}, not {part}")
        return 0, universe
    names = [p.collector for p in universe.parts]
    if part not in names:
        raise ReportError(f"{path}: a {universe.collector} campaign; say which part to read ({', '.join(names)})")
    return universe.split()[names.index(part)]


def _op_tests(path: Path) -> dict[str, int] | None:
    """Per-op counts over all generated tests, from the run folder's stats.json (None without)."""
    root = path.parent if path.name == "lmdb" else path
    try:
        counts = read_json_file(root / "stats.json")["op_tests"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(counts, dict):
        return None
    return {k: v for k, v in counts.items() if isinstance(k, str) and isinstance(v, int) and v >= 0}


def _filters(given: Sequence[str] | None, stored: object, collector: str) -> list[str]:
    """Pass-only filters: the command line's, else the campaign's own, else the collector's defaults."""
    if given:
        return list(given)
    if isinstance(stored, list) and all(isinstance(s, str) for s in stored):
        return list(stored)
    return pass_filters(collector)


def _curve(
    points: list[tuple[float, int, np.ndarray]], size: int, mask: np.ndarray, key: int, end: tuple[float, int, int]
) -> Curve:
    """Cumulative coverage over the entries ordered by time (key 0) or test number (key 1).

    Rebuilt from the stored bitmaps rather than the stored timeline, so any pass-only
    filter gets an exact curve; only corpus entries can raise it, so they are the steps.
    """
    seen = np.zeros(size, dtype=bool)
    xs, total, passes = [0.0], [0], [0]
    n = n_pass = 0
    for p in sorted(points, key=lambda p: (p[key], p[1])):
        idx = p[2][p[2] < size]
        new = idx[~seen[idx]]
        seen[new] = True
        n += len(new)
        n_pass += int(np.count_nonzero(mask[new]))
        # the test count after test id k is k + 1 (ids count tests started from 0)
        xs.append(float(p[0]) if key == 0 else float(p[1] + 1))
        total.append(n)
        passes.append(n_pass)
    if end[0] >= xs[-1]:
        xs.append(end[0])
        total.append(max(n, end[1]))
        passes.append(max(n_pass, end[2]))
    return Curve(tuple(xs), tuple(total), tuple(passes))


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _generator_name(gen: object, config: dict) -> str | None:
    for v in (config.get("generator_name"), gen.get("name") if isinstance(gen, dict) else gen):
        if isinstance(v, str):
            return v
    return "nnsmith" if isinstance(gen, dict) else None


def resource_timeline(campaign: Campaign) -> list[TimelineRow]:
    """The disk and memory points of a corpus campaign's timeline; [] for imports, corpora
    from before they were recorded, or a corpus that cannot be read (the figure is optional)."""
    if campaign.origin != "corpus":
        return []
    try:
        with CorpusStore.open(corpus_folder(Path(campaign.source)), readonly=True) as store:
            rows = store.timeline()
    except CorpusError:
        return []
    return [r for r in rows if r.disk_kb or r.rss_kb]
