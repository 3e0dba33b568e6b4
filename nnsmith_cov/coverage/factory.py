"""Build a collector by name: a built-in one, a `module:Class` plug-in, or a composite of them.

Kept apart from `collector` (the interface), which `composite` imports: building composites
here leaves no loop between the two.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from nnsmith_cov.coverage import composite
from nnsmith_cov.coverage.collector import BUILTIN, Collector, CollectorError
from nnsmith_cov.coverage.declared import DeclaredBackend


def make_collector(name: str, targets: Sequence[str] = (), backends: Sequence[DeclaredBackend] = ()) -> Collector:
    """The collector `name` (built in, `module:Class`, or several joined by `+`), measuring
    `targets` (its own default when empty: Python packages for `python`, shared-library globs
    for `llvm`, the modules `backends` declare for `binary`); `NAME=TARGET` addresses one part of
    a composite (see `composite.part_targets`). In a composite, a part that takes backends gets
    those the other parts do not claim, except a part that can be carried to the threaded part's
    thread claims none (the python part: TVM's Python and TVM's C++ are both measured)."""
    names = name.split("+")
    if len(set(names)) != len(names):
        raise CollectorError(f"collector {name!r} names a part twice")
    made: list[Collector | None] = [None] * len(names)
    takes = [getattr(_factory(n), "takes_backends", False) for n in names]
    for late in (False, True):  # parts that take backends last, to see what the others claim
        for i, n in enumerate(names):
            if takes[i] is late:
                own = composite.part_targets(n, targets, i == 0, names)
                # a part that claims a backend but cannot be carried keeps it off the threaded part
                claimed = [
                    b
                    for b in backends
                    if any(getattr(c, "claims", lambda _: False)(b) and not hasattr(c, "carried") for c in made if c)
                ]
                rest = [b for b in backends if b not in claimed]
                made[i] = _make_one(n, own, rest if late else None)
    parts = [c for c in made if c is not None]
    if len(parts) == 1:
        return parts[0]
    if any(hasattr(c, "call") for c in parts):
        return composite.FollowedComposite(parts, backends)
    return composite.CompositeCollector(parts)


def _factory(name: str) -> type:
    if name not in BUILTIN and not (name.count(":") == 1 and all(name.split(":"))):
        raise CollectorError(f"unknown collector {name!r} (built in: {', '.join(BUILTIN)}; or module:Class)")
    module, _, cls = BUILTIN.get(name, name).partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise CollectorError(f"cannot load collector {name}: {e}") from None


def _make_one(name: str, targets: Sequence[str], backends: Sequence[DeclaredBackend] | None = None) -> Collector:
    factory = _factory(name)
    if backends is not None:
        return factory(list(targets), backends=list(backends))
    return factory(list(targets))
