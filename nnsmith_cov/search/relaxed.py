"""Executing a graph for the value search: proxy derivatives the specs do not carry.

PyTorch computes no gradient for an integer or boolean tensor, so a path such
as `bool -> Cast -> Log` or `Greater -> Where` is a wall for plain autograd:
the values behind it cannot be moved by any loss in front of it. With proxy
derivatives on, the runner gives every integer or boolean value that can reach
a float value a *shadow*: a float64 tensor holding the same numbers whose
gradient is a proxy, made with `numeric.attach` (a straight-through estimator):

- leaves: the shadow follows the float master the search optimizes;
- float -> integer casts: slope 1 (truncation's trend); -> bool (x != 0):
  slope ALPHA * sign(x), which moves x away from 0 to make it True;
- comparisons: Greater(x, y) and GreaterEqual have slope ALPHA in x - y, Less
  and LessEqual in y - x, Equal in -|x - y|;
- BitwiseNot: slope -1 (~x = -1 - x);
- Not, And, Or, Xor: the derivatives of their arithmetic forms 1 - a, a + b,
  a + b, a(1 - 2b) + b(1 - 2a), evaluated at the boolean values (a, b are
  never multiplied, so a False operand still gets a gradient);
- Where(c, x, y): d/dc = x - y, as for c * x + (1 - c) * y;
- ArgMax/ArgMin: the gradient of a soft arg-max (softmax-weighted mean
  index over the axis, with the axis' values standardized);
- integer -> float casts and Where's float output pass the shadow's gradient on;
- every other op over integers (arithmetic, reductions, layout, gathers) runs
  once more on the shadows, so its own derivative carries them.

Float ops whose true derivative vanishes on part of their input and whose
specs have no proxy of their own also get one here (`FLOAT_PROXIES`): Exp,
Sigmoid, Tanh, Erf, Elu, Selu, Gelu and Softplus take slope ALPHA where their derivative
is not positive (saturated to 0, or Gelu's dip); Softmax entries that
underflowed to 0 follow ALPHA times the gradient of log-softmax; ReduceMax,
ReduceMin, Max and Min pass ALPHA to the elements that are not the extreme; a
ReduceProd that underflowed to 0 follows the sum of its factors' log-magnitudes.

Without proxy derivatives nothing of this runs: integers and booleans then
get no gradient at all, as in plain autograd.

Search precision (`Runner.widen`): PyTorch's float16 convolutions run 1.5-5
times slower on CPU than float32 ones (forward and backward), its float16
MatMul and Linear 8-15 times (a [48, 11, 39] x [39, 97] Linear: 3.3 ms against
0.35 ms, forward and backward), so while searching the runner computes them in
float32 and rounds the result to float16 (an overflow still becomes Inf). The
search then checks its values once more at the graph's own precision, which
alone gives the oracle. (Other float16 ops cost about what float32 ones do.)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from nnsmith_cov.abstract import numeric as num
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import Attrs, OpSpec
from nnsmith_cov.abstract.reduce_meta import ArgReduce
from nnsmith_cov.gen.graph_ir import GraphIR
from nnsmith_cov.materialize.torch_module import GraphModule
from nnsmith_cov.ops import op_by_name

Shadows = dict[int, torch.Tensor]

# Float ops whose true derivative vanishes where they saturate (or dips against their
# trend), and which carry no proxy of their own in their spec: the search runs these.
# (Max/Min take integers too: those run on the real values, with shadows as usual.)
_RISING = {
    name: num.rising(fn)
    for name, fn in {
        "Exp": torch.exp,
        "Sigmoid": torch.sigmoid,
        "Tanh": torch.tanh,
        "Erf": torch.erf,
        "Elu": F.elu,
        "Selu": F.selu,
        "Gelu": F.gelu,
        "Softplus": F.softplus,
    }.items()
}


def _extreme(name: str):
    """ReduceMax/ReduceMin pass gradient to the extreme element only, so a loss on the
    result moves one element per step; the proxy adds ALPHA to every element."""
    forward = op_by_name(name).forward

    def apply(a: Attrs, x: torch.Tensor) -> torch.Tensor:
        out = forward(a, x)
        if x.dim() == 0:
            return out
        dims = tuple(range(x.dim())) if a.axes is None else tuple(a.axes)
        # Only the sum's gradient (1 per element) matters, not its value: no widening.
        return num.attach(out, num.ALPHA * x.sum(dims, keepdim=bool(a.keepdim)).reshape(out.shape))

    return apply


def _product(a: Attrs, x: torch.Tensor) -> torch.Tensor:
    """ReduceProd whose product underflowed to 0 (no factor being 0) has a true gradient
    of 0 in every factor (prod / x_i); the proxy follows the product's sign times the
    sum of log|x_i| instead, whose gradient (sign / x_i, scaled by ALPHA) moves each factor
    as the product's magnitude needs."""
    out = op_by_name("ReduceProd").forward(a, x)
    if not x.is_floating_point() or bool(out != 0) or bool((x == 0).any()):
        return out
    sign = torch.where(x.detach() < 0, -1.0, 1.0).prod().double()
    return num.attach(out, num.ALPHA * sign * torch.log(x.double().abs()).sum())


def _pairwise(fn):
    """Max/Min of two tensors: the smaller (larger) side gets ALPHA instead of 0."""

    def apply(a: Attrs, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = fn(x, y)
        return num.attach(out, num.ALPHA * (x + y))

    return apply


def _unary(fn):
    return lambda a, x: fn(x)


FLOAT_PROXIES = {name: _unary(fn) for name, fn in _RISING.items()}
FLOAT_PROXIES["Softmax"] = lambda a, x: num.softmax(x, a.dim)
FLOAT_PROXIES |= {name: _extreme(name) for name in ("ReduceMax", "ReduceMin")}
FLOAT_PROXIES |= {"Max": _pairwise(torch.maximum), "Min": _pairwise(torch.minimum)}
FLOAT_PROXIES["ReduceProd"] = _product


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point()


class Runner:
    """Runs instructions one by one on real values; with `proxy`, keeps shadows too."""

    def __init__(self, graph: GraphIR, start: Mapping[int, np.ndarray], proxy: bool) -> None:
        self.graph = graph
        self.proxy = proxy
        self.module = GraphModule(graph, op_by_name, start, proxy=proxy)
        self.useful = self._useful() if proxy else set()
        f16 = lambda inst: all(graph.types[v].dtype is DType.float16 for v in (*inst.inputs, *inst.outputs))
        slow = lambda inst: op_by_name(inst.op).slow_in_f16  # noqa: E731
        self.wide = frozenset(k for k, inst in enumerate(graph.insts) if slow(inst) and f16(inst))
        self.widen = bool(self.wide)  # those run in float32 until set False

    def _useful(self) -> set[int]:
        """Integer and boolean values whose shadows can reach a float value (or a domain
        loss); shadows of the others would carry gradient nowhere, so none are made."""
        useful: set[int] = set()
        for inst in reversed(self.graph.insts):
            feeds = any(self.graph.types[o].dtype.is_float or o in useful for o in inst.outputs)
            skip = op_by_name(inst.op).index_inputs
            for i, v in enumerate(inst.inputs):
                if feeds and i not in skip and not self.graph.types[v].dtype.is_float:
                    useful.add(v)
        return useful

    def spec(self, k: int) -> type[OpSpec]:
        return self.module.spec(k)

    def attrs(self, k: int) -> Attrs:
        return self.module.attrs(k)

    def run_inst(self, k: int, env: dict[int, torch.Tensor], shadows: Shadows) -> list[torch.Tensor]:
        """Execute instruction k: its outputs go into `env` (and their shadows into `shadows`)."""
        inst = self.graph.insts[k]
        if self.widen and k in self.wide:  # float inputs and outputs only: no shadows cross it
            out = self.module.fn(k)(self.attrs(k), *(env[v].float() for v in inst.inputs)).half()
            env[inst.outputs[0]] = out
            return [out]
        search_forward = self.spec(k).search_forward
        if search_forward is not None and torch.is_grad_enabled():  # float inputs and output only
            out = env[inst.outputs[0]] = search_forward(self.attrs(k), *(env[v] for v in inst.inputs))
            return [out]
        if not self.proxy or not torch.is_grad_enabled():
            return self.module.run_inst(k, env)
        xs = [env[v] for v in inst.inputs]
        float_proxy = FLOAT_PROXIES.get(inst.op)
        if float_proxy is not None and any(_is_float(x) and x.requires_grad for x in xs):
            outs = [float_proxy(self.attrs(k), *xs)]
            env[inst.outputs[0]] = outs[0]
        else:
            outs = self.module.run_inst(k, env)
        ss = [shadows.get(v) for v in inst.inputs]
        crossing = any(s is not None for s in ss) or (
            any(not _is_float(o) for o in outs) and any(_is_float(x) and x.requires_grad for x in xs)
        )
        if not crossing:
            return outs
        if not any(_is_float(o) or v in self.useful for o, v in zip(outs, inst.outputs)):
            return outs
        new = self._relax(self.spec(k), self.attrs(k), xs, ss, outs)
        for j, (v, t) in enumerate(zip(inst.outputs, new)):
            if t is None or not (_is_float(outs[j]) or v in self.useful):
                continue
            if _is_float(outs[j]):
                outs[j] = env[v] = t
            else:
                shadows[v] = t
        return outs

    def differentiable_inputs(self, k: int, env: Mapping[int, torch.Tensor], shadows: Shadows) -> list[torch.Tensor]:
        """Instruction k's inputs for its domain losses: integers and booleans as their shadows."""
        vs = self.graph.insts[k].inputs
        return [shadows[v] if v in shadows else env[v] for v in vs]

    # -- the proxy rules -------------------------------------------------------------
    def _relax(
        self,
        spec: type[OpSpec],
        a: Attrs,
        xs: list[torch.Tensor],
        ss: list[torch.Tensor | None],
        outs: list[torch.Tensor],
    ) -> list[torch.Tensor | None]:
        """For each output: a float output with extra gradient paths, a shadow, or None."""
        grads = [_grad_view(x, s) for x, s in zip(xs, ss)]
        name = spec.name()
        if name.startswith("Cast") or name == "TypeAs":  # (TypeAs: a cast to its second input's dtype)
            return [_cast(xs[0], grads[0], outs[0])]
        if name in _COMPARISONS:
            return [_compare(name, xs, grads, outs[0])]
        if name == "BitwiseNot":  # ~x = -1 - x
            return [None if grads[0] is None else num.attach(outs[0], -grads[0])]
        if name in ("Not", "And", "Or", "Xor"):
            return [_logic(name, xs, grads, outs[0])]
        if name == "Where":
            return [_where(xs, grads, outs[0])]
        if issubclass(spec, ArgReduce):
            return [_arg_reduce(spec, a, grads[0], outs[0])]
        return _rerun(spec, a, xs, ss, outs, spec.index_inputs)


def _grad_view(x: torch.Tensor, shadow: torch.Tensor | None) -> torch.Tensor | None:
    """A float64 tensor with x's values that carries gradient, or None if nothing upstream moves."""
    if shadow is not None:
        return shadow
    if _is_float(x) and x.requires_grad:
        return x.double()
    return None


def _value(x: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
    return g if g is not None else x.detach().double()


def _cast(x: torch.Tensor, g: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor | None:
    if g is None:
        return None
    if out.dtype == torch.bool and x.dtype != torch.bool:
        # x != 0: moving x away from 0 (its own side; up from 0 itself) makes it True.
        side = torch.where(x.detach() >= 0, 1.0, -1.0).double()
        return num.attach(out, num.ALPHA * side * g)
    return num.attach(out, g)


# What each comparison's proxy follows: a surrogate that rises as the comparison turns True.
_COMPARISONS = {
    "Greater": lambda x, y: x - y,
    "GreaterEqual": lambda x, y: x - y,
    "Less": lambda x, y: y - x,
    "LessEqual": lambda x, y: y - x,
    "Equal": lambda x, y: -(x - y).abs(),
}


def _compare(name: str, xs: list[torch.Tensor], grads: list[torch.Tensor | None], out: torch.Tensor):
    if all(g is None for g in grads):
        return None
    x, y = (_value(t, g) for t, g in zip(xs, grads))
    return num.attach(out, num.ALPHA * _COMPARISONS[name](x, y))


def _logic(name: str, xs: list[torch.Tensor], grads: list[torch.Tensor | None], out: torch.Tensor):
    if all(g is None for g in grads):
        return None
    if name == "Not":
        return num.attach(out, -grads[0])
    a, b = (_value(t, g) for t, g in zip(xs, grads))
    if name in ("And", "Or"):
        return num.attach(out, a + b)
    # Xor: d/da = 1 - 2b, d/db = 1 - 2a at the current values.
    fa, fb = xs[0].detach().double(), xs[1].detach().double()
    return num.attach(out, a * (1 - 2 * fb) + b * (1 - 2 * fa))


def _where(xs: list[torch.Tensor], grads: list[torch.Tensor | None], out: torch.Tensor):
    c, x, y = xs
    gc, gx, gy = grads
    if _is_float(out):
        if gc is None:
            return None  # x and y already carry their own gradients through torch.where
        return num.attach(out, gc * (x.detach().double() - y.detach().double()))
    if all(g is None for g in grads):
        return None
    branches = torch.where(c, _value(x, gx), _value(y, gy))
    if gc is not None:
        branches = branches + gc * (x.detach().double() - y.detach().double())
    return num.attach(out, branches)


def _arg_reduce(spec: type[ArgReduce], a: Attrs, g: torch.Tensor | None, out: torch.Tensor):
    if g is None or g.dim() == 0:
        return None
    t = g.reshape(-1) if a.axis is None else g
    axis = 0 if a.axis is None else a.axis
    n = t.shape[axis]
    if n == 1:
        return None
    z = (t - t.mean(axis, keepdim=True)) / (t.detach().std(axis, keepdim=True) + 1e-6)
    if spec.fn is torch.argmin:
        z = -z
    shape = [1] * t.dim()
    shape[axis] = n
    index = torch.arange(n, dtype=torch.float64).reshape(shape)
    soft = (torch.softmax(z, axis) * index).sum(axis, keepdim=bool(a.keepdim) and a.axis is not None)
    return num.attach(out, soft.reshape(out.shape))


def _rerun(
    spec: type[OpSpec],
    a: Attrs,
    xs: list[torch.Tensor],
    ss: list[torch.Tensor | None],
    outs: list[torch.Tensor],
    index_inputs: tuple[int, ...],
) -> list[torch.Tensor | None]:
    """Run the op once more with integer and boolean inputs replaced by their shadows."""
    if all(s is None for i, s in enumerate(ss) if i not in index_inputs):
        return [None] * len(outs)
    args = []
    for i, (x, s) in enumerate(zip(xs, ss)):
        if i in index_inputs or _is_float(x):
            args.append(x)
        else:
            args.append(s if s is not None else x.detach().double())
    res = FLOAT_PROXIES.get(spec.name(), spec.forward)(a, *args)
    res = list(res) if isinstance(res, tuple | list) else [res]
    new: list[torch.Tensor | None] = []
    for o, r in zip(outs, res):
        keep = not _is_float(o) and _is_float(r) and r.requires_grad and r.shape == o.shape
        new.append(num.attach(o, r) if keep else None)
    return new
