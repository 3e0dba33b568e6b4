"""In what order the value search runs a graph's ops: vulnerable ops as soon as they can run.

Algorithm 3 stops at the first op with NaN/Inf in any topological order. Running
each vulnerable op as soon as its cone is computed (narrow domains first,
`NARROW_FIRST`), and the ops that feed none last, makes a step on one op pay for
its cone only, not for a heavy ConvTranspose beside it.
"""

from __future__ import annotations

from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import ALL_OPS

# Vulnerable ops by how narrow their domains are (the specs' `narrow_rank`, read by
# `SearchState`): the others come after.
NARROW_FIRST = {op.name(): op.narrow_rank for op in ALL_OPS if op.narrow_rank is not None}


def demand_order(graph: GraphIR, first: list[int]) -> list[int]:
    """A topological order of `graph`'s instructions that runs each of `first` (in
    their order) as soon as what it reads is computed, and the rest after.

    Algorithm 3 stops at the first op with NaN/Inf in any topological order. This one
    makes a search step on a vulnerable op run its cone only: a heavy ConvTranspose
    that feeds no vulnerable op (only an output) waits until they all hold."""
    producer = {v: k for k, inst in enumerate(graph.insts) for v in inst.outputs}
    order: list[int] = []
    placed: set[int] = set()
    for root in [*first, *range(len(graph.insts))]:
        stack = [root]
        while stack:  # iterative post-order: graphs can be deeper than Python's recursion
            k = stack[-1]
            if k in placed:
                stack.pop()
                continue
            todo = [producer[v] for v in graph.insts[k].inputs if v in producer and producer[v] not in placed]
            if todo:
                stack.extend(reversed(todo))
            else:
                placed.add(k)
                order.append(k)
                stack.pop()
    return order
