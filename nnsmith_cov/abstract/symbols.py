"""Z3 symbols of the graph being generated, made in a Z3 context of its own.

Z3's models depend on every term its context has seen (term ids order the
search), so graphs sharing one context would depend on what the process
generated before them: the same seed would give another graph after a
different history. Each graph therefore gets a fresh context.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import z3

_local = threading.local()


@contextlib.contextmanager
def fresh_context() -> Iterator[z3.Context]:
    prev = getattr(_local, "ctx", None)
    _local.ctx = z3.Context()
    try:
        yield _local.ctx
    finally:
        _local.ctx = prev


def context() -> z3.Context:
    """The current graph's context (Z3's main context outside generation)."""
    return getattr(_local, "ctx", None) or z3.main_ctx()


def int_sym(name: str) -> z3.ArithRef:
    """A symbolic integer in the current context; specs never call z3.Int directly."""
    return z3.Int(name, context())
