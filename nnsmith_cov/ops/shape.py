"""Layout operators: reshape-like, concat/split, slicing, padding, tiling, triangles, gather, scans, top-k."""

from __future__ import annotations

OPS: tuple = ()
