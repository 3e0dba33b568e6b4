"""Figures in the paper's style: coverage over time / tests, Venn (2-3 sets), UpSet bars (4+).

Every figure is written as PNG and SVG. Each plotted series carries an SVG id
(`series-<n>`, `region-<...>`) so that tools and tests can find them in the SVG.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nnsmith_cov.report.compare import Region, venn_regions  # noqa: E402
from nnsmith_cov.report.model import Campaign, Curve  # noqa: E402

# The paper's look: dotted lines, big outlined markers at a few points, warm-to-cool colours.
STYLES = [
    ("#f4845f", "p"),
    ("#e58ee8", "^"),
    ("#2b8ef0", "D"),
    ("#6cc070", "s"),
    ("#9a7fd1", "o"),
    ("#e0b030", "v"),
    ("#50b8c8", "h"),
    ("#a0a0a0", "X"),
]
HATCHES = ["*", ".", "\\\\", "//", "o", "x"]
FORMATS = ("png", "svg")


def save(fig: Figure, base: Path) -> list[Path]:
    paths = []
    for fmt in FORMATS:
        path = base.with_suffix(f".{fmt}")
        fig.savefig(path, dpi=150, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


# What one element of a campaign's set is, on an axis; arcs and edges are branches.
UNIT_WORDS = {"block": "blocks", "line": "lines", "lcov-line": "lines"}


def unit_word(units: Iterable[str]) -> str:
    """The y axis' unit for campaigns counting `units` ("branches" when they differ)."""
    words = {UNIT_WORDS.get(u, "branches") for u in units}
    return words.pop() if len(words) == 1 else "branches"


def coverage_figure(
    campaigns: Sequence[Campaign], axis: str, pass_only: bool, base: Path, title: str | None = None
) -> list[Path]:
    """Coverage of every campaign with a curve on one axis; `axis` is "time" or "tests".

    The box in the corner reads best / max = share: the highest final count and the
    universe (or pass-only universe) size when all campaigns share one; else best alone.
    """
    curves = [(c, c.by_time if axis == "time" else c.by_tests) for c in campaigns]
    curves = [(c, cv) for c, cv in curves if cv is not None]
    if not curves:
        return []
    fig, ax = plt.subplots(figsize=(6, 3.6))
    finals = [_values(cv, pass_only)[-1] for _, cv in curves]
    thousands = max(finals) >= 10_000
    for n, (c, cv) in enumerate(curves):
        colour, marker = STYLES[n % len(STYLES)]
        xs, ys, marks = _with_marks(cv.x, _values(cv, pass_only), 8)
        (line,) = ax.plot(
            xs,
            [v / 1000 if thousands else v for v in ys],
            linestyle=":",
            linewidth=2.2,
            color=colour,
            marker=marker,
            markersize=9,
            markeredgecolor="black",
            markevery=marks,
            drawstyle="steps-post",
            label=c.label,
        )
        line.set_gid(f"series-{n}")
    sizes = {(c.pass_universe if pass_only else c.universe_size) for c, _ in curves}
    best = max(finals)
    size = sizes.pop() if len(sizes) == 1 else None
    text = (
        f"{best}$_{{\\mathbf{{best}}}}$ / {size}$_{{\\mathbf{{max}}}}$ = {100 * best / size:.1f}%"
        if size
        else (f"best = {best}")
    )
    ax.text(
        0.03,
        0.95,
        text,
        transform=ax.transAxes,
        va="top",
        fontsize=13,
        fontweight="bold",
        bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "black"},
    )
    what = "pass-only coverage" if pass_only else "coverage"
    ax.set_ylabel(f"# {what} ({'1000 ' if thousands else ''}{unit_word(c.unit for c, _ in curves)})")
    ax.set_xlabel("Time (second)" if axis == "time" else "# Tests")
    ax.grid(linestyle=":", alpha=0.6)
    ax.legend(loc="lower right")
    scale = 1000 if thousands else 1
    ax.set_ylim(*(v / scale for v in _y_range(curves, pass_only)))
    if title:
        ax.set_title(title)
    return save(fig, base)


def _values(cv: Curve, pass_only: bool) -> tuple[int, ...]:
    return cv.pass_branches if pass_only else cv.branches


def _with_marks(xs: Sequence[float], ys: Sequence[int], k: int) -> tuple[list[float], list[int], list[int]]:
    """The step curve with k evenly spaced points added on it, and their indices for markers
    (steps bunch up early in a campaign; markers should not)."""
    if len(xs) < 2 or xs[-1] <= xs[0]:
        return list(xs), list(ys), list(range(len(xs)))
    targets = [xs[0] + (xs[-1] - xs[0]) * (step - 0.5) / k for step in range(1, k + 1)]
    out_x: list[float] = []
    out_y: list[int] = []
    marks: list[int] = []
    t = 0
    for x, y in zip(xs, ys):
        while t < len(targets) and targets[t] < x:
            out_x.append(targets[t])
            out_y.append(out_y[-1] if out_y else y)  # a step curve holds its last value
            marks.append(len(out_x) - 1)
            t += 1
        out_x.append(x)
        out_y.append(y)
    return out_x, out_y, marks


def _y_range(curves: list, pass_only: bool) -> tuple[float, float]:
    """Zoom on where the campaigns differ (as the paper does): from a little under the lowest
    curve a tenth of the way in, to room above the best for the annotation box."""
    lows, best = [], 0
    for _, cv in curves:
        ys = _values(cv, pass_only)
        cut = cv.x[0] + 0.1 * (cv.x[-1] - cv.x[0])
        lows.append(next((y for x, y in zip(cv.x, ys) if x >= cut), ys[-1]))
        best = max(best, ys[-1])
    low = min(lows)
    span = max(best - low, 0.02 * best, 1)
    return max(0.0, low - 0.15 * span), best + 0.45 * span


def venn_figure(sets: dict[str, frozenset[str]], base: Path, title: str | None = None) -> list[Path]:
    """A Venn diagram of 2 or 3 sets with exact region counts (unique ones in bold)."""
    from matplotlib_venn import venn2, venn3
    from matplotlib_venn.layout import venn2 as layout2
    from matplotlib_venn.layout import venn3 as layout3

    labels = list(sets)
    if len(labels) not in (2, 3) or not any(sets.values()):
        return []
    regions = venn_regions(sets)
    ids = ["10", "01", "11"] if len(labels) == 2 else ["100", "010", "110", "001", "101", "011", "111"]
    counts = [regions.get(_region_of(i, labels), 0) for i in ids]
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    names = [f"{x}\n({len(sets[x])})" for x in labels]
    # equal circles, as in the paper: sizes are in the numbers, which are exact
    if len(labels) == 2:
        v = venn2(
            tuple(counts), names, ax=ax, layout_algorithm=layout2.DefaultLayoutAlgorithm(fixed_subset_sizes=(1,) * 3)
        )
    else:
        v = venn3(
            tuple(counts), names, ax=ax, layout_algorithm=layout3.DefaultLayoutAlgorithm(fixed_subset_sizes=(1,) * 7)
        )
    for n, i in enumerate(ids):
        patch = v.get_patch_by_id(i)
        if patch is not None:
            patch.set_gid(f"region-{i}")
            if i.count("1") == 1:
                patch.set_hatch(HATCHES[i.index("1") % len(HATCHES)])
                patch.set_facecolor(STYLES[i.index("1") % len(STYLES)][0])
                patch.set_alpha(0.35)
            patch.set_edgecolor("#555555")
        text = v.get_label_by_id(i)
        if text is not None:
            text.set_text(str(counts[n]))
            if i.count("1") in (1, len(labels)):
                text.set_fontweight("bold")
                text.set_fontsize(15)
    if title:
        ax.set_title(title)
    return save(fig, base)


def _region_of(bits: str, labels: list[str]) -> Region:
    return tuple(label for label, b in zip(labels, bits) if b == "1")


def upset_figure(sets: dict[str, frozenset[str]], base: Path, top: int = 24, title: str | None = None) -> list[Path]:
    """UpSet-style chart for any number of sets: the largest exact regions as bars, with a
    dot matrix under them saying which sets each region lies in."""
    labels = list(sets)
    regions = sorted(venn_regions(sets).items(), key=lambda kv: (-kv[1], len(kv[0])))[:top]
    if not regions:
        return []
    fig, (bars, dots) = plt.subplots(
        2,
        1,
        figsize=(max(6, 0.45 * len(regions) + 2), 3.2 + 0.35 * len(labels)),
        sharex=True,
        gridspec_kw={"height_ratios": [3, max(1, 0.35 * len(labels))]},
    )
    xs = range(len(regions))
    for x, (region, count) in zip(xs, regions):
        bar = bars.bar(x, count, color="#2b8ef0" if len(region) == 1 else "#888888")
        bar.patches[0].set_gid(f"region-{'-'.join(str(labels.index(r)) for r in region)}")
        bars.text(x, count, str(count), ha="center", va="bottom", fontsize=8)
        members = [labels.index(r) for r in region]
        dots.scatter([x] * len(labels), range(len(labels)), color="#dddddd", s=40)
        dots.scatter([x] * len(members), members, color="black", s=40)
        if len(members) > 1:
            dots.plot([x, x], [min(members), max(members)], color="black", linewidth=1.5)
    bars.set_ylabel("# branches in region")
    bars.grid(axis="y", linestyle=":", alpha=0.6)
    dots.set_yticks(range(len(labels)), [f"{x} ({len(sets[x])})" for x in labels])
    dots.set_xticks([])
    dots.invert_yaxis()
    if title:
        bars.set_title(title)
    return save(fig, base)


def resources_figure(campaigns: Sequence[Campaign], base: Path, title: str | None = None) -> list[Path]:
    """Disk used by the run folder and resident memory (the campaign process solid, its workers
    together dashed) over campaign time, beside the coverage-over-time figure; nothing when
    no campaign recorded them (imports, older corpora)."""
    from nnsmith_cov.report.load import resource_timeline

    series = [(c.label, rows) for c in campaigns if (rows := resource_timeline(c))]
    if not series:
        return []
    fig, (disk, mem) = plt.subplots(1, 2, figsize=(9, 3.4))
    longest = max(r.elapsed_s for _, rows in series for r in rows)
    unit, per = ("hours", 3600.0) if longest >= 7200 else ("minutes", 60.0)
    for n, (label, rows) in enumerate(series):
        color, _ = STYLES[n % len(STYLES)]
        xs = [r.elapsed_s / per for r in rows]
        disk.plot(xs, [r.disk_kb / 1024 for r in rows], color=color, label=label, gid=f"series-{n}-disk")
        mem.plot(xs, [r.rss_kb / 1024 for r in rows], color=color, label=f"{label} (campaign)", gid=f"series-{n}-rss")
        mem.plot(
            xs,
            [r.worker_rss_kb / 1024 for r in rows],
            color=color,
            linestyle="--",
            label=f"{label} (workers)",
            gid=f"series-{n}-workers",
        )
    disk.set(xlabel=f"time ({unit})", ylabel="run folder on disk (MiB)", ylim=(0, None))
    mem.set(xlabel=f"time ({unit})", ylabel="resident memory (MiB)", ylim=(0, None))
    for ax in (disk, mem):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, base)
