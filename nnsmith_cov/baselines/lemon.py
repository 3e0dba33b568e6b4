"""LEMON-style generation: a seed model mutated by shape-preserving mutations, several per test.

The mutations are LEMON's: layer addition (a layer whose output has its input's
type), removal, copy and switch of such layers, activation removal and
replacement, and the weight mutations it takes from DeepMutation: gaussian
fuzzing, neuron switch and neuron zeroing. Weights here are found by the value
search, not stored in the graph, so a weight mutation is written into the
graph as the computation that mutates the weight: W + N (N a fresh weight, the
noise), Roll(W) along the neuron dim, W with one neuron sliced off and padded
back as zeros. Compilers fold such constant computations away; they stay in
the ONNX model. Nothing changes a model's output types.

The scheduler's op weights choose the inserted and replacing operators (its
first op, `GenConfig.first_op`, is not used: a seed model's first op is the
seed's); the mutation kind is drawn uniformly (the scheduler has no arm for
it); the chain length is 1..max(1, nodes // 2).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.abstract.symbols import fresh_context
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.baselines import lemon_seeds
from nnsmith_cov.baselines.instantiate import accepts, data_inputs, find_op, instantiate
from nnsmith_cov.baselines.net import Net, Node
from nnsmith_cov.baselines.record import BaselineRecord
from nnsmith_cov.gen.generator import GenConfig, Generated, GenerationError

NAME = "lemon"
MUTATIONS = (
    "layer_addition",
    "layer_removal",
    "layer_copy",
    "layer_switch",
    "activation_removal",
    "activation_replacement",
    "gaussian_fuzz",
    "neuron_switch",
    "neuron_zeroing",
)
_OP_TRIES = 6  # operators tried for one layer addition


class _Mutator:
    def __init__(self, cfg: GenConfig, draw: ChoiceSource, net: Net, record: BaselineRecord) -> None:
        self.cfg, self.draw, self.net, self.record = cfg, draw, net, record
        self.uid = 0
        ops = list(cfg.ops)
        self.ops = ops
        self.weights = [cfg.op_weights.get(o.name(), 1.0) for o in ops] if cfg.op_weights else None

    def apply(self, kind: str) -> bool:
        return getattr(self, kind)()

    # -- sites ------------------------------------------------------------------------
    def layers(self, only: Sequence[str] | None = None) -> list[Node]:
        """Nodes with one data input (the rest weights) whose output has that input's type."""
        net = self.net
        out = []
        for n in net.nodes:
            if len(n.outputs) != 1 or not n.inputs or net.from_weights(n.inputs[0]):
                continue
            if not all(net.from_weights(v) for v in n.inputs[1:]):
                continue  # Add(h, x @ W) is a join of two paths, not a layer
            if net.types[n.inputs[0]] == net.types[n.outputs[0]] and (only is None or n.op in only):
                out.append(n)
        return out

    def removable(self, nodes: list[Node]) -> list[Node]:
        # keep at least one data-path node, and never make a model input a model output
        net = self.net
        outs = net.outputs or []
        data_nodes = [n for n in net.nodes if not all(net.from_weights(v) for v in n.inputs)]
        if len(data_nodes) < 2:
            return []
        return [n for n in nodes if not (n.inputs[0] in net.inputs and n.outputs[0] in outs)]

    def pick_op(self, names: Sequence[str]) -> type[OpSpec] | None:
        cands = [o for o in self.ops if o.name() in names]
        if not cands:
            return None
        w = None if self.weights is None else [self.weights[self.ops.index(o)] for o in cands]
        return self.draw.choice("lemon.op", cands, w)

    def weight_sites(self, min_dim0: int = 1) -> list[int]:
        """Weights (or mutated weights) that a data-path node reads, with a float dtype."""
        net = self.net
        out = []
        for v, t in net.types.items():
            if not t.dtype.is_float or not t.rank or t.shape[0] < min_dim0 or not net.from_weights(v):
                continue
            if any(not net.from_weights(n.outputs[0]) for n in net.consumers(v)):
                out.append(v)
        return out

    def _remove(self, node: Node) -> None:
        self.net.redirect(node.outputs[0], node.inputs[0])
        self.net.nodes.remove(node)

    # -- layer mutations ----------------------------------------------------------------
    def layer_addition(self) -> bool:
        net, draw = self.net, self.draw
        sites = [v for v, t in net.types.items() if t.dtype.is_float and t.rank and not net.from_weights(v)]
        if not sites:
            return False
        v = draw.choice("lemon.site", sites)
        t = net.types[v]
        unary = [o.name() for o in self.ops if len(data_inputs(o)) == 1 and data_inputs(o)[0] == 0]
        for _ in range(_OP_TRIES):
            cls = self.pick_op(unary)
            if cls is None:
                return False
            sigs = [s for s in cls.sigs if s[0][0] == t.dtype and s[1][0] == t.dtype]
            if not sigs or t.rank not in cls.in_ranks[0]:
                continue
            sig = draw.choice("lemon.sig", sigs)
            ranks = [t.rank] + [draw.choice("lemon.param_rank", r) for r in cls.in_ranks[1:]]
            given = [t] + [None] * (cls.arity() - 1)
            inst = instantiate(
                cls, self.uid, draw, sig[0], ranks, given, soft=False, preserve=True,
                max_elems=self.cfg.max_elems, excluded=self.cfg.excluded,
            )  # fmt: skip
            if inst is None or inst.out_types[0] != t or len(inst.out_types) != 1:
                continue
            self.uid += 1
            params = [net.add_input(pt, weight=True) for pt in inst.in_types[1:]]
            node = net.add(inst.op, inst.attrs, [v, *params], inst.out_types)
            net.redirect(v, node.outputs[0], skip=node)
            self.record.ops.append(inst.op)
            return True
        return False

    def layer_removal(self) -> bool:
        nodes = self.removable(self.layers())
        if not nodes:
            return False
        self._remove(self.draw.choice("lemon.layer", nodes))
        return True

    def layer_copy(self) -> bool:
        nodes = self.layers()
        if not nodes:
            return False
        n = self.draw.choice("lemon.layer", nodes)
        copy = self.net.add(n.op, dict(n.attrs), [n.outputs[0], *n.inputs[1:]], [self.net.types[n.outputs[0]]])
        self.net.redirect(n.outputs[0], copy.outputs[0], skip=copy)
        return True

    def layer_switch(self) -> bool:
        nodes = self.layers()
        types = self.net.types
        pairs = [
            (a, b)
            for i, a in enumerate(nodes)
            for b in nodes[i + 1 :]
            if types[a.inputs[0]] == types[b.inputs[0]] and (a.op, a.attrs) != (b.op, b.attrs)
        ]
        if not pairs:
            return False
        a, b = self.draw.choice("lemon.pair", pairs)
        a.op, b.op = b.op, a.op
        a.attrs, b.attrs = b.attrs, a.attrs
        a.inputs, b.inputs = [a.inputs[0], *b.inputs[1:]], [b.inputs[0], *a.inputs[1:]]
        return True

    def activation_removal(self) -> bool:
        nodes = self.removable(self.layers(lemon_seeds.ACTIVATIONS))
        if not nodes:
            return False
        self._remove(self.draw.choice("lemon.activation", nodes))
        return True

    def activation_replacement(self) -> bool:
        nodes = self.layers(lemon_seeds.ACTIVATIONS)
        if not nodes:
            return False
        n = self.draw.choice("lemon.activation", nodes)
        dtype = self.net.types[n.outputs[0]].dtype
        names = [a for a in lemon_seeds.ACTIVATIONS if a != n.op and (o := find_op(self.ops, a)) and accepts(o, dtype)]
        cls = self.pick_op(names)
        if cls is None:
            return False
        n.op = cls.name()
        self.record.ops.append(n.op)
        return True

    # -- weight mutations ------------------------------------------------------------------
    def _weight_op(self, v: int, op: str, attrs: dict, extra: list[int], out: TensorType) -> int:
        node = self.net.add(op, attrs, [v, *extra], [out])
        return node.outputs[0]

    def _usable(self, *names: str) -> Callable[[int], bool]:
        return lambda v: all((o := find_op(self.ops, n)) and accepts(o, self.net.types[v].dtype) for n in names)

    def gaussian_fuzz(self) -> bool:
        sites = [v for v in self.weight_sites() if self._usable("Add")(v)]
        if not sites:
            return False
        v = self.draw.choice("lemon.weight", sites)
        t = self.net.types[v]
        noise = self.net.add_input(t, weight=True)
        w = self._weight_op(v, "Add", {}, [noise], t)
        self._rewire_weight(v, w)
        return True

    def neuron_switch(self) -> bool:
        sites = [v for v in self.weight_sites(2) if self._usable("Roll")(v)]
        if not sites:
            return False
        v = self.draw.choice("lemon.weight", sites)
        t = self.net.types[v]
        shift = self.draw.integer("lemon.shift", 1, t.shape[0] - 1)
        self._rewire_weight(v, self._weight_op(v, "Roll", {"dims": [0], "shift0": shift}, [], t))
        return True

    def neuron_zeroing(self) -> bool:
        sites = [v for v in self.weight_sites(2) if self._usable("Slice", "PadConstant")(v)]
        if not sites:
            return False
        v = self.draw.choice("lemon.weight", sites)
        t = self.net.types[v]
        first = self.draw.coin("lemon.zero_first")
        d0 = t.shape[0]
        cut = TensorType((d0 - 1, *t.shape[1:]), t.dtype)
        sl = {"axes": [0], "start_from": ["front"], "end_from": ["front"], "steps": [1]}
        sl |= {"start0": 1, "end0": d0} if first else {"start0": 0, "end0": d0 - 1}
        s = self._weight_op(v, "Slice", sl, [], cut)
        pad: dict = {"k": t.rank, "value": 0}
        for i in range(t.rank):  # i counts from the last dim; dim 0 is i = rank - 1
            pad[f"l{i}"] = int(first and i == t.rank - 1)
            pad[f"r{i}"] = int(not first and i == t.rank - 1)
        self._rewire_weight(v, self._weight_op(s, "PadConstant", pad, [], t))
        return True

    def _rewire_weight(self, old: int, new: int) -> None:
        """Data-path readers of `old` read `new`; the mutation's own nodes keep reading `old`."""
        net = self.net
        for n in net.nodes:
            if not net.from_weights(n.outputs[0]):
                n.inputs = [new if v == old else v for v in n.inputs]


def seed_model(cfg: GenConfig, draw: ChoiceSource) -> tuple[str, Net]:
    """The seed model a test starts from (the test's first draws)."""
    names = lemon_seeds.available(cfg.ops)
    if not names:
        raise GenerationError("no LEMON seed model (cnn, mlp, rnn) can be built from the allowed operators")
    name = draw.choice("lemon.seed_model", names)
    return name, lemon_seeds.build(name, draw, cfg.ops)


def generate(cfg: GenConfig, seed: int, prefix: Sequence[tuple[str, int | float]] = ()) -> Generated:
    """A seed model with a chain of 1..max(1, nodes // 2) shape-preserving mutations."""
    t0 = time.perf_counter()
    draw = ChoiceSource(seed, prefix)
    record = BaselineRecord(seed=seed, generator=NAME)
    record.origin, net = seed_model(cfg, draw)
    want = draw.integer("lemon.n_mutations", 1, max(1, cfg.nodes // 2))
    with fresh_context():
        m = _Mutator(cfg, draw, net, record)
        while len(record.steps) < want and record.tries < want * 10:
            record.tries += 1
            kind = draw.choice("lemon.mutation", MUTATIONS)
            if m.apply(kind):
                record.steps.append(kind)
            else:
                record.rejected[kind] = record.rejected.get(kind, 0) + 1
    graph = net.to_graph()
    record.gen_ms = (time.perf_counter() - t0) * 1000
    record.draws = draw.record
    return Generated(graph, record)
