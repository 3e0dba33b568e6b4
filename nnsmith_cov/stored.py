"""Settings read back from disk (a bundle's meta.json, a campaign's config.json): type checks.

A downloaded bundle or campaign folder is data, never code: every value is checked for its
type and range before it reaches a worker, and a backend or collector it names must be built
in, or a plug-in (`module:Class`) the user named on the command line.

Top level, beside `bounded_read`: the campaign, the oracle's bundles and replay all read
stored settings, so this sits below each of them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from nnsmith_cov.backends.registry import BUILTIN as BUILTIN_BACKENDS
from nnsmith_cov.bounded_read import shown

# A request limit past a day is a typo or a hostile file, not a setting.
MAX_TIMEOUT_S = 86_400.0
SEARCH_METHODS = ("gradient", "sampling", "none")  # search.gradient.METHODS, without importing torch
# The value-search knobs a stored setting may turn, with their checks (all go to search_values).
_SEARCH_KEYS = ("method", "max_iters", "budget_ms", "proxy")


class StoredError(ValueError):
    """A stored setting of the wrong type or out of range (one-line message)."""


def is_number(x: object) -> bool:
    """A finite float, or an integer a float can hold (10**400 cannot), never a bool."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    return abs(x) < 2**1000 if isinstance(x, int) else math.isfinite(x)


def number(obj: Mapping[str, Any], key: str, where: str, default: float, positive: bool = False) -> float:
    """`obj[key]` (or `default` when absent) as a finite number >= 0 (> 0 with `positive`)."""
    x = obj.get(key, default)
    if not is_number(x) or x < 0 or (positive and x == 0):
        rule = "a positive number" if positive else "a number >= 0"
        raise StoredError(f"{where}: {key} must be {rule}, not {shown(x)}")
    return float(x)


def search_settings(obj: object, where: str) -> dict[str, Any]:
    """A stored value-search setting, checked: a dict of `_SEARCH_KEYS` only."""
    if not isinstance(obj, dict):
        raise StoredError(f"{where}: search must be an object, not {shown(obj)}")
    unknown = sorted(k for k in obj if k not in _SEARCH_KEYS)
    if unknown:
        raise StoredError(f"{where}: search has unknown keys {', '.join(map(str, unknown))}")
    out = dict(obj)
    if out.get("method", "gradient") not in SEARCH_METHODS:
        raise StoredError(f"{where}: search method {shown(out.get('method'))} (one of {', '.join(SEARCH_METHODS)})")
    iters = out.get("max_iters")
    if iters is not None and (type(iters) is not int or not 1 <= iters <= 1_000_000):
        raise StoredError(f"{where}: search max_iters must be an integer in 1..1000000, not {shown(iters)}")
    if "budget_ms" in out:
        out["budget_ms"] = number(out, "budget_ms", f"{where}: search", 0, positive=True)
        if out["budget_ms"] > MAX_TIMEOUT_S * 1000:
            raise StoredError(f"{where}: search budget_ms {out['budget_ms']} is more than a day")
    if not isinstance(out.get("proxy", True), bool):
        raise StoredError(f"{where}: search proxy must be true or false, not {shown(out['proxy'])}")
    return out


def timeout(obj: Mapping[str, Any], where: str, default: float) -> float:
    t = number(obj, "timeout_s", where, default, positive=True)
    if t > MAX_TIMEOUT_S:
        raise StoredError(f"{where}: timeout_s {t} is more than a day")
    return t


def trusted_backend(spec: object, plugins: Collection[str], where: str) -> str:
    """A backend named by stored data: a built-in one, or a plug-in in `plugins` (named by the
    user on the command line); StoredError otherwise, before anything is imported."""
    if not isinstance(spec, str):
        raise StoredError(f"{where}: backend must be a string, not {shown(spec)}")
    if spec in BUILTIN_BACKENDS or spec in plugins:
        return spec
    if spec.count(":") == 1 and all(spec.split(":")):
        raise StoredError(
            f"{where}: names the plug-in backend {spec!r}; data never imports code: pass --plugin {spec} to trust it"
        )
    raise StoredError(f"{where}: unknown backend {shown(spec)} (built in: {', '.join(BUILTIN_BACKENDS)})")


def trusted_collector(spec: object, plugins: Collection[str], where: str) -> str:
    """A collector named by stored data ("" for none; parts joined by "+"), as `trusted_backend`."""
    from nnsmith_cov.coverage.collector import BUILTIN as BUILTIN_COLLECTORS

    if spec is None or spec == "":
        return ""
    if not isinstance(spec, str):
        raise StoredError(f"{where}: collector must be a string, not {shown(spec)}")
    for part in spec.split("+"):
        if part in BUILTIN_COLLECTORS or part in plugins:
            continue
        if part.count(":") == 1 and all(part.split(":")):
            raise StoredError(
                f"{where}: names the plug-in collector {part!r}; data never imports code: "
                f"pass --plugin {part} to trust it"
            )
        raise StoredError(f"{where}: unknown collector {shown(part)} (built in: {', '.join(BUILTIN_COLLECTORS)})")
    return spec
