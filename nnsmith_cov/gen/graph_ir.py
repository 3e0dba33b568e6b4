"""GraphIR: a generated model as ordered instructions over typed values.

On-disk form (JSON, `SCHEMA_VERSION` 2), value ids dense and defined before use:

    {"schema": 2,
     "values": [{"shape": [2, 3], "dtype": "f32"}, {"shape": [3], "dtype": "f32"},
                {"shape": [2, 3], "dtype": "f32"}],
     "inputs": [0], "weights": [1],
     "insts": [{"op": "Add", "attrs": {"bcast": [[], [1]]}, "inputs": [0, 1], "outputs": [2]}],
     "outputs": [2],
     "export": {"opset": 17, "dynamic": [[0, 1]]}}

`export` says how the model reaches the backends: the opset, the (input, dim)
pairs declared symbolic in the model's signature (the test still runs the
concrete shapes), and, when `"roundtrip": true`, that each backend with a text
form of its IR compiles the imported model printed and parsed back (absent:
false, so graphs written before it read and hash as they did). Schema 1 had no
`export`: it reads as opset 20, every dim static.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nnsmith_cov.abstract.op import MAX_OPSET, Attrs
from nnsmith_cov.abstract.tensor import TensorType
from nnsmith_cov.bounded_read import DataError, check_depth, check_numbers, loads_json

SCHEMA_VERSION = 2
DEFAULT_OPSET = MAX_OPSET  # torch 2.13's TorchScript exporter's newest; what schema-1 graphs were exported at


class GraphIRError(ValueError):
    """A GraphIR that is not well formed."""


@dataclass(frozen=True)
class Inst:
    op: str
    attrs: dict[str, Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def to_json(self) -> dict:
        return {"op": self.op, "attrs": self.attrs, "inputs": list(self.inputs), "outputs": list(self.outputs)}


def _inst(obj: Any) -> Inst:
    op, attrs = obj["op"], obj["attrs"]
    if not isinstance(op, str) or not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
        raise GraphIRError(f"malformed instruction: op {op!r} with attributes of type {type(attrs).__name__}")
    return Inst(op, dict(attrs), tuple(map(int, obj["inputs"])), tuple(map(int, obj["outputs"])))


@dataclass
class GraphIR:
    """Values are numbered 0..n-1; `types[v]` is the concrete type of value v."""

    types: list[TensorType]
    inputs: list[int]
    weights: list[int]
    insts: list[Inst]
    outputs: list[int] = field(default_factory=list)
    opset: int = DEFAULT_OPSET
    dynamic: list[tuple[int, int]] = field(default_factory=list)  # (input value, dim) exported symbolic
    roundtrip: bool = False  # backends compile their IR printed as text and parsed back

    # -- well-formedness ---------------------------------------------------------
    def check(self, known_op: Callable[[str], bool] | None = None) -> None:
        """Raise GraphIRError unless every value is defined once, before its uses."""
        n = len(self.types)
        defined: set[int] = set()

        def define(v: int, where: str) -> None:
            if not isinstance(v, int) or not 0 <= v < n:
                raise GraphIRError(f"{where}: value {v!r} out of range")
            if v in defined:
                raise GraphIRError(f"{where}: value {v} defined twice")
            defined.add(v)

        for v in self.inputs:
            define(v, "inputs")
        for v in self.weights:
            define(v, "weights")
        consumed: set[int] = set()
        for k, inst in enumerate(self.insts):
            if known_op is not None and not known_op(inst.op):
                raise GraphIRError(f"inst {k}: unknown op {inst.op!r}")
            for v in inst.inputs:
                if v not in defined:
                    raise GraphIRError(f"inst {k} ({inst.op}): value {v} used before definition")
                consumed.add(v)
            for v in inst.outputs:
                define(v, f"inst {k} ({inst.op})")
        if len(defined) != n:
            raise GraphIRError(f"values {sorted(set(range(n)) - defined)} never defined")
        for v in self.outputs:
            if v not in defined:
                raise GraphIRError(f"output {v} undefined")
        if type(self.opset) is not int or self.opset < 1:
            raise GraphIRError(f"export opset {self.opset!r} is not a positive integer")
        for v, d in self.dynamic:
            if v not in self.inputs or not 0 <= d < len(self.types[v].shape):
                raise GraphIRError(f"dynamic dim {d} of value {v}: not a dim of a model input")
        if len(set(self.dynamic)) != len(self.dynamic):
            raise GraphIRError("a dynamic dim is listed twice")
        if not isinstance(self.roundtrip, bool):
            raise GraphIRError(f"export roundtrip {self.roundtrip!r} is not a bool")

    # -- JSON ----------------------------------------------------------------------
    def to_json(self) -> dict:
        export: dict[str, Any] = {"opset": self.opset, "dynamic": [list(p) for p in self.dynamic]}
        if self.roundtrip:
            export["roundtrip"] = True
        return {
            "schema": SCHEMA_VERSION,
            "values": [t.to_json() for t in self.types],
            "inputs": list(self.inputs),
            "weights": list(self.weights),
            "insts": [i.to_json() for i in self.insts],
            "outputs": list(self.outputs),
            "export": export,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, obj: Any, known_op: Callable[[str], bool] | None = None) -> GraphIR:
        """Parse and validate; raises GraphIRError on anything malformed (also attributes that
        no backend could carry: integers beyond int64, NaN or infinite floats)."""
        try:
            check_depth(obj, "GraphIR")  # obj may come from msgpack (a corpus), not only loads
            check_numbers(obj, "GraphIR")
        except DataError as e:
            raise GraphIRError(str(e)) from None
        if not isinstance(obj, dict):
            raise GraphIRError(f"malformed GraphIR: a {type(obj).__name__}, expected an object")
        try:
            schema = obj.get("schema")
            if schema not in (1, SCHEMA_VERSION):
                raise GraphIRError(f"unsupported GraphIR schema {schema!r}")
            export = obj["export"] if schema == SCHEMA_VERSION else {"opset": DEFAULT_OPSET, "dynamic": []}
            graph = cls(
                types=[TensorType.from_json(t) for t in obj["values"]],
                inputs=[int(v) for v in obj["inputs"]],
                weights=[int(v) for v in obj["weights"]],
                insts=[_inst(i) for i in obj["insts"]],
                outputs=[int(v) for v in obj["outputs"]],
                opset=export["opset"],
                dynamic=[(int(v), int(d)) for v, d in export["dynamic"]],
                roundtrip=export.get("roundtrip", False),
            )
        except GraphIRError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise GraphIRError(f"malformed GraphIR: {type(e).__name__}: {e}") from None
        graph.check(known_op)
        return graph

    @classmethod
    def loads(cls, text: str | bytes, known_op: Callable[[str], bool] | None = None) -> GraphIR:
        try:
            obj = loads_json(text, "graph.json")
        except DataError as e:
            raise GraphIRError(str(e)) from None
        return cls.from_json(obj, known_op)

    def content_hash(self) -> str:
        """A stable digest of the canonical JSON (same graph, same hash, any machine)."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:16]

    # -- views -----------------------------------------------------------------------
    def text(self) -> str:
        """A readable listing, one line per placeholder and instruction."""
        trip = ", compiled from its IR's text" if self.roundtrip else ""
        lines = [f"# GraphIR {self.content_hash()}: {len(self.insts)} ops, ONNX opset {self.opset}{trip}"]
        for v in self.inputs:
            dyn = [d for u, d in self.dynamic if u == v]
            lines.append(f"v{v}: {self.types[v]} = input" + (f"  (dims {dyn} dynamic)" if dyn else ""))
        for v in self.weights:
            lines.append(f"v{v}: {self.types[v]} = weight")
        for inst in self.insts:
            outs = ", ".join(f"v{v}: {self.types[v]}" for v in inst.outputs)
            args = ", ".join(f"v{v}" for v in inst.inputs)
            attrs = ", ".join(f"{k}={json.dumps(val, separators=(',', ':'))}" for k, val in sorted(inst.attrs.items()))
            lines.append(f"{outs} = {inst.op}({args})" + (f"  {{{attrs}}}" if attrs else ""))
        lines.append("return " + ", ".join(f"v{v}" for v in self.outputs))
        return "\n".join(lines) + "\n"

    def attrs(self, inst: Inst) -> Attrs:
        """`inst`'s attributes as its spec reads them (with its concrete in/out types)."""
        a = Attrs(inst.attrs)
        a["in_types"] = [self.types[v] for v in inst.inputs]
        a["out_types"] = [self.types[v] for v in inst.outputs]
        return a

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for inst in self.insts:
            counts[inst.op] = counts.get(inst.op, 0) + 1
        return counts

    def instance_keys(self) -> list[str]:
        """One key per instruction: op type + input types + attributes (unique-instance counting)."""
        keys = []
        for inst in self.insts:
            ins = ",".join(str(self.types[v]) for v in inst.inputs)
            attrs = json.dumps(inst.attrs, sort_keys=True, separators=(",", ":"))
            keys.append(f"{inst.op}({ins}){attrs}")
        return keys
