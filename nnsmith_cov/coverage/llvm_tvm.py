"""An instrumented TVM built from a source tree the user has, with instrumentation/'s Clang kit.

The registries hold no TVM source (DEVELOPERS.md says how to bring a snapshot of
apache/tvm and apache/tvm-ffi onto the machine). Given one, `build_tvm` configures it
with the kit's CMake toolchain file, counters only in TVM's own `src/` (the allowlist),
builds it, and installs it the way TVM's wheel is laid out, under its own prefix:

    <cache>/instrumented/tvm-<version>[-profile]/
        build/          CMake's build folder (reused by a later build: only changed files recompile)
        site/tvm/       the Python package copied from <source>/python/tvm, with lib/ holding
                        the built libtvm_runtime.so and libtvm_compiler.so (the wheel's layout)
        env.sh          `export PYTHONPATH=...`: what a campaign needs to import this TVM
        build.log       configure and compiler output
        BUILT.json      the marker, written last (`llvm_builds.MARKER`, schema 1)

A campaign then measures it with the llvm collector (the counters are read in place):

    . <prefix>/env.sh
    nnsmith-cov fuzz -o camp --backends tvm --collector llvm --cov-targets 'libtvm_*.so'

Nothing here knows TVM's sources beyond their top folders: the logic is tested on a small
fixture tree laid out like TVM's (tests/native/tvm_tree/).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.llvm_builds import (
    MARKER,
    MARKER_SCHEMA,
    BuildError,
    InstrumentedBuild,
    clang_version,
    read_build,
)
from nnsmith_cov.coverage.llvm_runtime import cache_root, kit_dir

# Configure options of a CPU-only TVM like the wheel's, for Debian's LLVM 19. Unknown ones only
# draw a CMake warning, so the fixture tree takes them too.
TVM_CMAKE_OPTIONS = {
    "CMAKE_BUILD_TYPE": "RelWithDebInfo",  # Release strips; the symbolizer needs line tables
    "USE_LLVM": "llvm-config-19",
    "USE_CUDA": "OFF",
    "USE_GTEST": "OFF",
    "HIDE_PRIVATE_SYMBOLS": "OFF",
}
# Only TVM's own compiler sources get counters (3rdparty/, tvm-ffi and the generated code do not).
ALLOW_FOLDERS = ("src",)
# libtvm_runtime_extra holds the contrib kernels (sort, topk) that compiled models call at run time.
LIBRARIES = ("libtvm_runtime.so", "libtvm_runtime_extra.so", "libtvm_compiler.so", "libtvm.so")
MODES = ("sancov", "profile")


def tvm_version(source: Path) -> str:
    """The version the tree declares: `git describe` where it is a git checkout (TVM's own
    version comes from its tags), else `python/tvm/libinfo.py`'s __version__ or pyproject's."""
    if (source / ".git").exists():
        r = subprocess.run(
            ["git", "-C", str(source), "describe", "--tags"], capture_output=True, text=True, check=False
        )
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().lstrip("v")
    for rel, pattern in (
        ("python/tvm/libinfo.py", r'^\s*__version__\s*=\s*"([^"]+)"'),
        ("pyproject.toml", r'^version\s*=\s*"([^"]+)"'),
        ("version.py", r'^__version__\s*=\s*"([^"]+)"'),
    ):
        try:
            m = re.search(pattern, (source / rel).read_text(errors="replace"), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return "dev"


def cmake_needed(source: Path) -> tuple[int, ...]:
    """The highest `cmake_minimum_required` of the tree's top CMakeLists and its 3rdparty
    projects (tvm-ffi asks for more than TVM itself)."""
    found = [(0,)]
    for lists in [source / "CMakeLists.txt", *sorted(source.glob("3rdparty/*/CMakeLists.txt"))]:
        try:
            text = lists.read_text(errors="replace")
        except OSError:
            continue
        for m in re.finditer(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)", text, re.I):
            found.append(tuple(int(x) for x in m.group(1).split(".") if x))
    return max(found)


def _cmake_version(cmake: str) -> tuple[int, ...]:
    try:
        r = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return (0,)
    m = re.search(r"version\s+([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", r.stdout)
    return tuple(int(x) for x in m.groups() if x is not None) if m else (0,)


def find_cmake(needed: tuple[int, ...]) -> str:
    """A CMake at least `needed`: the one PyPI's `cmake` put beside this Python, else the
    system's; a one-line BuildError saying how to get one otherwise."""
    beside = Path(sys.executable).parent / "cmake"
    candidates = [str(beside)] if beside.exists() else []
    if (system := shutil.which("cmake")) is not None:
        candidates.append(system)
    if not candidates:
        raise BuildError("tvm: cmake not found (make native-tools installs it)")
    for cmake in candidates:
        if _cmake_version(cmake) >= needed:
            return cmake
    have = ".".join(map(str, _cmake_version(candidates[-1])))
    want = ".".join(map(str, needed))
    raise BuildError(
        f"tvm: the tree needs CMake >= {want}, this machine has {have}: "
        f"`{sys.executable} -m pip install 'cmake>={want}'` puts one beside this Python"
    )


def check_source(source: Path) -> None:
    """A one-line BuildError unless `source` looks like a TVM tree (CMake project, python/tvm, src/)."""
    if not source.is_dir():
        raise BuildError(f"tvm: no source tree at {source} (see DEVELOPERS.md for bringing one here)")
    missing = [p for p in ("CMakeLists.txt", "python/tvm/__init__.py", "src") if not (source / p).exists()]
    if missing:
        raise BuildError(f"tvm: {source} is not a TVM source tree (no {missing[0]})")


def prefix_for(source: Path, mode: str = "sancov") -> Path:
    suffix = "" if mode == "sancov" else f"-{mode}"
    return cache_root() / "instrumented" / f"tvm-{tvm_version(source)}{suffix}"


def kit_environment(source: Path, mode: str) -> dict[str, str]:
    """The NNCOV_* settings: the mode, the allowlist of TVM's own folders, names independent of
    where the tree lies (`/tvm/src/...`)."""
    src = source.resolve()
    return {
        "NNCOV_MODE": mode,
        "NNCOV_ALLOW": ":".join(f"{src}/{folder}/*" for folder in ALLOW_FOLDERS),
        "NNCOV_PREFIX_MAP": f"{src}=/tvm",
    }


def configure_command(source: Path, build: Path, extra: Sequence[str] = (), cmake: str = "cmake") -> list[str]:
    toolchain = kit_dir() / "cmake" / "nncov-toolchain.cmake"
    cmd = [cmake, "-S", str(source), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    if shutil.which("ccache"):  # rebuilds of a tree of this size are long on two cores
        cmd += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    cmd += [f"-D{k}={v}" for k, v in TVM_CMAKE_OPTIONS.items()]
    return cmd + list(extra)


def find_tvm_build(source: Path, mode: str = "sancov") -> InstrumentedBuild | None:
    return read_build(prefix_for(source, mode))


def build_tvm(
    source: Path,
    mode: str = "sancov",
    force: bool = False,
    jobs: int | None = None,
    echo: bool = False,
    cmake_args: Sequence[str] = (),
) -> InstrumentedBuild:
    """Build and install an instrumented TVM from `source`; reuses a finished build unless `force`."""
    if mode not in MODES:
        raise BuildError(f"tvm: unknown mode {mode!r} (known: {', '.join(MODES)})")
    source = source.resolve()
    check_source(source)
    if shutil.which("clang++-19") is None:
        raise BuildError("tvm: clang++-19 not found (make native-tools installs it)")
    llvm_dev = shutil.which("llvm-config-19") is not None and Path("/usr/lib/llvm-19/include/llvm").is_dir()
    if (source / "cmake" / "modules" / "LLVM.cmake").exists() and not llvm_dev:  # TVM's LLVM codegen links it
        raise BuildError("tvm: LLVM 19's development files are missing (apt-get install llvm-19-dev)")
    cmake = find_cmake(cmake_needed(source))
    root = prefix_for(source, mode)
    if not force and (found := find_tvm_build(source, mode)) is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:  # one build of a prefix at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (found := find_tvm_build(source, mode)) is not None:
            return found
        return _build(source, root, mode, jobs, echo, cmake_args, cmake)


def _build(
    source: Path, root: Path, mode: str, jobs: int | None, echo: bool, cmake_args: Sequence[str], cmake: str
) -> InstrumentedBuild:
    (root / MARKER).unlink(missing_ok=True)
    log = root / "build.log"
    log.write_text("")
    env = dict(os.environ) | kit_environment(source, mode)

    def run(what: str, cmd: list[str]) -> None:
        with log.open("a") as f:
            f.write(f"$ {shlex.join(cmd)}\n")
            f.flush()
            r = subprocess.run(cmd, env=env, stdout=None if echo else f, stderr=None if echo else subprocess.STDOUT)
        if r.returncode:
            raise BuildError(f"tvm: {what} failed with status {r.returncode} (see {log})")

    t0 = time.monotonic()
    build = root / "build"
    run("configure", configure_command(source, build, cmake_args, cmake))
    run("build", [cmake, "--build", str(build), "-j", str(jobs or os.cpu_count() or 1)])
    libs = {name: p for name in LIBRARIES for p in sorted(build.rglob(name))[:1]}
    if not libs:
        raise BuildError(f"tvm: the build left none of {', '.join(LIBRARIES)} in {build}")
    site = root / "site"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(source / "python" / "tvm", site / "tvm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (site / "tvm" / "lib").mkdir(exist_ok=True)
    for name, path in libs.items():
        shutil.copy2(path, site / "tvm" / "lib" / name)
    main = site / "tvm" / "lib" / next(n for n in ("libtvm_compiler.so", "libtvm.so", "libtvm_runtime.so") if n in libs)
    needed = b"__sanitizer_cov_8bit_counters_init" if mode == "sancov" else b"__llvm_prf_cnts"
    if needed not in main.read_bytes():
        raise BuildError(f"tvm: {main.name} was built without the kit's instrumentation (were the wrappers used?)")
    (root / "env.sh").write_text(
        "# Source this before a campaign measures the instrumented TVM (--collector llvm).\n"
        f"export PYTHONPATH={shlex.quote(str(site))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
    )
    marker = {
        "schema": MARKER_SCHEMA,
        "name": "tvm",
        "version": tvm_version(source),
        "mode": mode,
        "source": str(source),
        "build_s": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "compiler": clang_version(),
        "extension": str(main.relative_to(root)),
        "libraries": sorted(libs),
    }
    write_atomic(root / MARKER, json.dumps(marker, indent=1) + "\n")
    return InstrumentedBuild(root, marker)


def campaign_hint(build: InstrumentedBuild) -> str:
    """How to point a campaign at `build`, in two commands."""
    return (
        f". {build.root / 'env.sh'}\n"
        "nnsmith-cov fuzz -o camp --backends tvm --collector llvm --cov-targets 'libtvm_*.so'"
    )
