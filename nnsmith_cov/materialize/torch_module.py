"""Turn a GraphIR into a runnable torch.nn.Module (weights as parameters)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.op import Attrs, OpSpec
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.gen.graph_ir import GraphIR


def to_tensor(a: np.ndarray) -> torch.Tensor:
    # np.array, not ascontiguousarray: the latter turns 0-d arrays into 1-d ones.
    return torch.from_numpy(np.array(a))


def input_tensors(graph: GraphIR, values: Mapping[int, np.ndarray]) -> tuple[torch.Tensor, ...]:
    """The model inputs, in `forward`'s order, from values keyed by value id."""
    return tuple(to_tensor(values[v]) for v in graph.inputs)


def weight_name(v: int) -> str:
    return f"w{v}"


def input_name(v: int) -> str:
    return f"i{v}"


def output_name(v: int) -> str:
    return f"o{v}"


class GraphModule(torch.nn.Module):
    """Executes the instructions in order; `forward` takes the model inputs.

    With `expose_all`, every value is returned (inputs and weights excepted),
    so each intermediate can be checked against its GraphIR type. With
    `proxy`, ops run with proxy derivatives (same values, other gradients).
    """

    def __init__(
        self,
        graph: GraphIR,
        resolve: Callable[[str], type[OpSpec]],
        weights: Mapping[int, np.ndarray],
        expose_all: bool = False,
        proxy: bool = False,
    ) -> None:
        super().__init__()
        self.graph = graph
        self._specs = [resolve(inst.op) for inst in graph.insts]
        self._fns = [spec.forward_proxy if proxy else spec.forward for spec in self._specs]
        self._attrs = [graph.attrs(inst) for inst in graph.insts]
        for v in graph.weights:
            t = to_tensor(weights[v])
            # Values are fixed here; the value search optimizes its own copies.
            self.register_parameter(weight_name(v), torch.nn.Parameter(t, requires_grad=False))
        defined_outs = [v for inst in graph.insts for v in inst.outputs]
        self.returned = defined_outs if expose_all else list(graph.outputs)

    def run(self, *inputs: torch.Tensor) -> dict[int, torch.Tensor]:
        """Every value by id: what value search and NaN/Inf checks look at."""
        env: dict[int, torch.Tensor] = dict(zip(self.graph.inputs, inputs))
        for v in self.graph.weights:
            env[v] = getattr(self, weight_name(v))
        for k in range(len(self.graph.insts)):
            self.run_inst(k, env)
        return env

    def run_inst(self, k: int, env: dict[int, torch.Tensor]) -> list[torch.Tensor]:
        """Execute instruction k on `env`, adding its outputs; returns them."""
        inst = self.graph.insts[k]
        out = self._fns[k](self._attrs[k], *(env[v] for v in inst.inputs))
        outs = list(out) if isinstance(out, tuple | list) else [out]
        env.update(zip(inst.outputs, outs))
        return outs

    def attrs(self, k: int) -> Attrs:
        return self._attrs[k]

    def fn(self, k: int) -> Callable[..., torch.Tensor]:
        """Instruction k's function (its spec's forward, or forward_proxy with proxies)."""
        return self._fns[k]

    def spec(self, k: int) -> type[OpSpec]:
        return self._specs[k]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env = self.run(*inputs)
        return tuple(env[v] for v in self.returned)


def check_types(graph: GraphIR, env: Mapping[int, torch.Tensor]) -> list[tuple[int, str]]:
    """(value id, what) for each executed tensor whose type differs from the GraphIR's."""
    errors = []
    for v, t in env.items():
        got = TensorType(tuple(t.shape), DType.from_torch(t.dtype))
        if got != graph.types[v]:
            errors.append((v, f"GraphIR {graph.types[v]}, torch {got}"))
    return errors
