"""The generator's choices a kept test records, as "kind=value" labels.

Feedback steers these choices; the analyses of what it could steer toward (`scripts/op_headroom.py`)
and of how fast it reached what lies behind one (`scripts/choice_frontier.py`) group tests by them.
A record written by a baseline or by an older schema may lack a kind: it then has no label of it.
"""

from __future__ import annotations

from typing import Any

from nnsmith_cov.corpus.records import TestRecord

CHOICE_KINDS = ("op", "opset", "dtype", "size", "dynamic", "roundtrip")
# The graph's operator count, in the buckets the scheduler's sizes fall in (5, 10, 15, 20 and
# grown children beyond).
SIZE_BUCKETS = ((7, "<=7"), (12, "8-12"), (17, "13-17"))
SIZE_LABELS = (*(label for _, label in SIZE_BUCKETS), f">={SIZE_BUCKETS[-1][0] + 1}")  # smallest first
_EXPORT_KINDS = ("opset", "dynamic", "roundtrip")


def size_label(ops: int) -> str:
    """The size bucket of a graph of `ops` operators."""
    return next((label for top, label in SIZE_BUCKETS if ops <= top), SIZE_LABELS[-1])


def choice_labels(gen: Any, graph: Any) -> dict[str, frozenset[str]]:
    """A kept test's choices by kind, from its record's `gen` and `graph` dicts."""
    gen = gen if isinstance(gen, dict) else {}
    ops = [op for op in gen.get("ops") or [] if isinstance(op, str)]
    labels: dict[str, frozenset[str]] = {
        "op": frozenset(f"op={op}" for op in ops),
        "size": frozenset({f"size={size_label(len(ops))}"} if ops else ()),
        "dtype": frozenset(),
    }
    for kind in _EXPORT_KINDS:
        labels[kind] = frozenset({f"{kind}={gen[kind]}"} if gen.get(kind) is not None else ())
    if isinstance(graph, dict):
        values = graph.get("values") or []
        labels["dtype"] = frozenset(f"dtype={v['dtype']}" for v in values if isinstance(v, dict) and "dtype" in v)
    return {kind: labels[kind] for kind in CHOICE_KINDS}


def record_labels(record: TestRecord) -> frozenset[str]:
    """Every choice label of a kept test, all kinds together."""
    return frozenset().union(*choice_labels(record.gen, record.graph).values())


def parse_choice(text: str) -> str:
    """A choice label given on a command line ("opset=20", "dtype=i8", "op=GridSample"), checked."""
    kind, sep, value = text.partition("=")
    if not sep or not value or kind not in CHOICE_KINDS:
        raise ValueError(f"a choice is KIND=VALUE with KIND one of {', '.join(CHOICE_KINDS)}: {text!r}")
    return text
