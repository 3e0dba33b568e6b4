"""Graphs valid only where a float input or weight holds one exact value, found through
one-to-one ops: not a proof, but a set of values no search aims for."""

from __future__ import annotations

from nnsmith_cov.gen.feasibility.facts import Range
from nnsmith_cov.gen.feasibility.layout import SUBSET
from nnsmith_cov.gen.feasibility.refine import MAX_PULL, SHOWS_ALL
from nnsmith_cov.gen.feasibility.transfer import producer_chain
from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.ops import op_by_name


def _only_at(name: str, ins: list[Range]) -> float | None:
    """The one value every element of a valid first input must hold, where its range meets
    the op's closed domain at one end only (Acos of a value >= 1 needs it to be 1; a Pow
    of a base <= 0 needs it to be 0, unless its exponent is a whole number)."""
    r = ins[0]
    if name == "Pow" and r.hi <= 0 and not ins[1].integral:
        return 0.0
    if name in ("Asin", "Acos"):
        return 1.0 if r.lo >= 1 else (-1.0 if r.hi <= -1 else None)
    if name == "Sqrt" and r.hi <= 0:
        return 0.0
    return None


def _isolated(
    graph: GraphIR, producers: dict[int, Inst], env: dict[int, Range], v: int, b: float, depth: int = 0
) -> tuple[int, float] | None:
    """A float leaf, and the value it must hold, for v to be b in some element: found
    through ops that keep a value isolated (one-to-one unary ops, ops that move elements
    unchanged, and a Min (Max) of an input never above (below) b, which must then be b
    itself). None where some op on the way takes b on a whole interval (Relu, Floor, a
    saturated Tanh, an integer cast) or the way is not followed."""
    if v in graph.inputs or v in graph.weights:
        return (v, b) if graph.types[v].dtype.is_float else None
    inst = producers.get(v)
    if inst is None or depth >= MAX_PULL:
        return None
    name = inst.op
    # Each output element of a SUBSET op is one of its data input's elements: the ones it
    # picks must be b (Sqrt(Neg(Acos(Slice(x)))) needs every picked x to be 1).
    if name in SHOWS_ALL or (name in SUBSET and graph.types[v].dtype.is_float):
        return _isolated(graph, producers, env, inst.inputs[0], b, depth + 1)
    inverse = op_by_name(name).inverse  # (one-to-one ops: the one input giving b is isolated)
    if inverse is not None:
        c = inverse(b)
        return None if c is None else _isolated(graph, producers, env, inst.inputs[0], c, depth + 1)
    if name in ("Min", "Max") and graph.types[v].dtype.is_float:
        bounded = [u for u in inst.inputs if (env[u].hi <= b if name == "Min" else env[u].lo >= b)]
        if bounded:  # min(p, q) = b with q <= b everywhere: q = b there
            return _isolated(graph, producers, env, bounded[0], b, depth + 1)
    return None


def exact_only(
    graph: GraphIR, producers: dict[int, Inst], env: dict[int, Range], inst: Inst, ins: list[Range]
) -> str | None:
    """Why `inst` is valid only where a float leaf holds one exact value (up to rounding:
    Acos(Exp(Sqrt(x))) needs x = 0, or below 4e-15 in float32), or None. Not a proof
    that no values exist: values that exact are a set no search aims for, and the
    generator drops such graphs like those proven to have none."""
    if not ins:
        return None
    b = _only_at(inst.op, ins)
    found = None if b is None else _isolated(graph, producers, env, inst.inputs[0], b)
    if found is None:
        return None
    leaf, c = found
    kind = "input" if leaf in graph.inputs else "weight"
    unless = " (or its exponent a whole number)" if inst.op == "Pow" else ""
    chain = producer_chain(graph, inst.inputs[0])
    return f"{inst.op} <- {chain}: valid only where {kind} v{leaf} is exactly {c:g}{unless}"
