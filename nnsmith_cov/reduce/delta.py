"""The search: shrink a cut while the finding holds, large chunks first, to a 1-minimal fixpoint.

First, when the backend named the op it failed on, that op alone (each instruction of its
type, last first, its inputs fresh): one run that often ends the search at one op. Then the
passes, repeated until a round changes nothing (or the budget is spent):
  outputs   return fewer values (what only they needed goes with them);
  nodes     drop instructions, in chunks of half, a quarter, ... down to one (ddmin);
  cones     replace the private subgraph feeding one instruction by fresh inputs;
  values    (crashes and hangs only) a leaf of zeros, else of ones, where the symptom holds.
Each pass tries its edits in a fixed order and keeps the first that holds, so two runs on one
bundle make the same choices: the reduction is deterministic when the backend is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.reduce.candidates import FILLS, Cut, cone, drop_outputs, fill, leaves, normalized, remove

Holds = Callable[[Cut], bool]  # runs the cut's candidate: does the finding hold?


@dataclass
class Progress:
    cut: Cut
    steps: int = 0  # edits kept
    tried: int = 0  # edits tried (cached candidates included)
    out_of_time: bool = False
    passes: list[str] = field(default_factory=list)  # the pass of each kept edit


class Search:
    """One reduction of `graph` from `start`; `holds` runs a candidate, `deadline` is on
    time.monotonic(), `values` turns on the leaf-value pass (findings whose expected outputs
    do not matter: filling a leaf would need a new reference run otherwise)."""

    def __init__(
        self, graph: GraphIR, start: Cut, holds: Holds, deadline: float, values: bool, first: Sequence[Cut] = ()
    ) -> None:
        self.graph = graph
        self.holds = holds
        self.deadline = deadline
        self.values = values
        self.first = list(first)  # cuts tried once before the passes (the op at fault alone)
        self.p = Progress(start)

    def run(self) -> Progress:
        for cut in self.first:
            if self.p.out_of_time or self.attempt(cut, "fault"):
                break
        while not self.p.out_of_time:
            before = self.p.steps
            self.outputs()
            self.nodes()
            self.cones()
            if self.p.steps == before:
                break
        if self.values and not self.p.out_of_time:
            self.leaf_values()
        return self.p

    def attempt(self, cut: Cut | None, name: str) -> bool:
        """Try `cut`; keep it when the finding holds."""
        if cut is None or cut == self.p.cut:
            return False
        if time.monotonic() >= self.deadline:
            self.p.out_of_time = True
            return False
        self.p.tried += 1
        if not self.holds(cut):
            return False
        self.p.cut = cut
        self.p.steps += 1
        self.p.passes.append(name)
        return True

    def outputs(self) -> None:
        chunks(
            lambda: list(self.p.cut.outputs),
            lambda drop: self.attempt(
                drop_outputs(self.graph, self.p.cut, set(drop)) if len(drop) < len(self.p.cut.outputs) else None,
                "outputs",
            ),
            self,
        )

    def nodes(self) -> None:
        chunks(
            lambda: sorted(self.p.cut.keep),
            lambda drop: self.attempt(remove(self.graph, self.p.cut, set(drop)), "nodes"),
            self,
        )

    def cones(self) -> None:
        # Later instructions first: their cones are the largest.
        for k in sorted(self.p.cut.keep, reverse=True):
            if self.p.out_of_time:
                return
            if k in self.p.cut.keep:
                private = cone(self.graph, self.p.cut, k)
                if private:
                    self.attempt(remove(self.graph, self.p.cut, private), "cones")

    def leaf_values(self) -> None:
        for v in leaves(self.graph, self.p.cut):
            for how in FILLS:
                if self.p.out_of_time or self.attempt(fill(self.p.cut, v, how), "values"):
                    break


def alone(graph: GraphIR, cut: Cut, onnx_op: str) -> list[Cut]:
    """Cuts keeping one instruction whose op exports as ONNX `onnx_op`, last first. A spec is
    taken to export as the ONNX op its name starts with ("Concat3" as Concat, "PadConstant" as
    Pad); a spec that exports under another name simply has no such cut."""
    want = onnx_op.lower()
    found = []
    for k in sorted(cut.keep, reverse=True):
        inst = graph.insts[k]
        if inst.op.lower().startswith(want):
            found.append(normalized(graph, Cut(frozenset({k}), tuple(sorted(inst.outputs)), cut.fills)))
    return [c for c in found if c is not None]


def chunks(items: Callable[[], Sequence[int]], drop: Callable[[list[int]], bool], search: Search) -> None:
    """ddmin's removal loop: try dropping chunks of the current items, from the last chunk to
    the first, halving the chunk size when none can go, until single items cannot either."""
    current = list(items())
    size = max(len(current) // 2, 1)
    while current and not search.p.out_of_time:
        dropped = False
        end = len(current)
        while end > 0 and not search.p.out_of_time:
            start = max(end - size, 0)
            if drop(current[start:end]):
                dropped = True
                current = list(items())  # the edit may also have dropped what became dead
                end = min(start, len(current))
            else:
                end = start
        if size == 1 and not dropped:
            break
        if not dropped:
            size = max(size // 2, 1)
        size = min(size, max(len(current) // 2, 1))
