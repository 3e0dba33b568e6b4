"""Graph generation (Algorithm 1): forward and backward insertion under Z3.

The generator grows a connected graph from a single placeholder. Every random
decision is drawn from one `ChoiceSource`; the choices that a scheduler may
bias (operator weights, forward probability, bin weights, graph size) come in
through `GenConfig`, and `GenRecord` reports which ones were actually taken.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import z3

from nnsmith_cov.abstract.bins import draw_bin
from nnsmith_cov.abstract.choice import ChoiceSource, Replayed
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import ATTR_LIMIT, MAX_OPSET, MIN_OPSET, AttrKind, OpSpec
from nnsmith_cov.abstract.symbols import fresh_context, int_sym
from nnsmith_cov.abstract.tensor import AbsTensor
from nnsmith_cov.abstract.terms import eq, le
from nnsmith_cov.gen.binning import BinChoice, BinFitter, weights_for
from nnsmith_cov.gen.export_plan import static_input_dims
from nnsmith_cov.gen.feasibility import prove_infeasible
from nnsmith_cov.gen.graph_ir import DEFAULT_OPSET, GraphIR, Inst
from nnsmith_cov.gen.reach import Bridge, backward_ranks, bridge_for
from nnsmith_cov.gen.solver import BudgetSolver, SolverTimeout

# Rank of the first placeholder: mostly 2-4, as real models are.
_FIRST_RANK_WEIGHTS = (1, 2, 3, 4, 4, 1)
# In a graph exported with dynamic dims, each input dim is symbolic with this probability
# (at least one is): with every dim symbolic most models fail to export or to import.
DYNAMIC_DIM_PROB = 0.3


class GenerationError(Exception):
    """No graph could be made within the budget."""


@dataclass
class GenConfig:
    """What a graph is made from; every field is a knob a scheduler may turn."""

    nodes: int = 10
    ops: Sequence[type[OpSpec]] = ()
    op_weights: Mapping[str, float] | None = None
    # The op the first insertion tries, where it exports at the graph's opset (None, or an op
    # that does not export there: drawn by `op_weights` as the others are). The first op is
    # inserted against a placeholder made to fit it and nearly always goes in; a later try
    # lands only where a value fits, and an op such as GridSample goes in a few times in a
    # hundred tries: the weights set how often an op is tried, this how often a graph holds it.
    first_op: str | None = None
    forward_prob: float = 0.5
    binning: bool = True
    bins: int = 7
    bin_weights: Mapping[str, Sequence[float]] | None = None
    max_elems: int = 1 << 16
    weight_prob: float = 0.5  # a free placeholder becomes a weight (else a model input)
    # The ONNX opsets the graph may be exported at: one is drawn first (`opset_weights`), then
    # the graph is built from the signatures that export at it.
    opsets: Sequence[int] = (DEFAULT_OPSET,)
    opset_weights: Mapping[int, float] | None = None
    dynamic_prob: float = 0.0  # the graph's inputs get symbolic dims in the ONNX signature
    roundtrip_prob: float = 0.0  # backends compile their IR printed as text and parsed back
    # Z3 work units (deterministic, unlike seconds): per check (about 0.5 s here) and per
    # graph, all checks together (about 2.5-5 s here); seconds only as a safety net.
    check_rlimit: int = 5_000_000
    work_budget: int = 10_000_000
    # Per binning check: bins are optional, and the few checks that need more than this
    # (a bin pushing a convolution's products to a hard corner; about 2% of binning checks)
    # took three quarters of all binning time and made the slowest tenth of graphs slow.
    # A bin whose check reaches the cap is left out, as a conflicting one is.
    bin_check_rlimit: int = 20_000
    # All binning checks of a graph together: in graphs whose constraints hold many products
    # of symbolic dims (convolutions, SpaceToDepth, element caps) most groups of bins reach
    # the cap above, and halving checks them again and again (up to ~70 checks, a second of
    # Z3); the 9% of graphs over this budget used a third of all binning work. Bins not yet
    # checked when it is spent stay unkept.
    bin_work_budget: int = 100_000
    # Per insertion check: the 0.6% of insertion checks above it (a set of such products
    # pushed over by one more op; up to 1.6M units, half a second) used over half of all
    # insertion work. An op whose check reaches it is rejected as a conflicting one is.
    insert_check_rlimit: int = 100_000
    # After a fixed-rank op (Conv2d, pools, PixelShuffle) found no value of its rank, insert
    # a Reshape to that rank and the op after it, with this probability (`gen.reach`).
    # The Reshape only merges dims or adds unit dims (`Reshape.linear`), so Z3 gets no
    # product equation from it. At 0.3 (500 seeds, 10 nodes) the ops below a third of
    # their fair share go from 10 to 3 (BitShift and Addmm: few dtypes; MaxPool1d just
    # under) for 18% more Z3 work; at 1.0 Reshape takes ten times its fair share. An op of
    # a dtype no value has (BitShift: uint8) gets, with the same probability, a Cast from
    # that dtype inserted backward (a new placeholder of it), then the op.
    bridge_prob: float = 0.3
    timeout_ms: int = 60_000
    max_tries_per_node: int = 30
    # Graphs the range analysis proves to have no NaN/Inf-free values (Log of a
    # LogSoftmax, a divisor out of Tril; also Pow of a base never all positive, valid
    # only for whole exponents, which the search never aims for, and graphs valid only
    # where an input holds one exact value, which no search reaches) are made again from
    # another stream of the same seed, up to this many times in all; 0 keeps them.
    feasible_attempts: int = 8
    # (dtype, rank) pairs no value may take. PyTorch's TorchScript exporter
    # treats 0-d float64 tensors as Python scalars and demotes them to float32,
    # so the exported model would not compute what the graph says.
    excluded: frozenset[tuple[DType, int]] = frozenset({(DType.float64, 0)})
    # Weights of labelled draws the specs make themselves (an op's export form: "conv.form"),
    # one per option; None or a missing label: uniform.
    draw_weights: Mapping[str, Sequence[float]] | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError("nodes must be at least 1")
        if not 0.0 <= self.forward_prob <= 1.0:
            raise ValueError("forward_prob must be in [0, 1]")
        if self.bins < 2:
            raise ValueError("bins must be at least 2")
        if self.max_elems < 1:
            raise ValueError("max_elems must be at least 1")
        if self.bin_check_rlimit < 1:
            raise ValueError("bin_check_rlimit must be at least 1")
        if self.bin_work_budget < 1:
            raise ValueError("bin_work_budget must be at least 1")
        if self.insert_check_rlimit < 1:
            raise ValueError("insert_check_rlimit must be at least 1")
        if self.feasible_attempts < 0:
            raise ValueError("feasible_attempts must be at least 0")
        if not self.opsets or any(not MIN_OPSET <= o <= MAX_OPSET for o in self.opsets):
            raise ValueError(f"opsets must be within {MIN_OPSET}..{MAX_OPSET}")
        if not 0.0 <= self.dynamic_prob <= 1.0:
            raise ValueError("dynamic_prob must be in [0, 1]")
        if not 0.0 <= self.bridge_prob <= 1.0:
            raise ValueError("bridge_prob must be in [0, 1]")
        if not 0.0 <= self.roundtrip_prob <= 1.0:
            raise ValueError("roundtrip_prob must be in [0, 1]")


@dataclass
class GenRecord:
    """What the generator actually did, for rewards and for reports."""

    seed: int
    ops: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=list)
    bins: list[BinChoice] = field(default_factory=list)
    tries: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    solver_checks: int = 0
    solver_work: int = 0  # Z3 work units spent (of GenConfig.work_budget)
    solve_ms: float = 0.0
    gen_ms: float = 0.0
    draws: list[tuple[str, int | float]] = field(default_factory=list)
    # Draws made by the insertion loop (the rest are binning and placeholders): replayed
    # as a prefix with more nodes, they rebuild this graph and grow it further.
    insert_draws: int = 0
    stream: int = 0  # the ChoiceSource stream the graph was drawn from
    infeasible: list[str] = field(default_factory=list)  # why earlier streams' graphs were dropped
    opset: int = DEFAULT_OPSET  # the ONNX opset the graph is exported at
    dynamic: bool = False  # exported with symbolic input dims
    roundtrip: bool = False  # compiled from the backends' IR printed and parsed back
    # One character per insertion try, "1" inserted, "0" rejected: where a mutation that
    # deletes or splices tries (nnsmith_cov.feedback.mutate) learns how many ops it removes.
    try_ok: str = ""
    parent: int | None = None  # the corpus entry a mutant was made from
    mutation: dict | None = None  # what was changed in its draws (feedback.mutate.Mutation.to_json)

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "ops": self.ops,
            "directions": self.directions,
            "bins": [vars(b) for b in self.bins],
            "tries": self.tries,
            "rejected": self.rejected,
            "solver_checks": self.solver_checks,
            "solver_work": self.solver_work,
            "solve_ms": round(self.solve_ms, 3),
            "gen_ms": round(self.gen_ms, 3),
            "insert_draws": self.insert_draws,
            "stream": self.stream,
            "infeasible": self.infeasible,
            "opset": self.opset,
            "dynamic": self.dynamic,
            "roundtrip": self.roundtrip,
            "try_ok": self.try_ok,
            "parent": self.parent,
            "mutation": self.mutation,
        }


@dataclass
class Generated:
    graph: GraphIR
    record: GenRecord


@dataclass
class _Value:
    tensor: AbsTensor
    producer: int | None = None  # index of the defining op; None while a placeholder
    param: bool = False  # placeholder created for a weight-like input


@dataclass
class _Node:
    op: OpSpec
    inputs: list[int]
    outputs: list[int]


class _Builder:
    """The mutable graph while it is being generated."""

    def __init__(self, cfg: GenConfig, draw: ChoiceSource, solver: BudgetSolver, opset: int) -> None:
        self.cfg, self.draw, self.solver = cfg, draw, solver
        self.opset = opset  # the graph is exported at it: only signatures that export there
        self.values: list[_Value] = []
        self.nodes: list[_Node] = []
        self._sym_count = 0
        self.no_target = False  # the last insertion found no value (placeholder) it fits

    # -- symbols -------------------------------------------------------------------
    def fresh_tensor(self, dtype: DType, rank: int) -> AbsTensor:
        shape = []
        for _ in range(rank):
            shape.append(int_sym(f"d{self._sym_count}"))
            self._sym_count += 1
        return AbsTensor(shape, dtype)

    def allowed(self, ts: list[AbsTensor]) -> bool:
        return all((t.dtype, t.rank) not in self.cfg.excluded for t in ts)

    def well_sized(self, t: AbsTensor) -> list[z3.BoolRef]:
        """Positive dims and the element cap: applies to every tensor, weights too."""
        cons = t.positive()
        if t.rank:
            cons.append(le(t.nelement(), self.cfg.max_elems))
        return cons

    def placeholders(self) -> list[int]:
        return [i for i, v in enumerate(self.values) if v.producer is None]

    # -- insertion -----------------------------------------------------------------
    def exportable(self, op: type[OpSpec] | OpSpec, in_dtype: DType) -> bool:
        """The op with this first input dtype exports at the graph's opset."""
        return op.exports_at(in_dtype, self.opset)

    def forward(self, op: OpSpec, dtypes: frozenset[DType] | None = None) -> bool:
        """Insert `op` after existing values; `dtypes`, when given, limits its inputs to
        values of those dtypes (a bridge feeding a fixed-rank op: see `_generate`). `no_target`
        tells afterwards whether no value fitted any signature (nothing was drawn)."""
        sigs = []
        for sig in op.sigs:
            if not self.exportable(op, sig[0][0]) or (dtypes is not None and sig[0][0] not in dtypes):
                continue
            cands = []
            for i, (dt, ranks) in enumerate(zip(sig[0], op.in_ranks)):
                if i in op.param_inputs:
                    cands.append(None)
                    continue
                match = [v for v, val in enumerate(self.values) if val.tensor.dtype == dt and val.tensor.rank in ranks]
                if not match:
                    break
                cands.append(match)
            else:
                sigs.append((sig, cands))
        self.no_target = not sigs
        if not sigs:
            return False
        sig, cands = self.draw.choice("fwd.sig", sigs)
        ins: list[AbsTensor] = []
        picked: list[int | None] = []
        for i, c in enumerate(cands):
            if c is None:
                rank = self.draw.choice("fwd.param_rank", op.in_ranks[i])
                ins.append(self.fresh_tensor(sig[0][i], rank))
                picked.append(None)
            else:
                v = self.draw.choice("fwd.input", c)
                ins.append(self.values[v].tensor)
                picked.append(v)
        op.setup(self.draw, [(t.dtype, t.rank) for t in ins])
        outs = op.type_transfer(ins)
        if not self.allowed(ins + outs):
            return False
        cons = op.attr_domains() + list(op.requires(ins))
        for t in outs + op.inner_tensors(ins):
            cons += self.well_sized(t)
        for t, v in zip(ins, picked):
            if v is None:
                cons += self.well_sized(t)
        if not self.solver.try_add(cons, self.cfg.insert_check_rlimit):
            return False
        node_inputs = []
        for t, v in zip(ins, picked):
            if v is None:
                self.values.append(_Value(t, param=True))
                v = len(self.values) - 1
            node_inputs.append(v)
        out_ids = []
        for t in outs:
            self.values.append(_Value(t, producer=len(self.nodes)))
            out_ids.append(len(self.values) - 1)
        self.nodes.append(_Node(op, node_inputs, out_ids))
        return True

    def backward(self, op: OpSpec, ranks: frozenset[int] | None = None, in_dtype: DType | None = None) -> bool:
        """Insert `op` before a placeholder; `ranks` and `in_dtype`, when given, limit the
        placeholder's rank and the op's first input dtype (a Cast bridge: see `_generate`).
        `no_target` tells afterwards whether no placeholder fitted (nothing was drawn)."""
        self.no_target = True
        if op.n_outputs() != 1:
            return False
        if in_dtype is not None:  # this instance's signatures only
            op.sigs = [s for s in op.sigs if s[0][0] == in_dtype]
        out_dtypes = {s[1][0] for s in op.sigs}
        if ranks is None:
            ranks = backward_ranks(type(op))
        cands = [
            v
            for v in self.placeholders()
            if self.values[v].tensor.dtype in out_dtypes and (ranks is None or self.values[v].tensor.rank in ranks)
        ]
        if not cands:
            return False
        self.no_target = False
        target = self.draw.choice("bwd.placeholder", cands)
        tt = self.values[target].tensor
        slots = op.infer_input_types(self.draw, (tt.dtype, tt.rank))
        if slots is None or not self.exportable(op, slots[0][0]):
            return False
        ins = [self.fresh_tensor(dt, r) for dt, r in slots]
        (out,) = op.type_transfer(ins)
        if out.rank != tt.rank or out.dtype != tt.dtype or not self.allowed(ins):
            return False
        cons = op.attr_domains() + list(op.requires(ins))
        cons += [eq(a, b) for a, b in zip(out.shape, tt.shape)]
        for t in ins + op.inner_tensors(ins):
            cons += self.well_sized(t)
        if not self.solver.try_add(cons, self.cfg.insert_check_rlimit):
            return False
        in_ids = []
        for i, t in enumerate(ins):
            self.values.append(_Value(t, param=i in op.param_inputs))
            in_ids.append(len(self.values) - 1)
        self.values[target].producer = len(self.nodes)
        self.values[target].param = False
        self.nodes.append(_Node(op, in_ids, [target]))
        return True

    # -- binning -------------------------------------------------------------------
    def binning(self, record: GenRecord) -> None:
        cfg, draw = self.cfg, self.draw
        items: list[tuple[BinChoice, z3.BoolRef]] = []

        def add(owner: str, attr: str, sym: z3.ArithRef, kind: AttrKind) -> None:
            b, c = draw_bin(draw, sym, kind, cfg.bins, weights_for(cfg.bin_weights, kind, cfg.bins))
            items.append((BinChoice(owner, attr, kind.value, b), c))

        for node in self.nodes:
            for name, sym in node.op.sym.items():
                if node.op.kinds[name] is not AttrKind.FREE:
                    add(repr(node.op), name, sym, node.op.kinds[name])
            ins = [self.values[v].tensor for v in node.inputs]
            for k, c in enumerate(node.op.bin_constraints(draw, ins, cfg.bins)):
                items.append((BinChoice(repr(node.op), f"special{k}", AttrKind.FREE.value, 0), c))
        for v in self.placeholders():
            for d, sym in enumerate(self.values[v].tensor.shape):
                if isinstance(sym, z3.ExprRef):
                    add(f"placeholder#{v}", f"dim{d}", sym, AttrKind.SIZE)

        # Algorithm 2 drops a random half of the bins until the rest fits; `BinFitter`
        # drops only what conflicts, in a drawn order.
        for b, _ in items:
            b.kept = False  # set again for each group the solver accepts
        order = draw.permutation("bin.order", len(items))
        try:
            BinFitter(self.solver, cfg.bin_check_rlimit, cfg.bin_work_budget).fit([items[i] for i in order])
        except SolverTimeout:
            pass  # bins not reached within the budget stay unkept
        record.bins.extend(b for b, _ in items)

    # -- concretization -------------------------------------------------------------
    def bounded_model(self) -> z3.ModelRef:
        """The solver's model, solved again with every attribute within +-ATTR_LIMIT where
        it took a value beyond (PyTorch cannot take it); other graphs keep their model."""
        model = self.solver.model()
        if not any(node.op.wide_attrs(model) for node in self.nodes):
            return model
        if not self.solver.try_add([c for node in self.nodes for c in node.op.attr_limits()]):
            raise GenerationError(f"no attribute values within +-{ATTR_LIMIT}")
        return self.solver.model()

    def to_graph(self, model: z3.ModelRef) -> GraphIR:
        order = self._topo_order()
        vid: dict[int, int] = {}
        types = []

        def number(v: int) -> int:
            if v not in vid:
                vid[v] = len(types)
                types.append(self.values[v].tensor.concrete(model))
            return vid[v]

        inputs, weights = [], []
        for v in self.placeholders():
            # Weight-like inputs (Conv kernels, ...) stay weights; the rest is drawn.
            is_weight = self.values[v].param or self.draw.coin("placeholder.weight", self.cfg.weight_prob)
            (weights if is_weight else inputs).append(v)
        if not inputs and weights:
            # A model needs at least one input to be worth compiling.
            free = [v for v in weights if not self.values[v].param] or weights
            first = free[0]
            weights.remove(first)
            inputs.append(first)
        inputs = [number(v) for v in inputs]
        weights = [number(v) for v in weights]
        insts = []
        consumed: set[int] = set()
        for k in order:
            node = self.nodes[k]
            ins = tuple(vid[v] for v in node.inputs)
            consumed.update(ins)
            outs = tuple(number(v) for v in node.outputs)
            insts.append(Inst(node.op.name(), node.op.concrete_attrs(model), ins, outs))
        outputs = [v for v in range(len(types)) if v not in consumed and v not in inputs and v not in weights]
        return GraphIR(types, inputs, weights, insts, outputs)

    def _topo_order(self) -> list[int]:
        # Backward insertion adds producers after their consumers; sort by
        # dependencies, breaking ties by insertion order (deterministic).
        done: set[int] = set()
        order: list[int] = []
        pending = list(range(len(self.nodes)))
        while pending:
            for k in pending:
                deps = [self.values[v].producer for v in self.nodes[k].inputs]
                if all(d is None or d in done for d in deps):
                    order.append(k)
                    done.add(k)
                    pending.remove(k)
                    break
            else:  # pragma: no cover - insertion never makes cycles
                raise GenerationError("cycle in generated graph")
        return order


def generate(
    cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, Replayed]] = (), lenient: bool = False
) -> Generated:
    """Make one graph of `cfg.nodes` operators; same (cfg, seed) gives the same graph.

    `prefix` draws are replayed first, strictly, or with `lenient` as `ChoiceSource` does
    (draws that no longer fit are drawn fresh: mutants).

    A graph proven to have no NaN/Inf-free values is made again from the next
    stream of the seed (the same `prefix` first), so no test is spent on it.
    """
    if not cfg.ops:
        raise ValueError("no operators to generate from")
    t0 = time.perf_counter()
    dropped: list[str] = []
    for stream in range(max(cfg.feasible_attempts, 1)):
        with fresh_context():
            gen = _generate(cfg, seed, prefix, stream, lenient)
        reason = prove_infeasible(gen.graph) if cfg.feasible_attempts else None
        if reason is None:
            gen.record.infeasible = dropped
            gen.record.gen_ms = (time.perf_counter() - t0) * 1000
            return gen
        dropped.append(reason)
    raise GenerationError(f"{len(dropped)} graphs proven to have no NaN/Inf-free values (last: {dropped[-1]})")


@functools.lru_cache(maxsize=64)
def _exportable_ops(ops: tuple[type[OpSpec], ...], opset: int) -> tuple[type[OpSpec], ...]:
    """The ops with a signature that exports at `opset`: the others could never be inserted.
    A function of the classes alone, asked for every graph: cached."""
    return tuple(o for o in ops if o.export_dtypes(opset))


def _generate(
    cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, Replayed]], stream: int, lenient: bool = False
) -> Generated:
    t0 = time.perf_counter()
    draw = ChoiceSource(seed, prefix, stream=stream, lenient=lenient, weights=cfg.draw_weights)
    record = GenRecord(seed=seed, stream=stream)
    # Lazy: no model is read until the insertions are done.
    solver = BudgetSolver(cfg.timeout_ms, draw.derive_seed("z3.seed"), cfg.check_rlimit, cfg.work_budget, lazy=True)
    # The opset first, so that it follows its weights: drawn after the graph, among the opsets
    # all of its ops allow, it would mostly be the newest (one op of ~140 needing 18 is enough).
    opsets = sorted(set(cfg.opsets))
    if len(opsets) > 1:  # nothing drawn without a choice: a seed's graph stays as it was
        weights = [cfg.opset_weights.get(o, 1.0) for o in opsets] if cfg.opset_weights else None
        opsets = [draw.choice("export.opset", opsets, weights)]
    b = _Builder(cfg, draw, solver, opsets[0])
    ops = list(_exportable_ops(tuple(cfg.ops), b.opset))
    if not ops:
        raise GenerationError(f"no operator exports at opset {b.opset}")
    weights = [cfg.op_weights.get(o.name(), 1.0) for o in ops] if cfg.op_weights else None
    first_weights = weights
    if cfg.first_op is not None and any(o.name() == cfg.first_op for o in ops):
        # all weight on it, as a bridge's op: the try still starts with an "op" draw
        first_weights = [float(o.name() == cfg.first_op) for o in ops]
    try:
        # The first op and direction are drawn before the first placeholder, whose
        # dtype then fits that op on the side it is inserted from.
        pending = (draw.choice("op", ops, first_weights), draw.coin("forward", cfg.forward_prob))
        side = 0 if pending[1] else 1
        sigs = [s for s in pending[0].sigs if b.exportable(pending[0], s[0][0])]
        dtypes = sorted({d for s in sigs for d in s[side]}, key=lambda d: d.value)
        # Forward, its rank also fits the op's first data input (Conv2d wants 4).
        ranks = range(len(_FIRST_RANK_WEIGHTS))
        if pending[1]:
            data = [i for i in range(pending[0].arity()) if i not in pending[0].param_inputs]
            ranks = [r for r in ranks if not data or r in pending[0].in_ranks[data[0]]] or ranks
        rank = draw.choice("init.rank", ranks, [_FIRST_RANK_WEIGHTS[r] for r in ranks])
        first = b.fresh_tensor(draw.choice("init.dtype", dtypes), rank)
        if not b.allowed([first]):
            first = b.fresh_tensor(first.dtype, 1)
        if not solver.try_add(b.well_sized(first)):
            raise GenerationError("first placeholder unsatisfiable")
        b.values.append(_Value(first))
        uid = 0
        # No bridges with forward_prob 0 (the op after a bridge goes forward), no Cast bridge
        # with 1 (it goes backward), none of ops the scheduler's weights leave out; nothing
        # drawn for them with bridge_prob 0.
        bridge_ops = [o for o in ops if not cfg.op_weights or cfg.op_weights.get(o.name(), 1.0) > 0]
        if cfg.forward_prob <= 0 or cfg.bridge_prob <= 0:
            bridge_ops = []
        # A pending bridge (`gen.reach`); then `follow`, the op it is for, in the try after a
        # bridge that went in.
        bridge: Bridge | None = None
        follow: type[OpSpec] | None = None
        while len(b.nodes) < cfg.nodes and record.tries < cfg.nodes * cfg.max_tries_per_node:
            record.tries += 1
            if bridge is not None or follow is not None:
                # Drawn with all weight on one op and direction, so every try still starts with
                # an "op" draw (mutation splits a graph's draws into tries there); a mutant's
                # replay may change them, and then the try is an ordinary one.
                want, way = (bridge.op, bridge.forward) if bridge is not None else (follow, True)
                cls = draw.choice("op", ops, [float(o is want) for o in ops])
                forward = draw.coin("forward", float(way))
                if cls is not want or forward != way:
                    bridge = None
                follow = None
            else:
                cls, forward = pending or (draw.choice("op", ops, weights), draw.coin("forward", cfg.forward_prob))
            pending = None
            op = cls(uid)
            checks = solver.checks
            try:
                if bridge is not None and bridge.rank is not None:
                    op.out_rank = bridge.rank  # Reshape takes it as its output rank
                    op.linear = True  # unit dims and merges only: no product equation for Z3
                    ok = b.forward(op, bridge.dtypes)
                elif bridge is not None:
                    ok = b.backward(op, bridge.ranks, bridge.dtype)
                else:
                    ok = b.forward(op) if forward else b.backward(op)
                    # No value (placeholder) of a dtype and rank it takes: the other way may
                    # have one (a value an op made; a placeholder of its output's rank, as
                    # AffineGrid's 4 or 5 from 3). Half the tries of fixed-rank ops ended here.
                    if not ok and b.no_target and 0 < cfg.forward_prob < 1:
                        forward = not forward
                        ok = b.forward(op) if forward else b.backward(op)
            except SolverTimeout:
                break  # keep what fits in the budget
            if bridge is not None:
                follow, bridge = (bridge.then if ok else None), None
            elif not ok and solver.checks == checks and bridge_ops and len(b.nodes) + 2 <= cfg.nodes:
                bridge = bridge_for(
                    cls,
                    {v.tensor.dtype for v in b.values},
                    [(b.values[v].tensor.dtype, b.values[v].tensor.rank) for v in b.placeholders()],
                    bridge_ops,
                    b.opset,
                    cfg.bridge_prob,
                    draw,
                    backward=cfg.forward_prob < 1,
                )
            record.try_ok += "1" if ok else "0"
            if ok:
                uid += 1
                record.ops.append(cls.name())
                record.directions.append("forward" if forward else "backward")
            else:
                record.rejected[cls.name()] = record.rejected.get(cls.name(), 0) + 1
        record.insert_draws = len(draw.record)
        solver.keep_models()
        if not b.nodes:
            raise GenerationError("no operator could be inserted")
        if cfg.binning and not solver.spent():
            b.binning(record)
        model = b.bounded_model()
        graph = b.to_graph(model)
        graph.opset = b.opset
        _plan_export(cfg, draw, graph, record)
    except SolverTimeout as e:
        raise GenerationError(f"solver budget spent ({e})") from None
    record.solver_checks = solver.checks
    record.solve_ms = solver.solve_s * 1000
    record.solver_work = solver.used
    record.gen_ms = (time.perf_counter() - t0) * 1000
    record.draws = draw.record
    return Generated(graph, record)


def _plan_export(cfg: GenConfig, draw: ChoiceSource, graph: GraphIR, record: GenRecord) -> None:
    """Draw whether the graph's inputs get symbolic dims in the ONNX signature, and which,
    then whether the backends compile it from their IR's text (nothing is drawn with a
    probability of 0); record the plan."""
    # Dims whose size the exporter must read (a kernel's, an adaptive pool's input) stay static.
    fixed = static_input_dims(graph, {o.name(): o for o in cfg.ops}.__getitem__) if cfg.dynamic_prob else set()
    dims = [(v, d) for v in graph.inputs for d in range(len(graph.types[v].shape)) if (v, d) not in fixed]
    if cfg.dynamic_prob > 0.0 and dims and draw.coin("export.dynamic", cfg.dynamic_prob):
        forced = draw.index("export.dynamic_dim", len(dims))
        graph.dynamic = [p for i, p in enumerate(dims) if i == forced or draw.coin("export.dim", DYNAMIC_DIM_PROB)]
    graph.roundtrip = cfg.roundtrip_prob > 0.0 and draw.coin("export.roundtrip", cfg.roundtrip_prob)
    record.opset, record.dynamic, record.roundtrip = graph.opset, bool(graph.dynamic), graph.roundtrip
