"""How elements compare: values wholly above others (a maximum and what picks from it), and
ops that keep a value's elements all equal."""

from __future__ import annotations

import math
from dataclasses import replace

from nnsmith_cov.gen.feasibility.facts import Range, constant
from nnsmith_cov.gen.feasibility.layout import KEEP_ALL, PICKS, SUBSET
from nnsmith_cov.gen.feasibility.values import POINTWISE
from nnsmith_cov.gen.graph_ir import Inst


def keeps_even(inst: Inst) -> bool:
    """Whether the op, on inputs whose elements are each all equal, makes equal elements."""
    name = inst.op
    return (
        name in KEEP_ALL or name in SUBSET or name in POINTWISE or name in ("ReduceMax", "ReduceMin", "ReduceMean")
    )  # not Concat: its parts may differ


class Order:
    """Which values lie wholly above which: `ge[u]` holds each w with every element of u
    >= every element of w (u the maximum of all of w, w the minimum of all of u, or values
    each of whose elements is one of such a value's)."""

    def __init__(self) -> None:
        self.ge: dict[int, set[int]] = {}

    def holds(self, u: int, w: int, depth: int = 4) -> bool:
        """Every element of u >= every element of w (transitively)."""
        direct = self.ge.get(u, set())
        return w in direct or depth > 0 and any(self.holds(z, w, depth - 1) for z in direct)

    def track(self, inst: Inst, a) -> None:
        if not inst.inputs:
            return
        x, name = inst.inputs[0], inst.op
        if name in ("ReduceMax", "ReduceMin") and math.prod(a["out_types"][0].shape) == 1:
            m = inst.outputs[0]
            if name == "ReduceMax":  # the maximum of every element is above each of them
                self.ge.setdefault(m, set()).add(x)
            else:  # and the minimum below
                self.ge.setdefault(x, set()).add(m)
        if name in PICKS:  # each output element is one of x's: above what x is above
            for v in inst.outputs:
                if x in self.ge:
                    self.ge.setdefault(v, set()).update(self.ge[x])
                # ... and below what is above x
                for ws in self.ge.values():
                    if x in ws:
                        ws.add(v)

    def decide(self, inst: Inst, out: Range) -> Range:
        """`out` of a comparison or difference of two values the order relates."""
        if len(inst.inputs) != 2:
            return out
        p, q = inst.inputs
        ge, le = self.holds(p, q), self.holds(q, p)
        if not (ge or le):
            return out
        name = inst.op
        if name == "Sub":  # p - q keeps the sign of the order (exactly so in floats)
            return replace(out, lo=max(out.lo, 0.0)) if ge else replace(out, hi=min(out.hi, 0.0))
        decided = {"Less": (ge, 0.0), "GreaterEqual": (ge, 1.0), "Greater": (le, 0.0), "LessEqual": (le, 1.0)}
        if name in decided and decided[name][0]:
            return constant(decided[name][1], f"{name} of a value and its extreme")
        return out
