"""The worker wire format: frames and arrays round-trip; anything else is refused."""

from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nnsmith_cov.campaign.protocol import (
    FrameReader,
    ProtocolError,
    decode_array,
    encode_array,
    frame,
    read_frame_blocking,
    write_frame,
)

DTYPES = st.sampled_from(["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"])


@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)))
def test_arrays_round_trip_exactly(a):
    b = decode_array(msgpack.unpackb(msgpack.packb(encode_array(a)), raw=False))
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(ProtocolError):
        encode_array(np.array([object()]))
    with pytest.raises(ProtocolError):
        decode_array({"dtype": "|O", "shape": [1], "data": b"\0" * 8})


def test_frames_arrive_whole_whatever_the_chunking():
    msgs = [{"kind": "run", "n": i, "blob": bytes(range(256)) * i} for i in range(5)]
    stream = b"".join(frame(m) for m in msgs)
    reader, got = FrameReader(), []
    for i in range(0, len(stream), 7):
        reader.feed(stream[i : i + 7])
        while (m := reader.next()) is not None:
            got.append(m)
    assert got == msgs


@pytest.mark.parametrize(
    "data",
    [
        (5).to_bytes(4, "big") + b"\xc1\xc1\xc1\xc1\xc1",  # 0xc1 is never valid msgpack
        len(msgpack.packb([1, 2])).to_bytes(4, "big") + msgpack.packb([1, 2]),  # not a map
        (2**31).to_bytes(4, "big"),  # absurd length
    ],
)
def test_garbage_is_a_protocol_error(data):
    reader = FrameReader()
    reader.feed(data)
    with pytest.raises(ProtocolError):
        reader.next()


def test_pipe_round_trip_and_end_of_stream():
    r, w = os.pipe()
    write_frame(w, {"kind": "hello", "x": [1, 2]})
    os.close(w)
    reader = FrameReader()
    assert read_frame_blocking(r, reader) == {"kind": "hello", "x": [1, 2]}
    assert read_frame_blocking(r, reader) is None
    os.close(r)


def test_what_msgpack_cannot_carry_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="cannot encode"):
        frame({"kind": "prepare", "attrs": {"a": 10**400}})


def test_deeply_nested_frames_are_protocol_errors():
    for body in (b"\x91" * 100_000 + b"\xc0", msgpack.packb({"kind": "x", "v": _nested(100)})):
        reader = FrameReader()
        reader.feed(len(body).to_bytes(4, "big") + body)
        with pytest.raises(ProtocolError, match="nested|msgpack"):
            reader.next()


def _nested(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out
