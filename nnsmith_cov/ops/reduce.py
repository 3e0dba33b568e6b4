"""Reductions over axes (sum, mean, max, min, prod, argmax, argmin)."""

from __future__ import annotations

OPS: tuple = ()
