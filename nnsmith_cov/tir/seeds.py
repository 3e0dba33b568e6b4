"""The seed PrimFuncs: TIR as our graphs' operators legalize to (TOPI compute definitions, the
same ones Relax's LegalizeOps emits), plus a few written in TVMScript. Every seed is lowered
to loop form (no schedulable blocks), where the mutators and the optional passes apply."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

# Loop form: what the default TIR pipeline does to blocks before it flattens buffers.
_TO_LOOPS = (
    "LowerInitBlock",
    "PlanAndUpdateBufferAllocationLocation",
    "ConvertBlocksToOpaque",
    "CompactBufferAllocation",
    "LowerOpaqueBlock",
)

_HAND_WRITTEN = {
    "script.clamp_sum": """
@T.prim_func(s_tir=True)
def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i in range(4):
        B[i] = T.float32(0.0)
        for j in range(8):
            B[i] = B[i] + T.max(T.min(A[i, j], T.float32(1.0)), T.float32(-1.0))
""",
    "script.int_mix": """
@T.prim_func(s_tir=True)
def main(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    T.func_attr({"tirx.noalias": True})
    for i in range(16):
        if i % 3 == 0:
            B[i] = A[i] * 7 + A[15 - i]
        else:
            B[i] = T.max(A[i], A[(i + 5) % 16]) - 3
""",
    "script.stencil": """
@T.prim_func(s_tir=True)
def main(A: T.Buffer((10, 10), "float32"), B: T.Buffer((8, 8), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, j in T.grid(8, 8):
        B[i, j] = (A[i, j + 1] + A[i + 2, j + 1] + A[i + 1, j] + A[i + 1, j + 2]) * T.float32(0.25)
""",
}


def _topi_seeds() -> dict[str, Callable[[], list[Any]]]:
    """Tensor expressions of operators the generator uses, by the names their seeds get."""
    from tvm import te, topi

    def ph(shape: tuple[int, ...], dtype: str = "float32", name: str = "A") -> Any:
        return te.placeholder(shape, dtype, name=name)

    def matmul_relu() -> list[Any]:
        a, b = ph((4, 6)), ph((6, 5), name="B")
        return [a, b, topi.nn.relu(topi.matmul(a, b))]

    def conv2d() -> list[Any]:
        x, w = ph((1, 3, 8, 8)), ph((4, 3, 3, 3), name="W")
        return [x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1)]

    def softmax() -> list[Any]:
        x = ph((3, 7))
        return [x, topi.nn.softmax(x, axis=-1)]

    def max_pool() -> list[Any]:
        x = ph((1, 2, 8, 8))
        return [x, topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max")]

    def broadcast_add() -> list[Any]:
        a, b = ph((3, 1, 5)), ph((4, 1), name="B")
        return [a, b, topi.add(a, b)]

    def reduce_sum() -> list[Any]:
        x = ph((5, 6, 3))
        return [x, topi.sum(x, axis=1)]

    def transpose_cast() -> list[Any]:
        x = ph((2, 3, 4))
        return [x, topi.cast(topi.transpose(x, (2, 0, 1)), "float16")]

    def int_where() -> list[Any]:
        a, b = ph((6, 4), "int32"), ph((6, 4), "int32", name="B")
        return [a, b, topi.where(topi.greater(a, b), topi.subtract(a, b), topi.multiply(a, b))]

    return {
        "topi.matmul_relu": matmul_relu,
        "topi.conv2d": conv2d,
        "topi.softmax": softmax,
        "topi.max_pool": max_pool,
        "topi.broadcast_add": broadcast_add,
        "topi.reduce_sum": reduce_sum,
        "topi.transpose_cast": transpose_cast,
        "topi.int_where": int_where,
    }


def to_loops(func: Any) -> Any:
    """`func` with its blocks lowered to plain loops and allocations."""
    import tvm
    from tvm import s_tir

    seq = tvm.transform.Sequential([getattr(s_tir.transform, name)() for name in _TO_LOOPS])
    return seq(tvm.IRModule({"main": func}))["main"]


def parse(script: str) -> Any:
    """A PrimFunc from TVMScript text (as the corpus stores it)."""
    import tvm
    from tvm import tirx

    parsed = tvm.script.from_source(script)
    if isinstance(parsed, tvm.IRModule):
        parsed = parsed["main"]
    if not isinstance(parsed, tirx.PrimFunc):
        raise ValueError("the script holds no PrimFunc")
    return parsed


def names() -> list[str]:
    """The seeds' names, in the fixed order the pool starts from."""
    return [*_topi_seeds(), *_HAND_WRITTEN]


@functools.cache
def seed(name: str) -> Any:
    """The seed PrimFunc called `name`, in loop form."""
    from tvm import te

    if name in _HAND_WRITTEN:
        return to_loops(parse(_HAND_WRITTEN[name]))
    make = _topi_seeds().get(name)
    if make is None:
        raise KeyError(f"unknown Tzer seed {name!r}")
    return to_loops(te.create_prim_func(make()))
