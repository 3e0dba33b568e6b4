"""LEMON's starting points, built in code: a small CNN, an MLP and an RNN-like network.

LEMON mutates trained Keras models; here the seed models are made from the
operator specs with sizes drawn from the test's seed, and their weights, like
every weight in this harness, come from the value search of that seed. Each
model needs its operators in the allowed set (float32), or it is not offered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nnsmith_cov.abstract.choice import ChoiceSource
from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import OpSpec
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.baselines.instantiate import find_op
from nnsmith_cov.baselines.net import Net

F32 = DType.float32
# Unary activations: shape and dtype preserving, no attributes, finite on finite inputs.
ACTIVATIONS = ("Relu", "LeakyRelu", "Gelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softsign", "Sigmoid", "Tanh")


def allowed(ops: Sequence[type[OpSpec]], name: str) -> bool:
    """The op is in the allowed set with an all-float32 signature (what the seed models use)."""
    op = find_op(ops, name)
    return op is not None and any(all(d == F32 for d in s[0]) for s in op.sigs)


def _act(draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> str | None:
    acts = [a for a in ACTIVATIONS if allowed(ops, a)]
    return draw.choice("lemon.seed_act", acts) if acts else None


def _w(net: Net, *shape: int) -> int:
    return net.add_input(TensorType(tuple(shape), F32), weight=True)


def _linear(net: Net, x: int, out: int) -> int:
    t = net.types[x]
    w, b = _w(net, out, t.shape[-1]), _w(net, out)
    return net.add("Linear", {}, [x, w, b], [TensorType((*t.shape[:-1], out), F32)]).outputs[0]


def _unary(net: Net, op: str | None, x: int, attrs: dict | None = None) -> int:
    return x if op is None else net.add(op, attrs or {}, [x], [net.types[x]]).outputs[0]


def _classifier(net: Net, x: int, draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> Net:
    """The head the CNN and the MLP share: Linear to a drawn number of classes, then
    Softmax where allowed; `x` becomes the net's one output."""
    x = _linear(net, x, draw.integer("lemon.classes", 2, 10))
    if allowed(ops, "Softmax"):
        x = _unary(net, "Softmax", x, {"dim": 1})
    net.outputs = [x]
    return net


def cnn(draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> Net:
    """Conv2d (same padding) -> act -> MaxPool2d 2x2 -> Conv2d -> act -> Flatten -> Linear -> Softmax."""
    net = Net()
    b, h, w = draw.integer("lemon.batch", 1, 2), draw.integer("lemon.height", 6, 12), draw.integer("lemon.width", 6, 12)
    c0, c1, c2 = 3, draw.integer("lemon.channels", 2, 6), draw.integer("lemon.channels", 2, 6)
    x = net.add_input(TensorType((b, c0, h, w), F32))
    act = _act(draw, ops)
    for c_in, c_out, pad in ((c0, c1, 1), (c1, c2, draw.integer("lemon.pad", 0, 1))):
        k, bias = _w(net, c_out, c_in, 3, 3), _w(net, c_out)
        h, w = h + 2 * pad - 2, w + 2 * pad - 2
        attrs = {"groups": 1, "stride0": 1, "stride1": 1, "padding0": pad, "padding1": pad, "dilation0": 1}
        attrs["dilation1"] = 1
        x = net.add("Conv2d", attrs, [x, k, bias], [TensorType((b, c_out, h, w), F32)]).outputs[0]
        x = _unary(net, act, x)
        if c_in == c0 and allowed(ops, "MaxPool2d") and h >= 2 and w >= 2:
            h, w = h // 2, w // 2
            pool = {
                f"{a}{i}": v for a, v in (("kernel", 2), ("stride", 2), ("padding", 0), ("dilation", 1)) for i in (0, 1)
            }
            x = net.add("MaxPool2d", pool | {"ceil": False}, [x], [TensorType((b, c_out, h, w), F32)]).outputs[0]
    x = net.add("Flatten", {"start": 1, "end": 3}, [x], [TensorType((b, c2 * h * w), F32)]).outputs[0]
    return _classifier(net, x, draw, ops)


def mlp(draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> Net:
    """Linear -> act -> Linear -> act -> Linear (-> Softmax)."""
    net = Net()
    b = draw.integer("lemon.batch", 1, 4)
    x = net.add_input(TensorType((b, draw.integer("lemon.features", 4, 32)), F32))
    for _ in range(2):
        x = _unary(net, _act(draw, ops), _linear(net, x, draw.integer("lemon.hidden", 4, 32)))
    return _classifier(net, x, draw, ops)


def rnn(draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> Net:
    """An Elman-style cell unrolled over T steps, weights shared between steps:
    h' = Tanh(x_t @ Wx + h @ Wh + b), gated by Sigmoid(x_t @ Wz) where Mul is allowed."""
    net = Net()
    b, f, hid = (
        draw.integer("lemon.batch", 1, 4),
        draw.integer("lemon.features", 4, 16),
        draw.integer("lemon.hidden", 4, 16),
    )
    steps = draw.integer("lemon.steps", 2, 4)
    xs = [net.add_input(TensorType((b, f), F32)) for _ in range(steps)]
    wx, wh, bias, wz = _w(net, f, hid), _w(net, hid, hid), _w(net, hid), _w(net, f, hid)
    h = _w(net, b, hid)  # the initial state, learned like any weight
    bh = TensorType((b, hid), F32)
    gated = allowed(ops, "Mul")
    for x in xs:
        a = net.add("MatMul", {}, [x, wx], [bh]).outputs[0]
        r = net.add("MatMul", {}, [h, wh], [bh]).outputs[0]
        s = net.add("Add", {}, [a, r], [bh]).outputs[0]
        s = net.add("Add", {}, [s, bias], [bh]).outputs[0]
        h = net.add("Tanh", {}, [s], [bh]).outputs[0]
        if gated:
            z = net.add("MatMul", {}, [x, wz], [bh]).outputs[0]
            z = net.add("Sigmoid", {}, [z], [bh]).outputs[0]
            h = net.add("Mul", {}, [z, h], [bh]).outputs[0]
    net.outputs = [h]
    return net


SEED_MODELS: dict[str, tuple[Callable[[ChoiceSource, Sequence[type[OpSpec]]], Net], tuple[str, ...]]] = {
    "cnn": (cnn, ("Conv2d", "Flatten", "Linear")),
    "mlp": (mlp, ("Linear",)),
    "rnn": (rnn, ("MatMul", "Add", "Tanh", "Sigmoid")),
}


def available(ops: Sequence[type[OpSpec]]) -> list[str]:
    """The seed models every required operator of which is allowed (float32)."""
    return [name for name, (_, need) in SEED_MODELS.items() if all(allowed(ops, n) for n in need)]


def build(name: str, draw: ChoiceSource, ops: Sequence[type[OpSpec]]) -> Net:
    return SEED_MODELS[name][0](draw, ops)
