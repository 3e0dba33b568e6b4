"""The binary collector: Frida Stalker block coverage of ORT's prebuilt module, driven from the parent."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnsmith_cov.backends.registry import declare
from nnsmith_cov.campaign.protocol import decode_arrays, encode_arrays
from nnsmith_cov.campaign.worker_handle import WorkerHandle, WorkerStartError
from nnsmith_cov.coverage.binary_collector import DEFAULT_MODULE, BinaryCollector, sorted_xor
from nnsmith_cov.coverage.binary_symbols import block_hash, read_layout
from nnsmith_cov.coverage.covmap import Hits

pytest.importorskip("frida", reason="the frida package is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")


def _model(kind: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """Small fixed models that exercise different parts of ORT."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    info = helper.make_tensor_value_info
    if kind == "add":
        nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
        inits = []
    elif kind == "conv":
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Sigmoid", ["c"], ["s"]),
            helper.make_node("Mul", ["c", "s"], ["y"]),
        ]
        inits = [numpy_helper.from_array(w, "w")]
    else:  # "reduce"
        nodes = [
            helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0, axes=[2, 3]),
            helper.make_node("Softmax", ["m"], ["y"], axis=1),
        ]
        inits = []
    graph = helper.make_graph(
        nodes, kind, [info("x", TensorProto.FLOAT, list(x.shape))], [info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString(), {"x": x}


def _run(worker: WorkerHandle, kind: str, backend: str = "ort") -> tuple[set[int], dict[str, np.ndarray]]:
    onnx_bytes, inputs = _model(kind)
    request = {"kind": "run", "backend": backend, "opt": "opt", "onnx": onnx_bytes, "inputs": encode_arrays(inputs)}
    reply = worker.call(request, 120)
    assert reply.msg is not None and reply.msg["kind"] == "outputs", reply
    return set(Hits.from_wire(reply.msg["hits"]).index.tolist()), decode_arrays(reply.msg["outputs"])


def _started(specs: list[str], log: Path) -> WorkerHandle:
    """A started worker under the binary collector (the test skipped where frida cannot attach)."""
    w = WorkerHandle(specs, log, collector="binary")
    try:
        w.start()
    except WorkerStartError as e:
        if "cannot attach" in str(e):
            pytest.skip(f"frida cannot attach here: {e}")
        raise
    return w


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory):
    w = _started(["ort"], tmp_path_factory.mktemp("binary") / "worker.log")
    yield w
    w.close()


def test_different_models_reach_different_blocks(worker: WorkerHandle) -> None:
    add, _ = _run(worker, "add")
    conv, _ = _run(worker, "conv")
    assert add and conv
    assert add != conv
    assert conv - add  # the convolution's kernels are blocks the Add model never runs


def test_same_model_twice_same_blocks_but_the_flaky(worker: WorkerHandle) -> None:
    runs = [_run(worker, "reduce")[0] for _ in range(4)]
    masked = set(worker.unstable.tolist())
    # Calibration flags flickering blocks (and the ~1.2k blocks of session set-up that ORT runs
    # in some runs only), not the model's own.
    assert len(masked) < 0.25 * len(runs[0])
    stable = [r - masked for r in runs]
    assert all(s == stable[0] for s in stable[1:])
    assert stable[0]


def test_outputs_under_the_collector_equal_native(worker: WorkerHandle) -> None:
    from nnsmith_cov.backends.ort import run_session, session

    for kind in ("add", "conv", "reduce"):
        onnx_bytes, inputs = _model(kind)
        native = run_session(session(onnx_bytes, optimize=True), inputs)
        _, measured = _run(worker, kind)
        assert measured.keys() == native.keys()
        for name in native:
            assert measured[name].tobytes() == native[name].tobytes(), (kind, name)


def test_killed_worker_is_replaced_and_reattached(worker: WorkerHandle) -> None:
    _run(worker, "conv")
    before, _ = _run(worker, "conv")
    ident = worker.ready["collector"]["ident"]
    onnx_bytes, inputs = _model("conv")
    os.kill(worker.proc.pid, signal.SIGKILL)  # dies with the request in flight
    request = {"kind": "run", "backend": "ort", "opt": "opt", "onnx": onnx_bytes, "inputs": encode_arrays(inputs)}
    dead = worker.call(request, 60)
    assert dead.msg is None and dead.died is not None
    assert worker.attachment is None  # the old session went with the old worker
    _run(worker, "conv")  # a fresh worker, attached anew
    after, _ = _run(worker, "conv")
    assert worker.attachment is not None and worker.starts >= 2
    assert worker.ready["collector"]["ident"] == ident  # the same numbering: the map stays valid
    assert len(before ^ after) <= 0.01 * len(before)


@pytest.mark.parametrize(
    "target, says",
    [("libno_such_module_here*.so", "no module matches"), ("{tmp}/fake.so", "not an ELF file")],
)
def test_missing_or_unsupported_module_is_one_line(tmp_path, target: str, says: str) -> None:
    (tmp_path / "fake.so").write_text("not a shared object\n")
    w = WorkerHandle(["ort"], tmp_path / "w.log", collector="binary", cov_targets=[target.format(tmp=tmp_path)])
    with pytest.raises(WorkerStartError) as e:
        w.start()
    w.close()
    assert says in str(e.value) and "\n" not in str(e.value)


def test_slot_of_matches_the_layout() -> None:
    import glob

    import onnxruntime

    path = glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "onnxruntime_pybind11_state*"))[0]
    layout = read_layout(path)
    f = len(layout.start) // 2
    inside = layout.start[f] + np.arange(0, int(layout.length[f]), dtype=np.uint64)
    slots = layout.slot_of(inside)
    lo, hi = int(layout.slot_base[f]), int(layout.slot_base[f] + layout.slot_mask[f])
    assert ((slots >= lo) & (slots <= hi)).all()
    expect = lo + (block_hash(np.arange(len(inside))) & layout.slot_mask[f]).astype(np.int64)
    assert (slots == expect).all()
    assert layout.slot_of(np.array([0], np.uint64))[0] == -1  # the ELF header is no function
    u = layout.universe()
    assert len(u) == layout.slots and int(u.line[lo]) == int(layout.start[f])


def test_self_check_refuses_a_changed_bit() -> None:
    from nnsmith_cov.coverage.self_check import compare_runs

    native = {"y": np.array([1.0, 2.0, 3.0], np.float32)}
    same = {"y": native["y"].copy()}
    nudged = {"y": np.nextafter(native["y"], np.float32(9))}
    assert compare_runs(native, [same, same]) is None
    problem = compare_runs(native, [same, nudged])
    assert problem is not None and "run 2" in problem and "\n" not in problem
    assert compare_runs(native, [{}]) is not None


def test_returns_take_the_direct_path(worker: WorkerHandle) -> None:
    _run(worker, "conv")
    stats = worker.attachment.stats()
    # Blocks are counted, and returns were given the direct path into compiled blocks (outputs and
    # block sets under it are what the tests above check).
    assert stats["blocks"] > 0 and stats["fast_returns"] > 0


@pytest.fixture(scope="module")
def local() -> BinaryCollector:
    """A collector in this process, no agent: its map, masks and threads. ORT's module, given
    as a target; the backends declared to it say where their code lies (`native`)."""
    import onnxruntime  # noqa: F401  (the module must be loaded for locate_request)

    known = ["ort", "tvm", "trt", "faulty_backends:Segfault", "nowhere:Nothing"]
    return BinaryCollector([DEFAULT_MODULE], backends=[declare(s) for s in known])


def test_stop_reads_every_nonzero_slot_flaky_ones_too(local: BinaryCollector) -> None:
    rng = np.random.default_rng(3)
    n = local.slots
    local.start()
    slots = np.unique(np.concatenate([rng.integers(0, n, 500), [0, 7, 8, n - 1]]))
    local.map[slots] = rng.integers(1, 256, len(slots))
    local.unstable[:] = False
    local.mask(slots[::5])  # flaky slots still ran: the campaign weighs them (VirginMap.flag)
    hits = local.stop()
    assert hits.index.tolist() == slots.tolist()
    assert hits.count.tolist() == local.map[slots].astype(np.uint32).tolist()
    local.unstable[:] = False
    local.start()
    assert len(local.stop()) == 0


def test_calibration_flags_what_a_rerun_differs_in(local: BinaryCollector) -> None:
    def run(*slots: int) -> Hits:
        return Hits.from_arrays(np.array(slots, np.uint32), np.ones(len(slots), np.uint32))

    local.unstable[:] = False
    local.seen[:] = False
    reruns = []
    first = run(3, 10, 11, 40)
    flaky = local.settle(first, lambda: reruns.append(1) or run(3, 10, 40, 41), "k")
    assert flaky.tolist() == [11, 41] and reruns == [1]
    # seen slots are not rerun; the same input again is compared with its last run
    flaky = local.settle(run(3, 10, 12, 40, 41), lambda: reruns.append(2) or run(3, 10, 40, 41), "k")
    assert flaky.tolist() == [12] and reruns == [1, 2]
    flaky = local.settle(run(3, 11), lambda: reruns.append(3) or run(3), "other")
    assert flaky.tolist() == [] and reruns == [1, 2]  # 11 differs, but it is flagged already
    local.unstable[:] = False
    local.seen[:] = False


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 5000)), st.sets(st.integers(0, 5000)))
def test_sorted_xor_is_the_symmetric_difference(a: set[int], b: set[int]) -> None:
    x = np.array(sorted(a), dtype=np.uint32)
    y = np.array(sorted(b), dtype=np.uint32)
    assert sorted_xor(x, y).tolist() == sorted(a ^ b)


def test_measuring_thread_is_fresh_and_the_import_thread_ends(local: BinaryCollector) -> None:
    importer = local.thread
    follow = local.follow_request()
    assert follow["tid"] == importer.tid
    locate = local.locate_request()
    assert locate["tid"] != follow["tid"] and locate["phase"] == "locate" and int(locate["lo"]) > 0
    # The agent follows each thread once: backend calls now run on the new thread only.
    assert local.call(threading.get_native_id) == locate["tid"]
    importer._thread.join(10)
    assert not importer._thread.is_alive()


def test_only_backends_in_the_followed_module_run_on_the_measuring_thread(local: BinaryCollector) -> None:
    """TVM's compiler is not in ORT's module: following it here would count nothing; it runs where
    it is called."""
    assert local.native("tvm") and local.native("trt")
    assert not local.native("ort") and not local.native("faulty_backends:Segfault")  # ORT underneath
    assert not local.native("nowhere:Nothing")  # a backend that does not say is followed
    here = threading.get_native_id()
    assert local.call(threading.get_native_id, "tvm") == here
    assert local.call(threading.get_native_id, "ort") == local.thread.tid != here


def test_self_check_covers_every_followed_backend(tmp_path) -> None:
    """Two backends in the followed module: the worker checks both at start and serves both."""
    specs = ["ort", "faulty_backends:RefusesUnitShapes"]
    w = _started(specs, tmp_path / "worker.log")
    try:
        for spec in specs:
            _run(w, "conv", spec)  # asserts the reply holds outputs
    finally:
        w.close()


# -- TVM's compiler (libtvm_compiler.so from the wheel) ------------------------------------------


class MissingLibrary:
    """A backend that declares a library nothing provides."""

    name = "missing"
    native_module = "libnncov_no_such_library*.so"


def test_modules_come_from_the_backends_declarations() -> None:
    from nnsmith_cov.coverage.declared import declared_modules

    assert declared_modules(map(declare, ["ort", "tvm", "faulty_backends:Segfault"])) == [
        "onnxruntime_pybind11_state*",
        "libtvm_compiler.so",
    ]
    assert declared_modules([declare("nowhere:Nothing")]) == []


def test_a_missing_declared_library_is_one_line() -> None:
    from nnsmith_cov.coverage.collector import CollectorError

    with pytest.raises(CollectorError) as e:
        BinaryCollector([], backends=[declare("test_coverage_binary:MissingLibrary")])
    assert "libnncov_no_such_library" in str(e.value) and "\n" not in str(e.value)


def test_labels_bridge_a_file_and_name_namespaces() -> None:
    from nnsmith_cov.coverage.binary_symbols import _namespace_folder, _normalize, bridge_labels

    a, h = "src/relax/transform/fold_constant.cc", "include/tvm/ir/expr.h"
    assert bridge_labels([a, None, h, a, None, "src/x.cc", None]) == [a, a, a, a, None, "src/x.cc", None]
    assert _normalize("/project/src/relax/transform/fuse_ops.cc") == "src/relax/transform/fuse_ops.cc"
    assert _normalize("/tmp/b/z3-0123456789abcdef0123/src/util/hashtable.h") == "z3/src/util/hashtable.h"
    assert _normalize("/onnxruntime_src/onnxruntime/core/optimizer/x.cc") == "onnxruntime/core/optimizer/x.cc"
    folder = _namespace_folder("tvm::relax::transform::FoldConstant()")
    assert folder == "src/relax/transform/[tvm::relax::transform]"
    assert _namespace_folder("tvm::ExprMutator::VisitExpr(tvm::RelaxExpr const&)") is None


def _tvm_collector() -> BinaryCollector:
    pytest.importorskip("tvm", reason="tvm is not installed")
    return BinaryCollector([], backends=[declare("tvm")])


def test_tvm_compiler_is_found_without_a_flag_and_its_passes_are_labelled() -> None:
    from nnsmith_cov.coverage.collector import pass_filters

    c = _tvm_collector()
    assert [os.path.basename(p) for p in c.paths] == ["libtvm_compiler.so"]
    u = c.universe()
    assert len(u) == c.slots and "libtvm_compiler.so" in u.build
    # Pass-only works on the wheel: each pass folder holds labelled slots.
    for folder in ("src/relax/transform/", "src/tirx/transform/", "src/s_tir/transform/"):
        assert folder in pass_filters("binary") and u.file_mask([folder]).sum() > 10_000, folder
    assert not c.native("tvm")
    # ORT declared beside TVM, with TVM's compiler the module followed: its calls run where made.
    both = BinaryCollector(["libtvm_compiler.so"], backends=[declare("tvm"), declare("ort")])
    assert not both.native("tvm") and both.native("ort")


def _tvm_run(worker: WorkerHandle, kind: str) -> tuple[set[int], dict[str, np.ndarray]]:
    return _run(worker, kind, "tvm")


@pytest.mark.slow
def test_tvm_compiles_under_the_collector_like_natively(tmp_path) -> None:
    """TVM's LLVM JIT maps code for every module it builds (constant folding builds and runs some
    too): the agent places each at fresh addresses, so nothing stale runs. Outputs equal native
    ones, a model's block set is stable, and different models reach different sets."""
    pytest.importorskip("tvm", reason="tvm is not installed")
    from nnsmith_cov.backends.base import Opt
    from nnsmith_cov.backends.tvm import TvmBackend

    w = _started(["tvm"], tmp_path / "worker.log")
    try:
        runs = {kind: [_tvm_run(w, kind) for _ in range(n)] for kind, n in (("add", 3), ("conv", 2))}
        stats = w.attachment.stats()
    finally:
        w.close()
    tvm = TvmBackend()
    masked = set(w.unstable.tolist())
    for kind, got in runs.items():
        onnx_bytes, inputs = _model(kind)
        native = tvm.run(tvm.compile(tvm.load(onnx_bytes), Opt.OPT), inputs)
        for _, outputs in got:
            assert outputs.keys() == native.keys()
            assert all(outputs[k].tobytes() == native[k].tobytes() for k in native), kind
        stable = [blocks - masked for blocks, _ in got]
        assert stable[0] and all(s == stable[0] for s in stable[1:]), kind
        assert len(masked & got[0][0]) < 0.1 * len(got[0][0]), kind
    add, conv = (runs[k][0][0] - masked for k in ("add", "conv"))
    assert conv - add and add != conv
    assert stats["placed"] > 0  # generated code got fresh addresses
    assert stats["slabs_near"] > 0 and stats["slabs_far"] == 0  # every Stalker slab in its window


_JIT_CHILD = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
print("ready", flush=True)  # attaching to an interpreter still starting up can crash frida's loader
sys.stdin.readline()
out, where = [], set()
for value in (1, 2, 3):
    a = libc.mmap(None, 4096, 3, 0x22, -1, 0)  # RW, anonymous: natively the address just freed
    code = bytes([0xB8]) + value.to_bytes(4, "little") + bytes([0xC3])  # mov eax, value; ret
    ctypes.memmove(a, code, len(code))
    libc.mprotect(a, 4096, 5)  # made executable, as a JIT does
    out.append(ctypes.CFUNCTYPE(ctypes.c_int)(a)())
    libc.munmap(a, 4096)
    where.add(a)
print(out, len(where), flush=True)
"""


def test_code_generated_after_code_was_freed_runs_anew() -> None:
    """What killed TVM under the agent: its JIT frees a function's code and the next function's
    code gets the same address; Stalker, trusting blocks once compiled, ran the old translation
    (here natively [1, 1, 1] at one address). The agent gives such mappings fresh addresses, so a
    followed thread sees each function's own result."""
    import subprocess
    import sys

    from agent_child import agent_in

    child = subprocess.Popen(
        [sys.executable, "-c", _JIT_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        # No module to count: the followed range is the whole address space, so the child's own
        # mmap calls (through ctypes) count as the followed module's.
        session, script, params = agent_in(child.pid, hi=1 << 47)
        script.exports_sync.init(params)
        script.exports_sync.locate(params)
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "[1, 2, 3] 3"
    finally:
        child.kill()
        child.wait()


def test_several_modules_lie_end_to_end() -> None:
    from nnsmith_cov.coverage.binary_collector import concat_universes
    from nnsmith_cov.coverage.universe import Universe

    def one(name: str, n: int) -> Universe:
        i = np.arange(n, dtype=np.int32)
        return Universe("binary", "block", {name: "id-" + name}, [name, f"src/{name}.cc"], i % 2, i, i)

    a, b = one("liba.so", 5), one("libb.so", 3)
    both = concat_universes([a, b])
    assert concat_universes([a]) is a  # one module: its own universe, numbering unchanged
    assert len(both) == 8 and both.build == {"liba.so": "id-liba.so", "libb.so": "id-libb.so"}
    assert [both.key(i) for i in range(8)] == [a.key(i) for i in range(5)] + [b.key(i) for i in range(3)]


def test_tvm_library_code_of_other_projects_runs_natively() -> None:
    """LLVM, z3 and libstdc++ pieces linked into libtvm_compiler.so after TVM's objects are left
    out of the universe and run natively; TVM's own code up to its last labelled function stays."""
    from nnsmith_cov.coverage.binary_symbols import own_code_end

    assert own_code_end(["src/a.cc", None, "src/b.cc", None, "z3/x.h", None], ("src/",)) == 3
    assert own_code_end([None, "z3/x.h"], ("src/",)) == 2  # nothing of its own labelled: follow all
    c = _tvm_collector()
    (lo, hi), layout = c.layout.excluded.tolist()[0], c.layout
    assert len(c.layout.excluded) == 1 and hi - lo > 50 << 20  # LLVM alone is about 80 MB
    assert int(layout.start[-1] + layout.length[-1]) <= lo  # nothing counted in what runs natively
    labels = [layout.labels[i] for i in layout.label_of]
    assert labels[-1].startswith(("src/", "include/", "3rdparty/", "ffi/"))
    assert not any(x.startswith("z3/") for x in labels[-1000:])


@pytest.mark.slow
def test_a_binary_campaign_on_tvm_resumes(tmp_path, capsys) -> None:
    """`fuzz --collector binary --backends tvm` stores TVM's blocks and resumes where it stopped."""
    pytest.importorskip("tvm", reason="tvm is not installed")
    import json

    from nnsmith_cov.cli import main
    from nnsmith_cov.corpus.store import CorpusStore

    folder = tmp_path / "camp"
    flags = ["--backends", "tvm", "--collector", "binary", "--nodes", "3", "--ops", "Add", "Relu", "Mul"]
    assert main(["fuzz", "-o", str(folder), "--tests", "2", "--seed", "5", *flags]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        first, virgin = store.counters(), store.virgin()
    assert first.tests_run == 2 and virgin is not None and virgin.count() > 1000
    assert json.loads((folder / "config.json").read_text())["collector"] == "binary"
    assert main(["fuzz", "--resume", str(folder), "--tests", "3"]) == 0
    with CorpusStore.open(folder / "lmdb", readonly=True) as store:
        again, virgin2 = store.counters(), store.virgin()
    assert again.tests_run == 3 and again.next_test_id == 3
    assert np.all(virgin2.virgin <= virgin.virgin) and virgin2.count() >= virgin.count()


_ATTACH_AND_EXIT = r"""
import subprocess, sys
from nnsmith_cov.coverage.binary_attach import frida_attach
for _ in range(2):  # the second attach reuses the first one's folder
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    frida_attach(child.pid).detach()
    child.kill()
    child.wait()
"""


def test_frida_leaves_no_files_behind() -> None:
    """Frida unpacks a 10 MB daemon under the temp dir on a process's first attach and never
    removes it; the collector gives it a folder of its own that goes when the process exits."""
    import shutil
    import subprocess
    import sys
    import tempfile

    outer = tempfile.mkdtemp(prefix="nncov-t-")  # short: the daemon's socket path must fit 108 bytes
    try:
        env = os.environ | {"TMPDIR": outer, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        done = subprocess.run([sys.executable, "-c", _ATTACH_AND_EXIT], env=env, capture_output=True, timeout=120)
        if done.returncode != 0 and b"PermissionDenied" in done.stderr:
            pytest.skip("frida cannot attach here")
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert os.listdir(outer) == []
    finally:
        shutil.rmtree(outer, ignore_errors=True)
