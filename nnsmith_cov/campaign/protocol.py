"""The parent <-> worker wire format: length-prefixed msgpack frames over a pipe.

A frame is a 4-byte big-endian length and a msgpack map with a "kind". Arrays
travel as {"dtype": "float32", "shape": [2, 3], "data": <raw bytes>}; nothing is
pickled, so a Ray actor or a remote host can stand where the subprocess stands.

Requests (parent -> worker) and their final replies; before a reply the worker
may send {"kind": "stage", "stage": "compile"} events, so that the parent knows
where a worker that dies or hangs was:

  {"kind": "hello"}
      -> {"kind": "ready", "pid": 4242, "versions": {"tvm": "0.27.0"},
          "unavailable": {"trt": "tensorrt is not installed"}}
  {"kind": "prepare", "graph": <GraphIR JSON>, "seed": 7, "search": {"method": "gradient", ...}}
      -> {"kind": "prepared", "search": {"ok": true, ...}, "values": {"i0": <array>, "w1": ...},
          "oracle": {"o3": <array>} | null, "onnx": <bytes> | null, "error": <error> | null}
  {"kind": "propose", "test": 17, "seed": 881, "generator": "nnsmith", "calls": [...], "fresh": {...},
   "search": {...}}   (see `campaign.proposal`: the worker makes the test's graph itself)
      -> first {"kind": "generated", "index": 0, "record": <GenRecord JSON with its draws>, "graph": <GraphIR JSON>}
         (before the search, so that a death there is still a finding on a known graph), then the
         "prepared" reply of "prepare"; the worker also holds its "values" and "onnx" for the test's
         "run" requests (also on disk, for the worker that replaces it after a crash)
      |  {"kind": "gen_failed"}     (the generator gave up: no test)
      |  {"kind": "gen_error", "index": 1, "type": "KeyError", "message": "...", "traceback": "..."}
         (our own code raised while generating, in call `index` of "calls"; -1: the fresh graph)
      ("made": a "made" reply, below: the graph was made ahead by another worker; not again here)
  {"kind": "generate", <the fields of "propose">}
      -> {"kind": "made", "index": 0, "record": <GenRecord JSON>, "graph": <GraphIR JSON>}
      |  "gen_failed" | "gen_error" as for "propose"
         (the graph alone: a worker that only generates makes the next test's while another
         worker runs this one; see `campaign.ahead`)
  {"kind": "export", "graph": <GraphIR JSON>, "values": {"i0": <array>, "w1": ...}}
      -> {"kind": "prepared", "onnx": <bytes> | null, "ms": {"export": 8.1}, "error": <error> | null}
         (a stored test's values exported again, without a search: how a replay re-measures it)
  {"kind": "run", "backend": "ort", "opt": "opt", "onnx": <bytes>, "inputs": {"i0": <array>}, "roundtrip": false}
      -> {"kind": "outputs", "outputs": {"o3": <array>}, "ms": {"compile": 12.5, "execute": 0.4}}
         ("roundtrip" true, optional: a backend with a text form of its IR compiles the imported
         model printed and parsed back, timed as a stage of its own between import and compile)
         ("test": 17 instead of "onnx" and "inputs": the held test's model and inputs)
      |  {"kind": "error", "error": <error>}
  {"kind": "warm_up", "backends": ["tvm"], "exports": false}
      -> {"kind": "warm"}            (a small model exported at every opset and run once, unmeasured;
                                      "exports" false, optional: its run alone)
  {"kind": "universe"}
      -> {"kind": "universe", "data": <Universe.to_bytes()>}
  {"kind": "exit"}

A worker started with a collector adds {"collector": {"name": "python", "ident": "7450aa4f5bf22795",
"size": 105304, "build": {...}} | {"error": "..."} | null} to "ready", and "hits" (see
`coverage.covmap.Hits.to_wire`) to the replies of "prepare" and "export" (the export) and "run".

A collector driven from the parent (binary) adds "self_check": true to that, and:
  worker -> parent while starting, before it serves "hello":
      {"kind": "attach", "phase": "follow" | "locate", "pid": 4242, "tid": 4250, "map": "<address>", ...}
      <- {"kind": "attached"} | {"kind": "attached", "error": "..."}
      (see `coverage.binary_attach`; requests the parent sent meanwhile are served afterwards)
  {"kind": "self_check"} -> {"kind": "checked", "ok": true, "detail": ""}
      (a fixed model natively and under the collector: bit-identical outputs or no work)
  {"kind": "mask", "slots": <uint32 bytes>} -> {"kind": "masked"}   (flaky slots of earlier workers)
  and "run" replies carry "calibration": {"ms": 88.1, "reran": true} (a rerun's time is also the
  "calibrate" entry of "ms"; within the worker's budget, `--calibration-share`) and, when
  calibration found slots newly flaky, "unstable": <uint32 bytes> (they stay in "hits": see
  `covmap.VirginMap.flag`).

where <error> is {"stage": "compile", "type": "TVMError", "message": "...", "traceback": "..."}.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from nnsmith_cov.bounded_read import DataError, unpack_msgpack

PROTOCOL_VERSION = 1
_HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30  # a frame beyond 1 GiB means a corrupt stream, not a model


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.asarray(a)
    if a.dtype.hasobject:
        raise ProtocolError("object arrays cannot cross the worker boundary")
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": np.ascontiguousarray(a).tobytes()}


def decode_array(obj: Mapping[str, Any]) -> np.ndarray:
    dtype = np.dtype(obj["dtype"])
    if dtype.hasobject:
        raise ProtocolError("object arrays cannot cross the worker boundary")
    return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"]).copy()


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {k: encode_array(v) for k, v in arrays.items()}


def decode_arrays(objs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: decode_array(v) for k, v in objs.items()}


def frame(msg: Mapping[str, Any]) -> bytes:
    """The frame of `msg`; ProtocolError for what msgpack cannot carry (an integer beyond 64
    bits, an object nested past its limit, a type it does not know) or a body past MAX_FRAME."""
    try:
        body = msgpack.packb(msg, use_bin_type=True)
    except (OverflowError, ValueError, TypeError) as e:
        raise ProtocolError(f"cannot encode a {msg.get('kind', 'message')!r} frame: {e}") from None
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a {msg.get('kind', 'message')!r} frame of {len(body)} bytes")
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, msg: Mapping[str, Any]) -> None:
    data = memoryview(frame(msg))
    while data:
        n = os.write(fd, data)
        data = data[n:]


class FrameReader:
    """Accumulates bytes from a non-blocking source and yields complete messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> dict[str, Any] | None:
        if len(self._buf) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buf)
        if size > MAX_FRAME:
            raise ProtocolError(f"frame of {size} bytes")
        if len(self._buf) < _HEADER.size + size:
            return None
        body = bytes(self._buf[_HEADER.size : _HEADER.size + size])
        del self._buf[: _HEADER.size + size]
        try:
            msg = unpack_msgpack(body, "frame")
        except DataError as e:
            raise ProtocolError(str(e)) from None
        if not isinstance(msg, dict) or "kind" not in msg:
            raise ProtocolError("frame without a kind")
        return msg


def read_frame_blocking(fd: int, reader: FrameReader) -> dict[str, Any] | None:
    """The next message, blocking; None at end of stream (the peer went away)."""
    while True:
        msg = reader.next()
        if msg is not None:
            return msg
        data = os.read(fd, 1 << 20)
        if not data:
            return None
        reader.feed(data)
