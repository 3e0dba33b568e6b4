"""Abstract tensors (symbolic shapes) and their concrete counterparts."""

from __future__ import annotations

from dataclasses import dataclass

import z3

from nnsmith_cov.abstract.dtype import DType
from nnsmith_cov.abstract.terms import Dim, ge, product

__all__ = ["AbsTensor", "Dim", "TensorType", "eval_int", "nelement"]


def nelement(shape: list[Dim]) -> Dim:
    return product(shape)


@dataclass
class AbsTensor:
    """A tensor whose dtype and rank are concrete and whose dims may be symbolic."""

    shape: list[Dim]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    def nelement(self) -> Dim:
        return nelement(self.shape)

    def positive(self) -> list[z3.BoolRef | bool]:
        """dim >= 1 for each dim (plain bools for concrete dims)."""
        return [ge(d, 1) for d in self.shape]

    def concrete(self, model: z3.ModelRef) -> TensorType:
        return TensorType(tuple(eval_int(model, d) for d in self.shape), self.dtype)

    def __repr__(self) -> str:
        return f"{self.dtype.value}{list(self.shape)}"


@dataclass(frozen=True)
class TensorType:
    """A concrete tensor type: what GraphIR stores for every value."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    def nelement(self) -> int:
        return int(nelement(list(self.shape)))

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype.value}

    @classmethod
    def from_json(cls, obj: dict) -> TensorType:
        shape = obj["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"bad shape {shape!r}")
        return cls(tuple(shape), DType.from_short(obj["dtype"]))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(map(str, self.shape))}]"


def eval_int(model: z3.ModelRef, expr: Dim) -> int:
    if isinstance(expr, int):
        return expr
    return model.eval(expr, model_completion=True).as_long()
