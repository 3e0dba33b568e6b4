"""GraphFuzzer-style generation, as the NNSmith paper reimplemented it for its comparison.

Operators are drawn at random (by the scheduler's op weights when feedback is
on; the first try takes the scheduler's first op, `GenConfig.first_op`) and wired
to values made before them. Nothing is solved across the graph:
each value is concrete once made, and an operator whose inputs do not fit is
fed through glue instead: a rank mismatch through Reshape, larger dims cut by
Slice, smaller ones grown by PadConstant with zeros. Conv-like operators (the
convolutions and poolings) take only shape-preserving instances: stride 1,
dilation 1, "same" padding, as many output channels as input ones. An
operator's own attributes are found on its concrete inputs (`instantiate`).

Glue is used only where the op set allows it (Slice and PadConstant for the
dtype, Reshape for rank changes); otherwise the inputs must fit as they are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.abstract.symbols import fresh_context
from nnsmith_cov.abstract.tensor import AbsTensor, TensorType
from nnsmith_cov.abstract.window import Window
from nnsmith_cov.baselines.glue import pad_to, reshape_to_rank, slice_to
from nnsmith_cov.baselines.instantiate import accepts, data_inputs, find_op, instantiate
from nnsmith_cov.baselines.net import Net
from nnsmith_cov.baselines.record import BaselineRecord
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError

NAME = "graphfuzzer"
_FIRST_RANKS = (1, 2, 3, 4, 5)
_FIRST_RANK_WEIGHTS = (1, 2, 2, 4, 1)  # image-like inputs first, as GraphFuzzer's blocks are
_FIRST_DIM = (1, 12)


def _shape_preserving(op: OpSpec, ins: list[AbsTensor], outs: list[AbsTensor]) -> list:
    """Stride 1, dilation 1, no output padding; `instantiate(preserve=True)` adds out == in."""
    return [sym == (0 if name.startswith("output_padding") else 1) for name, sym in op.sym.items() if
            name.startswith(("stride", "dilation", "output_padding"))]  # fmt: skip


class _Builder:
    def __init__(self, cfg: GenConfig, draw: ChoiceSource) -> None:
        self.cfg, self.draw = cfg, draw
        self.net = Net()
        self.uid = 0
        self.steps: list[str] = []

    def glue_ok(self, dtype: DType) -> bool:
        ops = self.cfg.ops
        return all((op := find_op(ops, n)) is not None and accepts(op, dtype) for n in ("Slice", "PadConstant"))

    def reshape_ok(self, dtype: DType) -> bool:
        op = find_op(self.cfg.ops, "Reshape")
        return op is not None and accepts(op, dtype)

    def first_input(self, first: type[OpSpec] | None = None) -> None:
        """The graph's first input; of a dtype `first` takes, when given (the first op to try)."""
        draw, cfg = self.draw, self.cfg
        dtypes = sorted({s[0][i] for o in cfg.ops for s in o.sigs for i in data_inputs(o)[:1]}, key=lambda d: d.value)
        if not dtypes:
            raise GenerationError("no operator takes an input from the graph")
        weights = [8 if d is DType.float32 else 1 for d in dtypes]
        # By weight, not by narrowing the list: a draw replays by its index into the same list
        # whatever the weights, and a replay does not know the scheduler's pick.
        taken = {s[0][i] for s in first.sigs for i in data_inputs(first)[:1]} if first is not None else set()
        if taken & set(dtypes):
            weights = [w if d in taken else 0 for w, d in zip(weights, dtypes)]
        dtype = draw.choice("gf.init.dtype", dtypes, weights)
        rank = draw.choice("gf.init.rank", _FIRST_RANKS, _FIRST_RANK_WEIGHTS)
        shape = [draw.integer("gf.init.dim", *_FIRST_DIM) for _ in range(rank)]
        while len(shape) > 1 and TensorType(tuple(shape), dtype).nelement() > cfg.max_elems:
            shape[shape.index(max(shape))] //= 2
        self.net.add_input(TensorType(tuple(shape), dtype))

    def values_of(self, dtype: DType) -> list[int]:
        return [v for v, t in self.net.types.items() if t.dtype == dtype and v not in self.net.weights]

    def insert(self, cls: type[OpSpec]) -> bool:
        draw, net = self.draw, self.net
        data = data_inputs(cls)
        if not data:
            return False
        sigs = [s for s in cls.sigs if self.values_of(s[0][data[0]])]
        if not sigs:
            return False
        sig = draw.choice("gf.sig", sigs)
        dtypes = list(sig[0])
        picked: dict[int, int] = {}  # input slot -> value feeding it
        ranks: list[int] = []
        for i in range(cls.arity()):
            if i in cls.param_inputs:
                ranks.append(draw.choice("gf.param_rank", cls.in_ranks[i]))
                continue
            cands = self.values_of(dtypes[i])
            fit = [v for v in cands if net.types[v].rank in cls.in_ranks[i]]
            if fit:
                v = draw.choice("gf.input", fit)
            elif cands and self.reshape_ok(dtypes[i]):
                v = draw.choice("gf.input", cands)
            elif i == data[0]:
                return False  # an operator joins the graph through its first input
            else:
                ranks.append(draw.choice("gf.fresh_rank", cls.in_ranks[i]))
                continue  # no value of this dtype yet: a fresh model input
            picked[i] = v
            rank = net.types[v].rank
            if rank not in cls.in_ranks[i]:
                ones = net.types[v].nelement() == 1
                rank = draw.choice("gf.rank", [r for r in cls.in_ranks[i] if r or ones] or [1])
            ranks.append(rank)
        given: list[TensorType | None] = [None] * cls.arity()
        for i, v in picked.items():
            t = net.types[v]
            if t.rank != ranks[i]:
                shape = t.shape  # what a reshape would give, for the preference
                given[i] = TensorType(_reshaped(shape, ranks[i]), t.dtype)
            else:
                given[i] = t
        conv_like = issubclass(cls, Window)
        inst = instantiate(
            cls,
            self.uid,
            draw,
            dtypes,
            ranks,
            given,
            soft=all(self.glue_ok(dtypes[i]) for i in picked),
            preserve=conv_like,
            extra=_shape_preserving if conv_like else None,
            max_elems=self.cfg.max_elems,
            excluded=self.cfg.excluded,
        )
        if inst is None:
            return False
        self.uid += 1
        inputs = []
        for i in range(cls.arity()):
            want = inst.in_types[i]
            if i not in picked:  # the op's own weight, or a fresh model input
                weight = i in cls.param_inputs or draw.coin("gf.fresh_weight", self.cfg.weight_prob)
                inputs.append(net.add_input(want, weight=weight))
                continue
            v = picked[i]
            if net.types[v].rank != want.rank:
                v = reshape_to_rank(net, v, want.rank)
                self.steps.append("reshape")
            if net.types[v].shape != want.shape:
                before = len(net.nodes)
                v = pad_to(net, slice_to(net, v, tuple(min(a, b) for a, b in zip(net.types[v].shape, want.shape)),
                                         draw), want.shape, draw)  # fmt: skip
                self.steps += [n.op.lower() for n in net.nodes[before:]]
            inputs.append(v)
        net.add(inst.op, inst.attrs, inputs, inst.out_types)
        return True


def _reshaped(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    n = len(shape)
    if rank >= n:
        return (1,) * (rank - n) + shape
    if rank == 0:
        return ()
    cut = n - rank + 1
    prod = 1
    for d in shape[:cut]:
        prod *= d
    return (prod, *shape[cut:])


def generate(cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, int | float]] = ()) -> Generated:
    """A GraphFuzzer-style graph of `cfg.nodes` chosen operators (glue not counted)."""
    if not cfg.ops:
        raise ValueError("no operators to generate from")
    t0 = time.perf_counter()
    draw = ChoiceSource(seed, prefix)
    record = BaselineRecord(seed=seed, generator=NAME)
    ops = list(cfg.ops)
    weights = [cfg.op_weights.get(o.name(), 1.0) for o in ops] if cfg.op_weights else None
    first, picked = weights, next((o for o in ops if o.name() == cfg.first_op), None)
    if picked is not None:  # the scheduler's pick: all weight on it, first try only
        first = [float(o is picked) for o in ops]
    with fresh_context():
        b = _Builder(cfg, draw)
        b.first_input(picked)
        while len(record.ops) < cfg.nodes and record.tries < cfg.nodes * cfg.max_tries_per_node:
            record.tries += 1
            cls = draw.choice("op", ops, first if record.tries == 1 else weights)
            if b.insert(cls):
                record.ops.append(cls.name())
            else:
                record.rejected[cls.name()] = record.rejected.get(cls.name(), 0) + 1
    if not record.ops:
        raise GenerationError("no operator could be inserted")
    graph = b.net.to_graph()
    record.steps = b.steps
    record.gen_ms = (time.perf_counter() - t0) * 1000
    record.draws = draw.record
    return Generated(graph, record)
