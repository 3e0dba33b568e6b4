"""Candidate graphs for the reducer: a `Cut` of the original graph, and the edits that shrink it.

A cut names what is kept of the original GraphIR (instruction indices, the values returned,
leaves whose recorded values are replaced by constants) in the original's value ids; `build`
turns it into a well-formed GraphIR of its own (dense ids) with its leaf values and expected
outputs. A value the kept part reads but no kept instruction makes becomes a fresh model
input carrying the value recorded for it in a run of the whole graph, so the small graph sees
exactly what the big one saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from nnsmith_cov.gen.graph_ir import GraphIR, Inst
from nnsmith_cov.materialize.torch_module import input_name, output_name, weight_name

FILLS = ("zeros", "ones")


@dataclass(frozen=True)
class Cut:
    keep: frozenset[int]  # indices into the original graph's instructions
    outputs: tuple[int, ...]  # original value ids the candidate returns (sorted)
    fills: tuple[tuple[int, str], ...] = ()  # (original leaf id, one of FILLS), sorted


@dataclass
class Candidate:
    """A cut made concrete: a graph of its own, its leaves' values and its expected outputs."""

    cut: Cut
    graph: GraphIR
    values: dict[str, np.ndarray]  # i<v>, w<v> in the candidate's ids
    oracle: dict[str, np.ndarray] | None  # o<v>; None when a returned value was never recorded
    origin: dict[int, int] = field(default_factory=dict)  # candidate id -> original id

    def ops(self) -> list[str]:
        return [inst.op for inst in self.graph.insts]


def full_cut(graph: GraphIR) -> Cut:
    return Cut(frozenset(range(len(graph.insts))), tuple(sorted(graph.outputs)))


def live(graph: GraphIR, cut: Cut) -> list[int]:
    """The kept instructions the returned values depend on, in graph order."""
    needed = set(cut.outputs)
    alive: list[int] = []
    for k in sorted(cut.keep, reverse=True):
        inst = graph.insts[k]
        if needed.intersection(inst.outputs):
            alive.append(k)
            needed.update(inst.inputs)
    return alive[::-1]


def normalized(graph: GraphIR, cut: Cut) -> Cut | None:
    """`cut` with dead instructions, unreachable outputs and fills of unread leaves dropped;
    None when nothing is left to run."""
    produced = {v for k in cut.keep for v in graph.insts[k].outputs}
    outputs = tuple(sorted(v for v in set(cut.outputs) if v in produced))
    alive = live(graph, Cut(cut.keep, outputs))
    if not alive:
        return None
    made = {v for k in alive for v in graph.insts[k].outputs}
    read = {v for k in alive for v in graph.insts[k].inputs} - made
    fills = tuple(sorted((v, f) for v, f in cut.fills if v in read))
    return Cut(frozenset(alive), outputs, fills)


def leaves(graph: GraphIR, cut: Cut) -> list[int]:
    """Original ids of the values the cut reads but does not make, ascending."""
    made = {v for k in cut.keep for v in graph.insts[k].outputs}
    return sorted({v for k in cut.keep for v in graph.insts[k].inputs} - made)


# -- edits ---------------------------------------------------------------------------------


def remove(graph: GraphIR, cut: Cut, drop: set[int]) -> Cut | None:
    """Drop the instructions `drop`: what they read and nothing else reads is returned instead
    (so the rest of the graph stays), what they made becomes a fresh input of its consumers."""
    keep = cut.keep - drop
    still_read = {v for k in keep for v in graph.insts[k].inputs}
    made = {v for k in keep for v in graph.insts[k].outputs}
    orphaned = {v for k in drop & cut.keep for v in graph.insts[k].inputs if v in made and v not in still_read}
    return normalized(graph, Cut(frozenset(keep), tuple(set(cut.outputs) | orphaned), cut.fills))


def drop_outputs(graph: GraphIR, cut: Cut, drop: set[int]) -> Cut | None:
    """Return fewer values; whatever only they needed goes with them."""
    return normalized(graph, replace(cut, outputs=tuple(v for v in cut.outputs if v not in drop)))


def cone(graph: GraphIR, cut: Cut, k: int) -> set[int]:
    """The kept instructions that feed instruction `k` and nothing else (no returned value, no
    instruction outside the set): removing them replaces that subgraph by fresh inputs of `k`."""
    producer = {v: j for j in cut.keep for v in graph.insts[j].outputs}
    found: set[int] = set()
    stack = [producer[v] for v in graph.insts[k].inputs if v in producer]
    while stack:
        j = stack.pop()
        if j not in found:
            found.add(j)
            stack.extend(producer[v] for v in graph.insts[j].inputs if v in producer)
    returned = set(cut.outputs)
    changed = True
    while changed:  # keep only what is private to k's inputs
        changed = False
        for j in sorted(found):
            outs = set(graph.insts[j].outputs)
            readers = {i for i in cut.keep if outs.intersection(graph.insts[i].inputs)}
            if outs & returned or not readers <= found | {k}:
                found.discard(j)
                changed = True
    return found


def fill(cut: Cut, leaf: int, how: str) -> Cut:
    fills = dict(cut.fills)
    fills[leaf] = how
    return replace(cut, fills=tuple(sorted(fills.items())))


# -- concrete candidates -------------------------------------------------------------------


def build(graph: GraphIR, cut: Cut, recorded: Mapping[int, np.ndarray]) -> Candidate:
    """The candidate graph of a normalized `cut`. Its values are numbered inputs first, then
    weights, then instruction outputs; original inputs and weights stay what they were, other
    leaves become inputs. `recorded` holds values by original id; a leaf or output without one
    is left out (the reference stage, where no whole run was recorded, searches its own)."""
    alive = sorted(cut.keep)
    read = leaves(graph, cut)
    is_weight = set(graph.weights)
    weights = [v for v in read if v in is_weight]
    inputs = [v for v in read if v not in is_weight]
    order = inputs + weights + [v for k in alive for v in graph.insts[k].outputs]
    new = {old: i for i, old in enumerate(order)}
    insts = [
        Inst(
            graph.insts[k].op,
            dict(graph.insts[k].attrs),
            tuple(new[v] for v in graph.insts[k].inputs),
            tuple(new[v] for v in graph.insts[k].outputs),
        )
        for k in alive
    ]
    dynamic = [(new[v], d) for v, d in graph.dynamic if v in new and v not in is_weight]
    dynamic += [(new[v], d) for v in inputs if v not in graph.inputs for d in symbolic_dims(graph, v)]
    small = GraphIR(
        types=[graph.types[v] for v in order],
        inputs=[new[v] for v in inputs],
        weights=[new[v] for v in weights],
        insts=insts,
        outputs=[new[v] for v in cut.outputs],
        opset=graph.opset,
        dynamic=dynamic,
        roundtrip=graph.roundtrip,
    )
    small.check()
    fills = dict(cut.fills)
    values: dict[str, np.ndarray] = {}
    for old in read:
        name = weight_name(new[old]) if old in is_weight else input_name(new[old])
        if old in fills:
            t = graph.types[old]
            values[name] = np.full(t.shape, 0 if fills[old] == "zeros" else 1, dtype=t.dtype.numpy)
        elif old in recorded:
            values[name] = recorded[old]
    oracle = None
    if not fills and all(v in recorded for v in cut.outputs):
        oracle = {output_name(new[v]): recorded[v] for v in cut.outputs}
    return Candidate(cut, small, values, oracle, {i: old for old, i in new.items()})


def symbolic_dims(graph: GraphIR, value: int) -> list[int]:
    """Dims of an inner value that were likely symbolic in the exported graph: those whose size
    is the size of a dynamic input dim the value depends on. A fresh input standing for the
    value gets them dynamic, so that a crash about symbolic shapes survives the subgraph's
    removal (a static input would let the backend fold the shape away). A guess by size (a
    coincidence marks a dim too many); the reducer keeps a candidate only when the finding holds."""
    sizes: dict[int, set[int]] = {}
    for v, d in graph.dynamic:
        sizes.setdefault(v, set()).add(graph.types[v].shape[d])
    for inst in graph.insts:
        reach = set().union(*(sizes.get(v, set()) for v in inst.inputs))
        for v in inst.outputs:
            sizes[v] = reach
        if value in inst.outputs:
            break
    found = sizes.get(value, set())
    return [d for d, n in enumerate(graph.types[value].shape) if n in found]


def pattern(ops: list[str]) -> str:
    """The root-cause key of a reduced graph: its op types sorted, so that one defect reached
    through differently ordered graphs gets one key ("ArgMax+ScatterAdd")."""
    return "+".join(sorted(ops))
