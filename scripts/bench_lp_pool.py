#!/usr/bin/env python3
"""LpPool2d window sums: PyTorch's average pool against prefix sums (`ops.pool.window_sums`).

Prints, for window shapes the generator draws (the first from a 30-node benchmark
graph), the forward and the forward + backward time of both ways and which one
`window_sums` picks.

    python scripts/bench_lp_pool.py [--reps 20]
"""

from __future__ import annotations

import argparse
import time

import torch

from nnsmith_cov.ops import pool

# (input shape, kernel, stride, padding, dtype)
CASES = [
    ((18, 1, 30, 94), (22, 84), (1, 2), (11, 42), torch.float64),
    ((1, 4, 98, 140), (25, 2), (1, 2), (9, 0), torch.float32),
    ((2, 2, 65, 49), (50, 65), (5, 3), (4, 12), torch.float16),
    ((24, 64, 8, 2), (5, 5), (5, 1), (2, 2), torch.float16),
    ((3, 1, 65, 65), (10, 183), (65, 6), (0, 64), torch.float64),
]


def _ms(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1000


def time_case(shape: tuple[int, ...], k, s, pad, dtype: torch.dtype, reps: int) -> list[float]:
    """Forward of the pool, forward of the prefix sums, then both with a backward pass (ms)."""
    x = (torch.rand(shape, dtype=torch.float64) * 9).to(dtype).requires_grad_(True)
    ways = [lambda: pool.window_sums(x, k, s, pad, prefix=False), lambda: pool.window_sums(x, k, s, pad, prefix=True)]
    with torch.no_grad():
        fwd = [_ms(f, reps) for f in ways]
    return fwd + [_ms(lambda f=f: f().sum().backward(), reps) for f in ways]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    heads = ("pool fwd", "prefix fwd", "pool f+b", "prefix f+b")
    print(f"{'input':<18} {'kernel':<10} {'dtype':<8}" + "".join(f"{h:>12}" for h in heads) + "  picks")
    for shape, k, s, pad, dtype in CASES:
        ms = time_case(shape, k, s, pad, dtype, args.reps)
        picks = "prefix" if pool.prefix_sums_pay(shape[-2:], k, s, pad) else "pool"
        row = f"{str(shape):<18} {str(k):<10} {str(dtype)[6:]:<8}" + "".join(f"{t:>10.3f}ms" for t in ms)
        print(row + f"  {picks}")


if __name__ == "__main__":
    main()
