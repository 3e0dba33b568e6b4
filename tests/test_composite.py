"""Composite collectors (`python+binary`): joined universes, routing, calibration in map order."""

from __future__ import annotations

import json
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import msgpack
import numpy as np
import pytest

from nnsmith_cov.cli import main
from nnsmith_cov.coverage.collector import CollectorError, pass_filters
from nnsmith_cov.coverage.composite import FollowedComposite, part_targets, slice_hits
from nnsmith_cov.coverage.covmap import Hits, VirginMap
from nnsmith_cov.coverage.declared import DeclaredBackend
from nnsmith_cov.coverage.factory import make_collector
from nnsmith_cov.coverage.universe import Universe
from nnsmith_cov.feedback import reward_of


def small(collector: str, kind: str, files: list[str], n: int, build: str) -> Universe:
    i = np.arange(n, dtype=np.int32)
    return Universe(collector, kind, {collector: build}, files, i % len(files), i + 1, i + 2)


PY = small("python", "arc", ["tvm/relax/transform/a.py", "tvm/b.py"], 6, "1")
BIN = small("binary", "block", ["onnxruntime/core/optimizer/x.cc"], 4, "bid")


def hits(*index: int) -> Hits:
    return Hits.from_arrays(np.array(index), np.ones(len(index)))


def test_joined_universe_splits_back_into_its_parts() -> None:
    u = Universe.join([PY, BIN])
    assert (u.collector, u.kind, len(u)) == ("python+binary", "mixed", 10)
    assert [(off, part.ident) for off, part in u.split()] == [(0, PY.ident), (6, BIN.ident)]
    assert u.key(7) == BIN.key(1) and "#" in u.key(7) and "->" in u.key(0)  # each part keeps its kind
    again = Universe.from_bytes(u.to_bytes())
    assert again.ident == u.ident and again.parts == u.parts
    assert [p for p, _ in [(x.ident, 0) for _, x in again.split()]] == [PY.ident, BIN.ident]
    assert Universe.join([BIN, PY]).ident != u.ident  # order is part of the numbering
    with pytest.raises(ValueError, match="joined"):
        Universe.join([u, PY])
    body = msgpack.unpackb(zlib.decompress(u.to_bytes()), raw=False)
    body["parts"][1]["start"] = 5  # a damaged file: parts that overlap
    with pytest.raises(ValueError, match="not a branch universe"):
        Universe.from_bytes(zlib.compress(msgpack.packb(body, use_bin_type=True)))
    parts = u.split_index(np.array([1, 5, 6, 9]))
    assert [(p.collector, idx.tolist()) for p, idx in parts] == [("python", [1, 5]), ("binary", [0, 3])]


def test_schema_1_universes_still_read() -> None:
    body = msgpack.unpackb(zlib.decompress(PY.to_bytes()), raw=False)
    body["schema"] = 1
    del body["parts"]
    old = Universe.from_bytes(zlib.compress(msgpack.packb(body, use_bin_type=True)))
    assert old.ident == PY.ident and old.parts == ()


def test_targets_go_to_the_part_they_name() -> None:
    names = ["python", "binary"]
    given = ["tvm", "binary=libfoo.so*"]
    assert part_targets("python", given, True, names) == ["tvm"]
    assert part_targets("binary", given, False, names) == ["libfoo.so*"]
    assert part_targets("binary", ["binary=x"], True, ["binary"]) == ["x"]  # --binary-module alone
    with pytest.raises(CollectorError, match="names no collector"):
        part_targets("python", ["llvm=x"], True, names)
    with pytest.raises(CollectorError, match="twice"):
        make_collector("python+python")


def test_pass_filters_of_a_composite_are_its_parts() -> None:
    both = pass_filters("python+binary")
    assert set(both) == set(pass_filters("python")) | set(pass_filters("binary"))
    assert pass_filters("python+binary", ["x/"]) == ["x/"]


class Part:
    """A thread-less part that claims backend "here"."""

    name = "python"

    def __init__(self) -> None:
        self.next = hits()

    def universe(self) -> Universe:
        return PY

    def start(self) -> None:
        pass

    def stop(self) -> Hits:
        return self.next

    def claims(self, backend: DeclaredBackend) -> bool:
        return backend.spec == "here"


class Threaded:
    """A part with its own thread; records where calls ran, calibrates by masking what differs."""

    name = "binary"

    def __init__(self) -> None:
        self.thread_ids: list[int] = []
        self.next = hits()
        self.masked: list[int] = []

    def universe(self) -> Universe:
        return BIN

    def start(self) -> None:
        pass

    def stop(self) -> Hits:
        return self.next

    def call(self, fn, backend: str = ""):  # noqa: ANN001
        self.thread_ids.append(threading.get_ident())
        return fn()

    def settle(self, first: Hits, again, key: str = "") -> np.ndarray:  # noqa: ANN001
        second = again()  # what the rerun differs in is flaky
        return np.setxor1d(first.index, second.index).astype(np.uint32)

    def mask(self, slots: np.ndarray) -> None:
        self.masked += [int(s) for s in slots]


def test_composite_offsets_routes_and_calibrates_in_map_order() -> None:
    py, binary = Part(), Threaded()
    c = FollowedComposite([py, binary])
    assert len(c.universe()) == 10
    py.next, binary.next = hits(2, 4), hits(0, 3)
    c.start()
    assert c.stop().index.tolist() == [2, 4, 6, 9]

    assert c.call(lambda: 1, "here") == 1 and binary.thread_ids == []  # claimed: runs where called
    assert c.call(lambda: 2, "ort") == 2 and len(binary.thread_ids) == 1  # everything else: the thread
    assert c.call(lambda: 3) == 3 and len(binary.thread_ids) == 2  # loading the backends: the thread

    first = hits(2, 6, 7, 9)
    flicker = c.settle(first, lambda: hits(2, 6, 9))  # block 1 (map 7) ran once only
    assert flicker.tolist() == [7]
    c.mask(np.array([1, 7, 8]))  # map order; python indices are not the binary part's to mask
    assert binary.masked == [1, 2]
    assert slice_hits(first, 6, 10).index.tolist() == [0, 1, 3]


class Carried(Part):
    """A thread-less part that can measure on another thread (as the python part does)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran_on: list[int] = []

    def carried(self, fn):  # noqa: ANN001, ANN201
        def wrapped():  # noqa: ANN202
            self.ran_on.append(threading.get_ident())
            return fn()

        return wrapped


class OwnThread(Threaded):
    """A threaded part whose calls really run on another thread."""

    def call(self, fn, backend: str = ""):  # noqa: ANN001
        out = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
        self.thread_ids.append(t.ident)
        return out[0]


def test_a_claimed_backend_runs_on_the_measuring_thread_with_its_part_carried() -> None:
    """TVM measured in its Python and its C++ by one call: the python part's tracer goes along."""
    py, binary = Carried(), OwnThread()
    c = FollowedComposite([py, binary], [DeclaredBackend("here")])
    assert not c.native("here")
    assert c.call(lambda: 5, "here") == 5
    assert py.ran_on == binary.thread_ids and py.ran_on[0] != threading.get_ident()
    assert c.call(lambda: 6, "ort") == 6 and len(py.ran_on) == 1  # not its backend: not carried


def test_the_python_part_traces_a_call_carried_to_another_thread() -> None:
    from nnsmith_cov.coverage.python_collector import PythonCollector

    py = PythonCollector(["json"])  # a small stdlib package: its analysis takes a moment
    # A long-lived thread started before the collector, as the binary collector's measuring
    # thread is (coverage.py would trace a thread started after it on its own).
    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(lambda: None).result()

    def on_thread(fn):  # noqa: ANN001, ANN202
        return pool.submit(fn).result()

    def files(h: Hits) -> set[str]:
        u = py.universe()
        return {u.files[u.file_of[int(i)]] for i in h.index}

    py.start()
    assert on_thread(lambda: json.dumps({"a": [1, 2]}, indent=1)) == '{\n "a": [\n  1,\n  2\n ]\n}'
    assert py.stop().index.size == 0  # coverage.py follows only the thread that started it
    py.start()
    assert on_thread(py.carried(lambda: json.loads(json.dumps({"b": 1.5}, indent=2)))) == {"b": 1.5}
    carried = py.stop()
    assert {"json/__init__.py", "json/encoder.py"} <= files(carried)
    py.start()  # the next test starts clean: nothing left behind on the other thread
    assert on_thread(lambda: json.dumps([3], indent=1)) and py.stop().index.size == 0
    pool.shutdown()


def test_each_part_of_the_map_weighs_the_same_in_the_reward() -> None:
    virgin = VirginMap(10)
    first = virgin.update(hits(1, 7, 8, 9), [6])
    assert first.parts == ((1, 0), (3, 0)) and reward_of(first) == 1.0
    only_binary = virgin.update(hits(1, 5, 7) + hits(7), [6])  # arc 5 new; block 7 reached twice: a bucket
    assert only_binary.parts == ((1, 0), (0, 1)) and reward_of(only_binary) == pytest.approx((1 + 0.25) / 2)
    assert reward_of(virgin.update(hits(2), [6])) == 0.5  # one new arc, nothing of the other part
    assert virgin.update(hits(2, 3)).parts == ()  # not split: the plain reward
    assert reward_of(virgin.update(hits(4, 9), [6])) == 0.5


def test_collectors_learn_what_a_backend_drives_from_its_declaration() -> None:
    """The worker hands collectors the backends' declarations; a part claims by the package."""
    from nnsmith_cov.backends.registry import declare
    from nnsmith_cov.coverage.python_collector import PythonCollector

    tvm, plug = declare("tvm"), declare("faulty_backends:Segfault")
    assert tvm == DeclaredBackend("tvm", "tvm", "libtvm_compiler.so")
    assert plug == DeclaredBackend("faulty_backends:Segfault", None, "onnxruntime_pybind11_state*")
    assert declare("nowhere:Nothing") == DeclaredBackend("nowhere:Nothing")
    py = PythonCollector(["tvm", "torch.onnx"])
    assert py.claims(tvm) and not py.claims(plug) and not py.claims(declare("ort"))
    # A composite judges a spec by the declaration it was given (none: claimed by no part).
    c = FollowedComposite([Part(), Threaded()], [DeclaredBackend("tvm"), DeclaredBackend("here")])
    assert c.native("here") and not c.native("tvm") and not c.native("elsewhere")


def test_collector_flag_takes_composites_and_refuses_unknown_parts(tmp_path, capsys) -> None:
    code = main(["fuzz", "--collector", "python+nope", "--tests", "1", "-o", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown collector 'python+nope'" in err and "Traceback" not in err


@pytest.mark.slow
def test_python_and_binary_campaign_on_ort_and_tvm(tmp_path) -> None:
    """The default campaign's setting: TVM's Python and ORT's blocks, in one map, per part."""
    out = tmp_path / "run"
    argv = ["fuzz", "--backends", "ort,tvm", "--collector", "python+binary", "--tests", "4", "--seed", "2"]
    assert main([*argv, "--nodes", "5", "-o", str(out)]) == 0
    cov = json.loads((out / "stats.json").read_text())["coverage"]
    parts = cov["parts"]
    assert list(parts) == ["python", "binary"]
    assert parts["python"]["branches"] > 500 and parts["binary"]["branches"] > 5000
    assert parts["python"]["branches"] + parts["binary"]["branches"] == cov["branches"]
    assert main(["fuzz", "--resume", str(out), "--tests", "6"]) == 0  # the same map and parts go on
    resumed = json.loads((out / "stats.json").read_text())
    assert resumed["tests"] == 6
    for name, before in parts.items():
        assert resumed["coverage"]["parts"][name]["branches"] >= before["branches"]
    parts = resumed["coverage"]["parts"]
    assert main(["report", str(out), "-o", str(tmp_path / "report"), "--no-figures"]) == 0
    rows = json.loads((tmp_path / "report" / "report.json").read_text())["campaigns"]
    assert {r["part"]: r["total"] for r in rows} == {k: v["branches"] for k, v in parts.items()}

    again = tmp_path / "replayed"  # replay takes the composite like any collector
    assert main(["replay", str(out), "--backends", "ort,tvm", "--collector", "python+binary", "-o", str(again)]) == 0
    replayed = json.loads((again / "stats.json").read_text())["coverage"]["parts"]
    assert replayed["python"]["branches"] > 500 and replayed["binary"]["branches"] > 5000
