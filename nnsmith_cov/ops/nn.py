"""Neural-network layers: convolution, pooling, normalization, softmax, linear algebra, resizing."""

from __future__ import annotations

OPS: tuple = ()
