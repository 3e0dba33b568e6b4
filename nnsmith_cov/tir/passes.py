"""The optional TIR pass sequence a mutant is compiled with, and its mutation.

A sequence is a list of pass names from `MENU` (TVM 0.27's tirx/s_tir transformations that
apply to loop-form TIR on a CPU), run before the llvm build's own pipeline. Names, not pass
objects, so a sequence is stored in the corpus as JSON and replays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# name -> (module under tvm, pass constructor, its arguments)
MENU: dict[str, tuple[str, str, tuple[Any, ...]]] = {
    "StmtSimplify": ("tirx", "StmtSimplify", ()),
    "RemoveNoOp": ("tirx", "RemoveNoOp", ()),
    "UnrollLoop": ("tirx", "UnrollLoop", ()),
    "VectorizeLoop": ("tirx", "VectorizeLoop", (True,)),
    "StorageRewrite": ("tirx", "StorageRewrite", ()),
    "CommonSubexprElim": ("tirx", "CommonSubexprElim", ()),
    "NarrowDataType": ("tirx", "NarrowDataType", (32,)),
    "ConvertSSA": ("tirx", "ConvertSSA", ()),
    "CanonicalizeLoop": ("s_tir", "CanonicalizeLoop", ()),
    "LoopPartition": ("s_tir", "LoopPartition", ()),
    "HoistIfThenElse": ("s_tir", "HoistIfThenElse", ()),
    "HoistExpression": ("s_tir", "HoistExpression", ()),
    "RenormalizeSplitPattern": ("s_tir", "RenormalizeSplitPattern", ()),
    "RewriteUnsafeSelect": ("s_tir", "RewriteUnsafeSelect", ()),
    "SimplifyS": ("s_tir", "StmtSimplify", ()),
}
MAX_PASSES = 8
NEEDS_FLAT = {"StorageRewrite"}  # passes that expect FlattenBuffer to have run (see `make`)


def make(names: list[str]) -> Any:
    """The tvm.transform.Sequential of the named passes; ValueError on an unknown name."""
    import importlib

    import tvm

    passes = []
    flat = False
    for name in names:
        if name not in MENU:
            raise ValueError(f"unknown TIR pass {name!r}")
        if name in NEEDS_FLAT and not flat:
            # The default pipeline runs it only on flattened buffers: called earlier it refuses
            # every multi-dimensional allocation, which would bury real crashes.
            passes.append(tvm.tirx.transform.FlattenBuffer())
            flat = True
        module, ctor, args = MENU[name]
        passes.append(getattr(importlib.import_module(f"tvm.{module}.transform"), ctor)(*args))
    return tvm.transform.Sequential(passes)


def initial(rng: np.random.Generator) -> list[str]:
    """A fresh sequence of one to three passes."""
    names = list(MENU)
    return [names[int(rng.integers(len(names)))] for _ in range(int(rng.integers(1, 4)))]


def mutate(seq: list[str], rng: np.random.Generator) -> tuple[list[str], str]:
    """`seq` with one pass inserted, deleted, replaced or two swapped; and what was done."""
    names, out = list(MENU), list(seq)
    kinds = ["insert"] if len(out) < 2 else ["insert", "delete", "replace", "swap"]
    if len(out) >= MAX_PASSES:
        kinds.remove("insert")
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "insert":
        out.insert(int(rng.integers(len(out) + 1)), names[int(rng.integers(len(names)))])
    elif kind == "delete":
        out.pop(int(rng.integers(len(out))))
    elif kind == "replace":
        out[int(rng.integers(len(out)))] = names[int(rng.integers(len(names)))]
    else:
        i, j = (int(x) for x in rng.choice(len(out), 2, replace=False))
        out[i], out[j] = out[j], out[i]
    return out, f"pass.{kind}"
