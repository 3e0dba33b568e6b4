"""Refining a value by what a valid execution needs of it: the domains of vulnerable ops,
narrowing a range to one, and pulling it back through ops that keep values exact."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op_facts import Domain
from nnsmith_cov.gen.feasibility.facts import Infeasible, Range
from nnsmith_cov.gen.feasibility.layout import KEEP_ALL, pad_widths
from nnsmith_cov.gen.feasibility.values import value_set
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.ops import ALL_OPS

# Each vulnerable op's input domains (the specs' `input_domains`), by op name.
DOMAINS: dict[str, tuple[Domain | None, ...]] = {op.name(): op.input_domains for op in ALL_OPS if op.input_domains}


def _inside(c: float, d: Domain) -> bool:
    lo, hi, lo_open, hi_open, nonzero = d
    return (c > lo if lo_open else c >= lo) and (c < hi if hi_open else c <= hi) and not (nonzero and c == 0)


def narrow(r: Range, d: Domain, why: str) -> Range:
    """r as far as elements that all lie in domain d allow; Infeasible when that is nothing
    (a value r certainly takes, or certainly reaches, lies outside)."""
    lo, hi, lo_open, hi_open, nonzero = d
    new_lo, new_hi = max(r.lo, lo), min(r.hi, hi)
    if r.integral:  # whole numbers: an open bound or an excluded 0 moves to the next one
        new_lo = math.ceil(new_lo) if math.isfinite(new_lo) else new_lo
        new_hi = math.floor(new_hi) if math.isfinite(new_hi) else new_hi
        if lo_open and new_lo == lo:
            new_lo += 1
        if hi_open and new_hi == hi:
            new_hi -= 1
        if nonzero and new_lo == 0:
            new_lo = 1
        if nonzero and new_hi == 0:
            new_hi = -1
    values = None if r.values is None else frozenset(c for c in r.values if _inside(c, d))
    bad = (
        new_lo > new_hi
        or (lo_open and new_hi <= lo)
        or (hi_open and new_lo >= hi)
        or values == frozenset()
        or any(not _inside(c, d) for c in r.forced)
        or r.below < new_lo
        or r.above > new_hi
    )
    if bad:
        raise Infeasible(why)
    if values is not None:
        new_lo, new_hi = max(new_lo, min(values)), min(new_hi, max(values))
    out = replace(r, lo=float(new_lo), hi=float(new_hi), values=values)
    return replace(out, values=value_set(out))


def _negated(d: Domain) -> Domain:
    lo, hi, lo_open, hi_open, nonzero = d
    return Domain(-hi, -lo, hi_open, lo_open, nonzero)


# Ops whose every input element appears, unchanged, in the output: a domain every output
# element lies in holds for the input too.
SHOWS_ALL = KEEP_ALL
MAX_PULL = 8  # producers a refinement walks back through


def pull(
    env: dict[int, Range], producers: dict[int, Inst], graph: GraphIR, v: int, d: Domain, why: str, depth: int = 0
) -> None:
    """Refine value v (and, through ops that keep values exact, what it is made of) to
    domain d, which every valid execution's v lies in."""
    env[v] = narrow(env[v], d, why)
    inst = producers.get(v)
    if inst is None or depth >= MAX_PULL:
        return
    name, ins = inst.op, inst.inputs
    if name in SHOWS_ALL or name.startswith("Concat"):
        targets = ins if name.startswith("Concat") else ins[:1]
    elif name in ("PadConstant", "PadReflect", "PadReplicate") and all(p >= 0 for p in pad_widths(graph.attrs(inst))):
        targets = ins[:1]
    elif name == "Neg":
        pull(env, producers, graph, ins[0], _negated(d), why, depth + 1)
        return
    elif name == "Relu" and (d[0] > 0 or d[0] == 0 and d[2]):  # positive elements are the input's own
        targets = ins[:1]
    elif name.startswith("Cast") and _exact_cast(graph.types[ins[0]].dtype, graph.types[v].dtype, env[ins[0]]):
        targets = ins[:1]
    else:
        return
    for u in targets:
        pull(env, producers, graph, u, d, why, depth + 1)


def _exact_cast(src: DType, dst: DType, r: Range) -> bool:
    """Whether casting every value r allows from src to dst keeps it exactly."""
    if src is DType.bool:
        return True
    if src.is_float:
        return dst.is_float and torch.finfo(dst.torch).bits >= torch.finfo(src.torch).bits
    if dst.is_float:  # integers up to 2048 in magnitude are exact in every float (float16: 11 bits)
        return max(abs(r.lo), abs(r.hi)) <= 2048
    if dst is DType.bool:
        return False
    info = torch.iinfo(dst.torch)
    return info.min <= r.lo and r.hi <= info.max
