"""The driver: two passes over a graph's ops, each value's range met with what later ops
need of it, up to the first op proven invalid."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from nnsmith_cov.abstract.op_facts import Domain
from nnsmith_cov.gen.feasibility.boxes import boxes
from nnsmith_cov.gen.feasibility.exact import exact_only
from nnsmith_cov.gen.feasibility.facts import Infeasible, Range, constant, dtype_range, point
from nnsmith_cov.gen.feasibility.layout import PICKS, all_padding_window, triangle_zeros
from nnsmith_cov.gen.feasibility.order import Order, keeps_even
from nnsmith_cov.gen.feasibility.refine import DOMAINS, narrow, pull
from nnsmith_cov.gen.feasibility.transfer import producer_chain, transfer, violation
from nnsmith_cov.gen.feasibility.values import fold, value_set
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.ops import op_by_name

# Ops whose output elements are each one of their (first) input's elements, exactly (not an
# interpolation: its rounding may move a number by an ulp). (Read only for ops that keep
# equal elements equal, `keeps_even`.)
SAME_NUMBER = PICKS - {"Interpolate"}


def analyze(graph: GraphIR) -> tuple[str | None, dict[int, Range]]:
    """Ranges of the values up to the first op proven invalid, and why it is (or None).

    Two passes: what the first learns of a value from a later op's domain (Log(x) makes
    x positive, so its Floor is >= 1) holds in every valid execution, so the second
    applies it where the value is made, before the ops between read it (a Log of x
    read before an Acos of x that needs x <= 1 sees x = 1)."""
    reason, env, learned = _pass(graph, {})
    if reason is None and learned:
        reason, env, _ = _pass(graph, learned)
    return reason, env


def _meet(r: Range, known: Range, why: str) -> Range:
    """r where every element also lies within what `known` says of it."""
    out = narrow(r, Domain(known.lo, known.hi), why)
    if known.values is not None:
        mine = out.values if out.values is not None else value_set(out)
        values = known.values if mine is None else mine & known.values
        out = narrow(replace(out, values=values), Domain(known.lo, known.hi), why)
    return replace(out, integral=out.integral or known.integral)


def _pass(graph: GraphIR, hints: dict[int, Range]) -> tuple[str | None, dict[int, Range], dict[int, Range]]:
    """One pass of the analysis, each value met with its hint; also returns the values a
    domain refined after they were made (the next pass's hints)."""
    env: dict[int, Range] = {v: dtype_range(graph.types[v].dtype) for v in (*graph.inputs, *graph.weights)}
    for v in env:
        if v in hints:
            env[v] = hints[v]
    made = dict(env)
    producers = {v: inst for inst in graph.insts for v in inst.outputs}
    order = Order()
    # Values whose elements are all equal (one element, or made from such by ops that
    # keep that): ArgMax and ArgMin of them pick index 0 (the first of equal values).
    even = {v for v, t in enumerate(graph.types) if math.prod(t.shape) == 1}
    # Values holding the same numbers as an earlier one: an identity of it (a Tril keeping
    # every element, a Reshape to its own shape), or, for values of `even`, any op keeping
    # its one number (a Squeeze, a TopK, a ReduceMax). An op reading both reads one value twice.
    same_as: dict[int, int] = {}
    for inst in graph.insts:
        a = graph.attrs(inst)
        ins = [env[v] for v in inst.inputs]
        if ins and all(point(r) for r in ins):
            folded = fold(inst, a, ins)
            if isinstance(folded, str):
                return folded, env, {}
            if folded is not None:
                env.update(zip(inst.outputs, folded))
                made.update(zip(inst.outputs, folded))
                continue
        try:
            if op_by_name(inst.op).vulnerable:
                reason = violation(inst.op, a, ins, lambda i, vs=inst.inputs: producer_chain(graph, vs[i]))
                reason = reason or exact_only(graph, producers, env, inst, ins)
                if reason is not None:
                    return reason, env, {}
                # Every valid execution has this op's inputs in its domain: so do the values
                # they are made of exactly (a Concat's parts, a Reshape's input, ...), which
                # later ops may read.
                for i, d in enumerate(DOMAINS.get(inst.op, [])):
                    if d is not None:
                        src = ins[i].src or producer_chain(graph, inst.inputs[i])
                        why = f"{inst.op} <- {src}: no value its input may take lies in its domain"
                        pull(env, producers, graph, inst.inputs[i], d, why)
                ins = [env[v] for v in inst.inputs]
            if inst.op in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d") and all_padding_window(inst.op, a):
                return f"{inst.op}: a window lies wholly in the padding", env, {}
            if inst.op in ("ArgMax", "ArgMin") and inst.inputs[0] in even:
                outs = [constant(0.0, f"{inst.op} of equal values")]
            elif inst.op in ("Softmax", "LogSoftmax") and inst.inputs[0] in even and a["in_types"][0].shape[a.dim] > 1:
                outs = [_softmax_of_equal(inst.op, a)]
            else:
                root = [same_as.get(v, v) for v in inst.inputs]
                shapes = [graph.types[v].shape for v in inst.inputs]
                aligned = all(v in even for v in inst.inputs) or len(set(map(tuple, shapes))) == 1
                twice = len(root) == 2 and root[0] == root[1] and aligned
                out_types = [graph.types[v] for v in inst.outputs]
                outs = boxes(inst, a, ins, transfer(inst, a, ins, out_types, twice))
            if identity(inst, a):
                same_as[inst.outputs[0]] = same_as.get(inst.inputs[0], inst.inputs[0])
            if inst.inputs and all(v in even for v in inst.inputs) and keeps_even(inst):
                even.update(inst.outputs)
                if inst.op in SAME_NUMBER:  # (a TopK's indices are another number)
                    kept = inst.outputs[:1] if inst.op == "TopK" else inst.outputs
                    same_as.update((v, same_as.get(inst.inputs[0], inst.inputs[0])) for v in kept)
            outs[:1] = [order.decide(inst, outs[0])] if outs else []
            order.track(inst, a)
            why = f"{inst.op}: what later ops need of its output leaves no value"
            outs = [_meet(r, hints[v], why) if v in hints else r for v, r in zip(inst.outputs, outs)]
        except Infeasible as e:
            return str(e), env, {}
        env.update(zip(inst.outputs, outs))
        made.update(zip(inst.outputs, outs))
    return None, env, {v: r for v, r in env.items() if r is not made.get(v)}


def identity(inst, a) -> bool:
    """Whether `inst` returns its (only) input unchanged, element for element."""
    t_in, t_out = a["in_types"][0] if a["in_types"] else None, a["out_types"][0]
    if t_in is None or tuple(t_in.shape) != tuple(t_out.shape) or t_in.dtype is not t_out.dtype:
        return False
    if inst.op in ("Tril", "Triu"):
        return len(t_in.shape) >= 2 and not triangle_zeros(inst.op, a, tuple(t_in.shape))
    return inst.op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile")


def _softmax_of_equal(name: str, a) -> Range:
    """A Softmax (LogSoftmax) of equal values: 1/n (-log n) everywhere, whatever the values,
    so computed on zeros in the op's dtype."""
    t = a["in_types"][0]
    with torch.no_grad():
        y = op_by_name(name).forward(a, torch.zeros(t.shape, dtype=t.dtype.torch))
    return constant(float(y.reshape(-1)[0]) if y.numel() else 0.0, f"{name} of equal values")


def prove_infeasible(graph: GraphIR) -> str | None:
    """Why no NaN/Inf-free values exist for `graph`, or None when that cannot be shown."""
    return analyze(graph)[0]
