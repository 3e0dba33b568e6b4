"""How the command line's flag values are read: each function takes the text and returns the
value, or raises argparse.ArgumentTypeError with the one-line reason (argparse prefixes the
flag). The flag table (`flags.py`) names one of these per flag."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

# Most operators per graph. Generation grows faster than linearly with the graph (one Z3
# solver holds every constraint): 100 operators take ~2 s here, 200 ~15 s, and 400 spend
# the default solver budget; past that a campaign would run for minutes without a test.
MAX_NODES = 200
MAX_GROWN = 4 * MAX_NODES  # --grow-max: the default largest cap for the largest --nodes
MAX_CAPS = 8  # --grow-max: caps one campaign may learn among

# Duration suffixes a value may carry; a bare number is seconds.
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _number(text: str, cast: type, ok: Callable[[Any], bool], rule: str) -> Any:
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {'an integer' if cast is int else 'a number'}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{rule}: {text}")
    return value


def positive(text: str) -> int:
    """An integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "must be at least 1")


def count(text: str) -> int:
    """An integer >= 0 (0: off, for limits)."""
    return _number(text, int, lambda v: v >= 0, "must be an integer >= 0")


def seed(text: str) -> int:
    """A run or model seed: an integer in [0, 2^63)."""
    return _number(text, int, lambda v: 0 <= v < 2**63, "seed must be in [0, 2^63)")


def nonneg_float(text: str) -> float:
    """A finite-or-not number >= 0 (nan fails the comparison, so it is refused)."""
    return _number(text, float, lambda v: v >= 0, "must be a number >= 0")


def share(text: str) -> float:
    """A probability in [0, 1]."""
    return _number(text, float, lambda v: 0.0 <= v <= 1.0, "must be a number in [0, 1]")


def is_hedge(value: float) -> bool:
    """Whether a scheduler's hedge is in [0, 1) (a hedge of 1 would be feedback off); the flag,
    a stored config and `BanditParams` share this one rule."""
    return 0.0 <= value < 1.0


def hedge(text: str) -> float:
    """--hedge: a share in [0, 1)."""
    return _number(text, float, is_hedge, "must be a number in [0, 1)")


def nodes(text: str) -> int:
    """--nodes: an integer in 1..MAX_NODES."""
    return _int_in(text, MAX_NODES)


def grow_max(text: str) -> tuple[int, ...]:
    """--grow-max: "N" or "N,M,...", 1..MAX_CAPS distinct integers in 1..MAX_GROWN."""
    caps = tuple(_int_in(part.strip(), MAX_GROWN) for part in text.split(","))
    if len(set(caps)) != len(caps):
        raise argparse.ArgumentTypeError(f"a cap repeats: {text}")
    if len(caps) > MAX_CAPS:
        raise argparse.ArgumentTypeError(f"at most {MAX_CAPS} caps: {text}")
    return caps


def _int_in(text: str, top: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= n <= top:
        raise argparse.ArgumentTypeError(f"must be in 1..{top}: {text}")
    return n


def opsets(text: str) -> list[int]:
    """ONNX opsets from "11-20", "13,17,20" or "20"."""
    from nnsmith_cov.abstract.op import MAX_OPSET, MIN_OPSET

    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an opset or a range of opsets: {part.strip()!r}") from None
        if not MIN_OPSET <= a <= b <= MAX_OPSET:
            raise argparse.ArgumentTypeError(f"opsets must lie within {MIN_OPSET}..{MAX_OPSET}: {part.strip()}")
        out += range(a, b + 1)
    return sorted(set(out))


def duration(text: str) -> float:
    """Seconds from "90", "90s", "10m", "4h" or "1h30m"."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    elif re.fullmatch(r"(\d+[smhd])+", text):
        seconds = sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))
    else:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 10m, 4h, 1h30m)")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive: {text!r}")
    return seconds


def collector(text: str) -> str:
    """A collector: built in, module:Class, several joined by +, or none."""
    from nnsmith_cov.coverage.collector import BUILTIN

    one = lambda n: n in BUILTIN or (n.count(":") == 1 and all(n.split(":")))
    if text == "none" or all(one(n) for n in text.split("+")):
        return text
    raise argparse.ArgumentTypeError(
        f"unknown collector {text!r} (python, llvm, binary, none, module:Class, or several joined by +)"
    )


def cluster_parts(text: str) -> tuple[str, str | None]:
    """Where a campaign's workers run, as (kind, address): `local`, `ray` (a local Ray instance,
    no address), `ray:auto` or `ray://HOST:PORT`; ValueError with the reason otherwise."""
    if text in ("local", "ray"):
        return text, None
    if text == "ray:auto":
        return "ray", "auto"
    if text.startswith("ray://"):
        host, _, port = text[len("ray://") :].rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return "ray", text
    raise ValueError(f"unknown cluster {text!r} (local, ray, ray:auto or ray://HOST:PORT)")


def cluster(text: str) -> str:
    """A `--cluster` value (see `cluster_parts`), kept as given."""
    try:
        cluster_parts(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def backends(text: str) -> list[str]:
    """A comma list of backends, each checked, duplicates dropped."""
    from nnsmith_cov.backends.registry import check_spec

    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise argparse.ArgumentTypeError("no backend named")
    try:
        return [check_spec(s) for s in dict.fromkeys(specs)]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def comma_list(text: str) -> list[str]:
    """The non-empty items of a comma list."""
    return [s for s in text.split(",") if s]
