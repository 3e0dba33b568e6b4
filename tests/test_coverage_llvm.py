"""The llvm collector and instrumentation/ on native code: a fixture library with known branches, and onnxoptimizer."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.covmap import classify
from nnsmith_cov.coverage.llvm_collector import LlvmCollector

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "instrumentation"
NATIVE = ROOT / "tests" / "native"
FIXTURE_SRC = NATIVE / "fixture.cc"

pytestmark = pytest.mark.skipif(
    shutil.which("clang-19") is None or shutil.which("llvm-symbolizer-19") is None,
    reason="clang-19 / llvm-19 not installed (make native-tools)",
)


def marker_line(tag: str) -> int:
    """The line of fixture.cc carrying `// LINE <tag>`."""
    for number, text in enumerate(FIXTURE_SRC.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"// LINE {tag}"):
            return number
    raise AssertionError(f"no marker {tag} in {FIXTURE_SRC}")


def kit_compile(out: Path, src: Path, **env: str) -> Path:
    """Build `src` into the shared library `out` with the kit's C++ wrapper."""
    full = dict(os.environ) | env
    subprocess.run([str(KIT / "bin" / "nncov-c++"), "-shared", "-fPIC", "-o", str(out), str(src)], env=full, check=True)
    return out


@pytest.fixture(scope="session")
def native_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("native")
    kit_compile(d / "libnncov_fixture.so", FIXTURE_SRC)
    # The same source kept out of instrumentation by a path filter, and a plain C library.
    kit_compile(d / "libnncov_filtered.so", FIXTURE_SRC, NNCOV_ALLOW="*/no-such-folder/*")
    subprocess.run(
        ["clang-19", "-shared", "-fPIC", "-o", str(d / "libnncov_plain.so"), str(NATIVE / "plain.c")], check=True
    )
    return d


@pytest.fixture(scope="session")
def fixture_lib(native_dir: Path) -> tuple[LlvmCollector, ctypes.CDLL]:
    collector = LlvmCollector(["libnncov_fixture.so"])  # loads the runtime first
    lib = ctypes.CDLL(str(native_dir / "libnncov_fixture.so"))
    lib.fixture_branch.argtypes = [ctypes.c_int]
    lib.fixture_loop.argtypes = [ctypes.c_int]
    return collector, lib


def hits_at(collector: LlvmCollector, call) -> dict[int, int]:
    """line -> summed count of the counters on that line, for one call."""
    collector.start()
    call()
    hits = collector.stop()
    u = collector.universe()
    out: dict[int, int] = {}
    for i, c in zip(hits.index, hits.count):
        out[int(u.line[i])] = out.get(int(u.line[i]), 0) + int(c)
    return out


def test_universe_maps_counters_to_fixture_source(fixture_lib):
    collector, _ = fixture_lib
    u = collector.universe()
    assert u.collector == "llvm" and u.kind == "edge"
    assert u.files == [str(FIXTURE_SRC)]
    assert list(u.target) == list(range(len(u)))
    lines = set(u.line.tolist())
    for tag in ("then", "else", "for", "positive_side", "other_side", "loop_body"):
        assert marker_line(tag) in lines, tag
    assert list(u.build) == ["libnncov_fixture.so"] and len(u.build["libnncov_fixture.so"]) >= 16


def test_branch_counters_follow_the_path_taken(fixture_lib):
    collector, lib = fixture_lib
    then_, else_ = marker_line("then"), marker_line("else")
    pos = hits_at(collector, lambda: lib.fixture_branch(5))
    assert pos.get(then_) == 1 and pos.get(marker_line("positive_side")) == 1
    assert else_ not in pos and marker_line("other_side") not in pos
    neg = hits_at(collector, lambda: lib.fixture_branch(-5))
    assert neg.get(else_) == 1 and neg.get(marker_line("other_side")) == 1
    assert then_ not in neg and marker_line("positive_side") not in neg
    assert marker_line("loop_body") not in pos | neg


def test_same_input_gives_identical_hits(fixture_lib):
    collector, lib = fixture_lib
    runs = []
    for _ in range(2):
        collector.start()
        lib.fixture_branch(7)
        lib.fixture_loop(5)
        runs.append(collector.stop())
    assert np.array_equal(runs[0].index, runs[1].index) and np.array_equal(runs[0].count, runs[1].count)
    assert len(runs[0]) > 0 and runs[0].index.dtype == np.uint32 and runs[0].count.dtype == np.uint32


def test_loop_count_shows_in_buckets(fixture_lib):
    collector, lib = fixture_lib
    body = marker_line("loop_body")  # the function's entry counter: one per iteration
    counts = {n: hits_at(collector, lambda n=n: lib.fixture_loop(n)).get(body, 0) for n in (1, 3, 10, 40)}
    assert counts == {1: 1, 3: 3, 10: 10, 40: 40}
    buckets = classify(np.array(list(counts.values())))
    assert len(set(buckets.tolist())) == 4
    # 8-bit counters wrap: 256 iterations read as 0 (the edge looks untaken), 300 as 44.
    assert body not in hits_at(collector, lambda: lib.fixture_loop(256))
    assert hits_at(collector, lambda: lib.fixture_loop(300)).get(body) == 44


def test_start_forgets_earlier_counts(fixture_lib):
    collector, lib = fixture_lib
    lib.fixture_loop(10)  # outside start/stop
    collector.start()
    assert len(collector.stop()) == 0


def test_not_instrumented_library_is_refused_in_one_line(native_dir, fixture_lib):
    for name in ("libnncov_plain.so", "libnncov_filtered.so"):
        ctypes.CDLL(str(native_dir / name))
        with pytest.raises(CollectorError) as e:
            LlvmCollector([name]).universe()
        msg = str(e.value)
        assert "\n" not in msg
        assert msg == (
            f"llvm collector: {name} is loaded but not instrumented with SanitizerCoverage "
            "(no __sanitizer_cov_8bit_counters_init region)"
        )
    with pytest.raises(CollectorError, match="no loaded library matches 'libnncov_absent.so'"):
        LlvmCollector(["libnncov_absent.so"]).universe()


def test_targets_match_paths_globs_and_basenames(native_dir, fixture_lib):
    collector, _ = fixture_lib
    size = len(collector.universe())
    for target in (str(native_dir / "libnncov_fixture.so"), "libnncov_fix*.so", f"{native_dir}/*fixture*"):
        assert len(LlvmCollector([target]).universe()) == size


def test_cmake_toolchain_fixes_settings_at_configure_time(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed (make native-tools)")
    src = tmp_path / "src"
    src.mkdir()
    (src / "tool.cc").write_text("int main() { return 0; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(fx CXX)\n"
        f"add_library(fx SHARED {FIXTURE_SRC})\nadd_executable(tool tool.cc)\n"
    )
    toolchain = KIT / "cmake" / "nncov-toolchain.cmake"
    configure_env = dict(os.environ, NNCOV_ALLOW="*/tests/native/*")
    b = tmp_path / "b"
    cmd = ["cmake", "-S", str(src), "-B", str(b), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"]
    subprocess.run(cmd, env=configure_env, check=True, capture_output=True)
    # The build itself runs without NNCOV_* in its environment.
    build_env = {k: v for k, v in os.environ.items() if not k.startswith("NNCOV_")}
    subprocess.run(["cmake", "--build", str(b)], env=build_env, check=True, capture_output=True)
    dyn = subprocess.run(["llvm-nm-19", "-D", str(b / "libfx.so")], capture_output=True, text=True).stdout
    assert "__sanitizer_cov_8bit_counters_init" in dyn
    # tool.cc is outside the allowlist, and a program links the runtime: it runs.
    assert (
        "__sanitizer_cov" not in subprocess.run(["llvm-nm-19", str(b / "tool")], capture_output=True, text=True).stdout
    )
    subprocess.run([str(b / "tool")], check=True)


def _tool_dir(tmp_path: Path, tools: list[str]) -> Path:
    """A PATH folder holding only `tools` (what the kit's scripts need, minus what is under test)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return bin_dir


SHELL_TOOLS = ["bash", "cat", "cut", "dirname", "readlink", "sha256sum", "mkdir", "mktemp", "mv", "rm"]


def _collector_in_fresh_process(tmp_path: Path, path_dir: Path) -> subprocess.CompletedProcess:
    code = (
        "from nnsmith_cov.coverage.collector import CollectorError\n"
        "from nnsmith_cov.coverage.llvm_collector import LlvmCollector\n"
        "try:\n    LlvmCollector([])\nexcept CollectorError as e:\n    print(e)\n"
    )
    env = dict(os.environ, PATH=str(path_dir), NNSMITH_COV_CACHE=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)


def test_missing_clang_is_one_line(tmp_path):
    r = _collector_in_fresh_process(tmp_path, _tool_dir(tmp_path, SHELL_TOOLS + ["llvm-symbolizer-19"]))
    assert r.stdout == (
        "llvm collector: cannot build the counter runtime: clang-19 not found (make native-tools installs clang-19)\n"
    ), r.stderr


def test_missing_symbolizer_is_one_line(tmp_path):
    r = _collector_in_fresh_process(tmp_path, _tool_dir(tmp_path, SHELL_TOOLS + ["clang-19"]))
    assert r.stdout == "llvm collector: llvm-symbolizer-19 not found (make native-tools installs llvm-19)\n", r.stderr


PROFILE_PROBE = r"""
import ctypes, json, sys
from pathlib import Path
from nnsmith_cov.coverage.llvm_profile import ProfileLibrary, branch_report

lib = ctypes.CDLL(sys.argv[1])
prof = ProfileLibrary(sys.argv[1])
prof.reset()
lib.fixture_branch(5)
lib.fixture_loop(4)
first = prof.counters.copy()
prof.reset()
lib.fixture_branch(-5)
second = prof.counters.copy()
# Both tests' summed counts go into the report; the live counters are left as they were.
prof.write_profile(Path("both.profraw"), first + second)
assert (prof.counters == second).all()
rows = branch_report(sys.argv[1], [Path("both.profraw")], Path("both.profdata"))
print(json.dumps([[r.line, r.true_count, r.false_count] for r in rows]))
"""


def test_profile_mode_gives_exact_branch_counts(tmp_path):
    lib = kit_compile(tmp_path / "libnncov_profile.so", FIXTURE_SRC, NNCOV_MODE="profile")
    env = dict(os.environ, LLVM_PROFILE_FILE="/dev/null")
    r = subprocess.run(
        [sys.executable, "-c", PROFILE_PROBE, str(lib)], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {line: (t, f) for line, t, f in json.loads(r.stdout)}
    assert rows[marker_line("if")] == (1, 1)  # `if (x > 0)`: once each way
    assert rows[marker_line("for")] == (4, 1)  # four iterations, one exit
    assert not (tmp_path / "default.profraw").exists()
    # A filter that matches nothing leaves no counters.
    skipped = kit_compile(tmp_path / "libnncov_skip.so", FIXTURE_SRC, NNCOV_MODE="profile", NNCOV_ALLOW="*/x/*")
    sections = subprocess.run(["llvm-objdump-19", "-h", str(skipped)], capture_output=True, text=True).stdout
    assert "__llvm_prf_cnts" not in sections


# ---- onnxoptimizer, built from its sdist with the kit -------------------------------------

OPTIMIZER_PROBE = r"""
import json
from onnx import TensorProto, helper
from nnsmith_cov.coverage.llvm_collector import LlvmCollector

collector = LlvmCollector(["onnx_opt_cpp2py_export*"])  # before the optimizer is imported
from nnsmith_cov.backends.onnxoptimizer import OnnxoptimizerBackend
backend = OnnxoptimizerBackend()
assert backend.unavailable() is None, backend.unavailable()
universe = collector.universe()
passes = universe.file_mask(["onnxoptimizer/passes/"])

def model(nodes, inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()

models = {
    "identity": model([helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]),
    "transposes": model([
        helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0]),
        helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0]),
    ]),
}
import numpy as np
from nnsmith_cov.backends.base import Opt
out = {"size": len(universe), "in_passes": int(passes.sum()), "files": len(universe.files)}
x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
for name, data in models.items():
    loaded = backend.load(data)
    collector.start()
    exe = backend.compile(loaded, Opt.OPT)
    hits = collector.stop()
    y = backend.run(exe, {"x": x})["y"]
    ref = np.maximum(x, 0) if name == "identity" else x
    out[name] = {
        "hits": len(hits),
        "pass_hits": [int(i) for i in hits.index if passes[i]],
        "passes": sorted({universe.files[universe.file_of[i]] for i in hits.index if passes[i]}),
        "right": bool(np.allclose(y, ref)),
    }
print(json.dumps(out))
"""


def test_onnxoptimizer_backend_without_build_says_so(tmp_path, monkeypatch):
    from nnsmith_cov.backends.onnxoptimizer import OnnxoptimizerBackend

    monkeypatch.setenv("NNSMITH_COV_CACHE", str(tmp_path))
    reason = OnnxoptimizerBackend().unavailable()
    assert reason == (
        f"onnxoptimizer: no instrumented onnxoptimizer in {tmp_path}/instrumented/onnxoptimizer-0.4.2 "
        "(run make instrumented)"
    )


@pytest.mark.slow
def test_instrumented_onnxoptimizer_reports_pass_branches(tmp_path):
    from nnsmith_cov.coverage.llvm_builds import build_onnxoptimizer

    for tool in ("clang++-19", "cmake", "protoc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (make instrumented)")
    build = build_onnxoptimizer()  # reuses ~/.cache/nnsmith-cov/instrumented/ when built
    assert build.extension.is_file()
    r = subprocess.run([sys.executable, "-c", OPTIMIZER_PROBE], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["size"] > 1000 and out["in_passes"] > 100
    a, b = out["identity"], out["transposes"]
    assert a["right"] and b["right"]
    assert a["passes"] and b["passes"], "no hits in onnxoptimizer/passes/"
    assert all("/onnxoptimizer/passes/" in f for f in a["passes"] + b["passes"])
    assert a["hits"] > 0 and b["hits"] > 0
    assert set(a["pass_hits"]) != set(b["pass_hits"])


# ---- TVM from a source tree, with the kit (the recipe on a fixture tree laid out like TVM's) ----

TVM_TREE = NATIVE / "tvm_tree"

TREE_PROBE = r"""
import json
from nnsmith_cov.coverage.llvm_collector import LlvmCollector

collector = LlvmCollector(["libtvm_*.so"])  # before the package loads its libraries
import tvm
universe = collector.universe()
out = {"files": sorted(set(universe.files)), "build": sorted(universe.build), "lib": tvm.__file__}
out["sort"] = tvm.sort_first(3, 2)
for x in (5, -5):
    collector.start()
    value = tvm.fold(x)
    hits = collector.stop()
    out[str(x)] = {"value": value, "files": sorted({universe.files[universe.file_of[i]] for i in hits.index})}
print(json.dumps(out))
"""


def test_tvm_recipe_builds_a_tree_with_counters_in_src_only(tmp_path, monkeypatch):
    from nnsmith_cov.coverage.llvm_tvm import build_tvm, campaign_hint, find_tvm_build

    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed (make native-tools)")
    monkeypatch.setenv("NNSMITH_COV_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "tvm"
    shutil.copytree(TVM_TREE, source)
    build = build_tvm(source, jobs=2)
    assert build.marker["name"] == "tvm" and build.marker["version"] == "0.0.fixture"
    assert build.root == tmp_path / "cache" / "instrumented" / "tvm-0.0.fixture"
    assert build.extension.name == "libtvm_compiler.so" and build.marker["libraries"] == [
        "libtvm_compiler.so",
        "libtvm_runtime.so",
        "libtvm_runtime_extra.so",  # the contrib kernels (topk) a model calls when it runs
    ]
    assert find_tvm_build(source) == build and build_tvm(source) == build  # reused, not rebuilt
    hint = campaign_hint(build)
    assert str(build.root / "env.sh") in hint and "--collector llvm" in hint
    env_sh = (build.root / "env.sh").read_text()
    assert f"export PYTHONPATH={build.root / 'site'}" in env_sh
    env = dict(os.environ, PYTHONPATH=str(build.root / "site"), NNSMITH_COV_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", TREE_PROBE], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["lib"].startswith(str(build.root / "site"))
    # Counters in TVM's src/ only (names independent of where the tree was), none in 3rdparty/.
    assert "/tvm/src/relax/transform/fold.cc" in out["files"] and "/tvm/src/runtime/runtime.cc" in out["files"]
    assert not any("3rdparty" in f for f in out["files"])
    assert out["5"]["value"] == 11 and out["-5"]["value"] == -5
    assert out["sort"] == 2  # the contrib library was installed beside the others
    assert out["5"]["files"] == ["/tvm/src/relax/transform/fold.cc", "/tvm/src/runtime/runtime.cc"]
    assert out["-5"]["files"] == ["/tvm/src/relax/transform/fold.cc"]
    # The llvm collector's default pass-only filters find the pass and not the runtime.
    from nnsmith_cov.coverage.collector import pass_filters
    from nnsmith_cov.coverage.universe import path_matches

    passes = [f for f in out["files"] if any(path_matches(f, p) for p in pass_filters("llvm"))]
    assert passes == ["/tvm/src/relax/transform/fold.cc"]


def test_tvm_recipe_refuses_what_is_not_a_tvm_tree_in_one_line(tmp_path):
    from nnsmith_cov.coverage.llvm_builds import BuildError
    from nnsmith_cov.coverage.llvm_tvm import build_tvm

    with pytest.raises(BuildError, match=r"^tvm: no source tree at .*DEVELOPERS\.md"):
        build_tvm(tmp_path / "none")
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    with pytest.raises(BuildError, match=r"is not a TVM source tree \(no python/tvm/__init__.py\)$"):
        build_tvm(tmp_path)
    with pytest.raises(BuildError, match="unknown mode"):
        build_tvm(TVM_TREE, mode="gcov")


def test_tvm_recipe_reads_the_cmake_and_version_a_tree_needs(tmp_path):
    from nnsmith_cov.coverage.llvm_builds import BuildError
    from nnsmith_cov.coverage.llvm_tvm import cmake_needed, find_cmake, tvm_version

    source = tmp_path / "tvm"
    shutil.copytree(TVM_TREE, source)
    assert cmake_needed(source) == (3, 16) and tvm_version(source) == "0.0.fixture"
    # A 3rdparty project asking for more than the tree itself decides (tvm-ffi wants 3.26).
    (source / "3rdparty" / "ffi").mkdir()
    (source / "3rdparty" / "ffi" / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 99.1)\n")
    assert cmake_needed(source) == (99, 1)
    with pytest.raises(
        BuildError, match=r"^tvm: the tree needs CMake >= 99\.1, this machine has [0-9.]+: .*pip install"
    ):
        find_cmake(cmake_needed(source))
    if shutil.which("git") is None:
        return
    # A git checkout is named by its tags, as TVM's own version is.
    git = ["git", "-C", str(source), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    subprocess.run([*git, "tag", "v9.8.dev0"], check=True)
    assert tvm_version(source) == "9.8.dev0"


def test_build_script_without_a_tvm_source_says_so_in_one_line():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_instrumented.py"), "tvm"], capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "--source" in r.stderr and "DEVELOPERS.md" in r.stderr


@pytest.mark.slow
def test_instrumented_tvm_from_a_real_source_tree(tmp_path):
    """The real build (hours on two cores): only where NNSMITH_COV_TVM_SOURCE names a TVM tree."""
    from nnsmith_cov.coverage.llvm_tvm import build_tvm

    source = os.environ.get("NNSMITH_COV_TVM_SOURCE")
    if not source:
        pytest.skip("no TVM source tree given (set NNSMITH_COV_TVM_SOURCE; see DEVELOPERS.md)")
    build = build_tvm(Path(source))
    assert b"__sanitizer_cov_8bit_counters_init" in build.extension.read_bytes()
