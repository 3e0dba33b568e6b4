"""An editable graph of concrete instructions, for generators that build and rewrite graphs.

GraphIR wants dense value ids defined before use; the baselines insert, remove,
copy and swap instructions anywhere. `Net` keeps values under stable ids and
turns into a GraphIR at the end: unused code dropped, instructions sorted by
dependencies (ties in list order), values renumbered in definition order.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR, GraphIRError, Inst


@dataclass
class Node:
    op: str
    attrs: dict
    inputs: list[int]
    outputs: list[int]


@dataclass
class Net:
    types: dict[int, TensorType] = field(default_factory=dict)
    inputs: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] | None = None  # None: every value nothing consumes
    _next: int = 0

    def value(self, t: TensorType) -> int:
        v = self._next
        self._next += 1
        self.types[v] = t
        return v

    def add_input(self, t: TensorType, weight: bool = False) -> int:
        v = self.value(t)
        (self.weights if weight else self.inputs).append(v)
        return v

    def add(self, op: str, attrs: dict, inputs: list[int], out_types: list[TensorType], at: int | None = None) -> Node:
        node = Node(op, attrs, list(inputs), [self.value(t) for t in out_types])
        self.nodes.insert(len(self.nodes) if at is None else at, node)
        return node

    def producer(self, v: int) -> Node | None:
        return next((n for n in self.nodes if v in n.outputs), None)

    def consumers(self, v: int) -> list[Node]:
        return [n for n in self.nodes if v in n.inputs]

    def redirect(self, old: int, new: int, skip: Node | None = None) -> None:
        """Every use of `old` (graph outputs included) reads `new` instead, except in `skip`."""
        for n in self.nodes:
            if n is not skip:
                n.inputs = [new if v == old else v for v in n.inputs]
        if self.outputs is not None:
            self.outputs = [new if v == old else v for v in self.outputs]

    def from_weights(self, v: int) -> bool:
        """The value is computed from weights alone (a weight, or a weight mutation's result)."""
        if v in self.weights:
            return True
        p = self.producer(v)
        return p is not None and all(self.from_weights(u) for u in p.inputs)

    def clone(self) -> Net:
        return copy.deepcopy(self)

    def to_graph(self) -> GraphIR:
        outputs = self.outputs
        if outputs is None:
            used = {v for n in self.nodes for v in n.inputs}
            outputs = [v for n in self.nodes for v in n.outputs if v not in used]
        # keep what the outputs need
        producer = {v: n for n in self.nodes for v in n.outputs}
        need, stack = set(outputs), list(outputs)
        while stack:  # edits leave producers anywhere in the list: walk the edges, not the list
            n = producer.get(stack.pop())
            for v in n.inputs if n is not None else ():
                if v not in need:
                    need.add(v)
                    stack.append(v)
        live = [n for n in self.nodes if need.intersection(n.outputs)]
        defined = {v for v in self.inputs + self.weights if v in need}
        order: list[Node] = []
        pending = live
        while pending:
            ready = next((n for n in pending if all(v in defined for v in n.inputs)), None)
            if ready is None:
                raise GraphIRError("the edited graph has a cycle or an undefined value")
            order.append(ready)
            defined.update(ready.outputs)
            pending = [n for n in pending if n is not ready]
        ids: dict[int, int] = {}

        def number(v: int) -> int:
            return ids.setdefault(v, len(ids))

        inputs = [number(v) for v in self.inputs if v in need]
        weights = [number(v) for v in self.weights if v in need]
        insts = [
            Inst(n.op, dict(n.attrs), tuple(ids[v] for v in n.inputs), tuple(number(v) for v in n.outputs))
            for n in order
        ]
        types = [self.types[v] for v, _ in sorted(ids.items(), key=lambda kv: kv[1])]
        graph = GraphIR(types, inputs, weights, insts, [ids[v] for v in outputs])
        graph.check()
        return graph
