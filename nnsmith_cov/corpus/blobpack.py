"""How a test's blobs are stored from corpus schema 2 on: compressed, and each value stored once.

A test keeps its model (model.onnx, weights as initializers), its inputs and weights
(inputs.npz) and its oracle (oracle.npz). The weights sit twice in those bytes: in the
model's initializers and in inputs.npz. The model is stored as a recipe over inputs.npz's
bytes instead: literal stretches plus (offset, length) spans that copy from inputs.npz,
one span per array whose bytes occur verbatim in both. Rebuilding is a byte copy, never
a protobuf round trip, so the model reads back bit for bit (and `pack_blobs` checks that
it does before anything is stored).

A stored value is one tag byte, then its payload:

  R  raw bytes (what does not shrink under zlib)
  Z  zlib(raw bytes)
  M  zlib(msgpack {"ref": "inputs.npz", "parts": [bytes | [offset, length], ...]}): the
     concatenation of the parts, each span copied from the named sibling's raw bytes
  X  dropped by the disk budget: the test's record and bitmap remain, its bytes do not

Schema 1 corpora store raw bytes without a tag; their readers skip this module.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Mapping

import numpy as np

from nnsmith_cov.corpus.records import inflate, is_int, pack, unpack

RAW, ZLIB, MODEL, DROPPED = b"R", b"Z", b"M", b"X"
MIN_SPAN = 64  # shorter arrays are not worth a reference: zlib takes them
MAX_BLOB = 1 << 31  # no stored blob inflates past this (a hostile value cannot claim more)
_LEVEL = 6  # zlib level 9 saves under 1% more on these bytes at twice the time


def pack_blobs(blobs: Mapping[str, bytes]) -> dict[str, bytes]:
    """The stored form of each blob; `unpack_blobs` of it gives `blobs` back exactly."""
    out: dict[str, bytes] = {}
    values = blobs.get("inputs.npz")
    for name, data in blobs.items():
        data = bytes(data)
        packed = None
        if name == "model.onnx" and values is not None:
            packed = _pack_model(data, bytes(values))
        out[name] = packed if packed is not None else _pack_plain(data)
    if unpack_blobs(out) != {k: bytes(v) for k, v in blobs.items()}:  # never store what does not read back
        return {name: _pack_plain(bytes(data)) for name, data in blobs.items()}
    return out


def unpack_blobs(stored: Mapping[str, bytes]) -> dict[str, bytes]:
    """The raw bytes of stored blobs (dropped ones left out); ValueError on a malformed value."""
    raw: dict[str, bytes] = {}
    for name, data in stored.items():
        if data[:1] not in (MODEL, DROPPED):
            raw[name] = unpack_one(data)
    for name, data in stored.items():
        if data[:1] == MODEL:
            raw[name] = _unpack_model(data[1:], raw)
    return raw


def unpack_one(data: bytes, siblings: Mapping[str, bytes] | None = None) -> bytes:
    """One stored blob's raw bytes; a model recipe needs its sibling's raw bytes in `siblings`."""
    tag, body = data[:1], data[1:]
    if tag == RAW:
        return bytes(body)
    if tag == ZLIB:
        return inflate(body, MAX_BLOB)
    if tag == MODEL:
        return _unpack_model(body, siblings or {})
    if tag == DROPPED:
        raise ValueError("its bytes were dropped by the disk budget")
    raise ValueError(f"unknown blob encoding {tag!r}")


def is_dropped(data: bytes) -> bool:
    return data[:1] == DROPPED


def _pack_plain(data: bytes) -> bytes:
    z = zlib.compress(data, _LEVEL)
    return ZLIB + z if len(z) < len(data) else RAW + data


def _array_bytes(npz: bytes) -> list[bytes]:
    """The payload bytes of each array in an .npz (what an initializer's raw_data repeats)."""
    try:
        with np.load(io.BytesIO(npz), allow_pickle=False) as z:
            return [np.ascontiguousarray(z[k]).tobytes() for k in z.files]
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        return []


def _pack_model(model: bytes, npz: bytes) -> bytes | None:
    spans: list[tuple[int, int, int]] = []  # (model offset, npz offset, length)
    for b in sorted(_array_bytes(npz), key=len, reverse=True):
        if len(b) < MIN_SPAN:
            continue
        at, src = model.find(b), npz.find(b)
        if at < 0 or src < 0 or any(at < m + n and m < at + len(b) for m, _, n in spans):
            continue
        spans.append((at, src, len(b)))
    if not spans:
        return None
    parts: list[bytes | list[int]] = []
    pos = 0
    for at, src, n in sorted(spans):
        if at > pos:
            parts.append(model[pos:at])
        parts.append([src, n])
        pos = at + n
    if pos < len(model):
        parts.append(model[pos:])
    return MODEL + zlib.compress(pack({"ref": "inputs.npz", "parts": parts}), _LEVEL)


def _unpack_model(body: bytes, raw: Mapping[str, bytes]) -> bytes:
    obj = unpack(inflate(body, MAX_BLOB))
    if not (isinstance(obj, dict) and set(obj) == {"ref", "parts"} and isinstance(obj["parts"], list)):
        raise ValueError("model recipe must be {ref, parts}")
    ref = raw.get(obj["ref"]) if isinstance(obj["ref"], str) else None
    if ref is None:
        raise ValueError(f"model recipe refers to {obj['ref']!r}, which is not stored")
    out = bytearray()
    for part in obj["parts"]:
        if isinstance(part, bytes):
            out += part
        elif (
            isinstance(part, list)
            and len(part) == 2
            and all(is_int(x) and x >= 0 for x in part)
            and part[0] + part[1] <= len(ref)
        ):
            out += ref[part[0] : part[0] + part[1]]
        else:
            raise ValueError("model recipe part must be bytes or [offset, length] within its reference")
    return bytes(out)
