"""Reading JSON and msgpack that came from outside: bounded in size and nesting depth.

Every file or stream the tool reads (graph.json, meta.json, record.json, config.json,
stats.json, corpus records, worker frames) can be damaged or hostile. Python's decoders
recurse once per nesting level and take any size, so a 200,000-deep list raises
RecursionError and a huge file fills memory. The helpers here turn every such problem
into a `DataError` (a ValueError, so existing `except ValueError` handlers catch it)
whose message is one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgpack

# Nothing the tool writes nests deeper than ~8 levels (a graph's attributes inside its
# instructions); 64 leaves room for growth and stays far below the interpreter's stack.
MAX_DEPTH = 64
# A graph of the largest allowed size, a campaign config or a bundle's meta.json is well
# under a megabyte; 64 MiB bounds what one read may cost.
MAX_JSON_BYTES = 64 << 20
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class DataError(ValueError):
    """Data that cannot be read: malformed, too large or nested too deep (one-line message)."""


def check_depth(obj: Any, where: str, max_depth: int = MAX_DEPTH) -> None:
    """DataError if `obj` (lists/dicts/tuples) nests deeper than `max_depth`; iterative, so a
    deep object cannot exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            raise DataError(f"{where}: nested deeper than {max_depth} levels")
        stack.extend((c, depth + 1) for c in children)


def _no_constant(name: str) -> Any:
    raise DataError(f"non-finite number {name}")


def loads_json(
    text: str | bytes,
    where: str,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_DEPTH,
    finite: bool = False,
) -> Any:
    """Parse JSON text within the bounds; `finite` also refuses NaN, Infinity and numbers that
    overflow a float (1e400)."""
    if len(text) > max_bytes:
        raise DataError(f"{where}: {len(text)} bytes, more than the {max_bytes} allowed")
    try:
        obj = json.loads(text, parse_constant=_no_constant if finite else None)
    except RecursionError:
        raise DataError(f"{where}: nested too deep") from None
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, int digits limit
        raise DataError(f"{where}: not valid JSON ({_first_line(e)})") from None
    check_depth(obj, where, max_depth)
    if finite:
        check_numbers(obj, where, ints=False)
    return obj


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH, finite: bool = False) -> Any:
    """The JSON object in `path`; OSError as raised (the caller knows what a missing file
    means), DataError for what is in it."""
    size = path.stat().st_size
    if size > max_bytes:
        raise DataError(f"{path}: {size} bytes, more than the {max_bytes} allowed")
    return loads_json(path.read_bytes(), str(path), max_bytes, max_depth, finite)


def read_json_dict(path: Path, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """`read_json`, and DataError unless it holds a JSON object."""
    obj = read_json(path, max_bytes)
    if not isinstance(obj, dict):
        raise DataError(f"{path}: a JSON {json_type(obj)}, expected an object")
    return obj


def unpack_msgpack(data: bytes, where: str, max_depth: int = MAX_DEPTH, **options: Any) -> Any:
    """Decode msgpack bytes within the depth bound (the C decoder has its own stack limit,
    reported here as one line too); `options` go to `msgpack.unpackb`."""
    try:
        obj = msgpack.unpackb(data, raw=False, **options)
    except (ValueError, TypeError, msgpack.UnpackException, msgpack.StackError) as e:
        raise DataError(f"{where}: undecodable msgpack ({_first_line(e)})") from None
    check_depth(obj, where, max_depth)
    return obj


def check_numbers(obj: Any, where: str, ints: bool = True) -> None:
    """DataError for a non-finite float anywhere in `obj` or, with `ints`, an integer outside
    int64 (what msgpack, numpy and ONNX can carry). Call after `check_depth`."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise DataError(f"{where}: non-finite number {item}")
        elif ints and isinstance(item, int) and not isinstance(item, bool):
            if not INT64_MIN <= item <= INT64_MAX:
                raise DataError(f"{where}: integer {_short(item)} outside the 64-bit range")


def json_type(obj: Any) -> str:
    """The JSON name of `obj`'s type, for messages."""
    if obj is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (list, "list")):
        if isinstance(obj, kind):
            return name
    return "object" if isinstance(obj, dict) else type(obj).__name__


def shown(x: Any, limit: int = 60) -> str:
    """`x` for a one-line message: huge integers by their size, long values cut."""
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() >= 100:
        return f"an integer of about {int(x.bit_length() * 0.30103)} digits"  # (str() refuses past 4300)
    if isinstance(x, list | dict) and len(x) > 20:
        return f"a {json_type(x)} of {len(x)} items"
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(n: int) -> str:
    return str(n) if n.bit_length() < 100 else f"of about {int(n.bit_length() * 0.30103)} digits"


def _first_line(e: BaseException, limit: int = 160) -> str:
    text = str(e).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
