"""A numpy PCG64 generator's state in JSON form: how the scheduler's draws resume exactly."""

from __future__ import annotations

from typing import Any

import numpy as np


def rng_to_json(rng: np.random.Generator) -> dict[str, Any]:
    """A PCG64 generator's state as JSON/msgpack values: 128-bit words as hex strings."""
    st = rng.bit_generator.state
    return {
        "bit_generator": st["bit_generator"],
        "state": hex(st["state"]["state"]),
        "inc": hex(st["state"]["inc"]),
        "has_uint32": int(st["has_uint32"]),
        "uinteger": int(st["uinteger"]),
    }


def rng_from_json(rng: np.random.Generator, obj: Any) -> None:
    """Put `rng` in the state `rng_to_json` saved; ValueError (one line) when `obj` is not one."""
    if not isinstance(obj, dict) or obj.get("bit_generator") != "PCG64":
        raise ValueError("scheduler state: expected a PCG64 generator state")
    try:
        rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": int(obj["state"], 16), "inc": int(obj["inc"], 16)},
            "has_uint32": int(obj["has_uint32"]),
            "uinteger": int(obj["uinteger"]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"scheduler state: bad generator state ({e})") from None
