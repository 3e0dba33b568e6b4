"""Instrumented builds of the native systems under test, made with instrumentation/ into the cache.

A build lives in `<cache>/instrumented/<name>-<version>/` (cache: $NNSMITH_COV_CACHE,
default ~/.cache/nnsmith-cov), outside the repository and outside the venv, so a plain
`import onnxoptimizer` elsewhere never meets a library that needs the counter runtime:

    sdist/      the source distribution as downloaded
    src/        its unpacked tree (compiled in place; file names in the debug info are
                mapped to /<name>-<version>/..., so branch names do not depend on $HOME)
    wheel/      the wheel pip built
    site/       the wheel unpacked: put on sys.path after the runtime is loaded
    build.log   compiler output
    BUILT.json  the marker, written last, e.g. (schema 1)
                {"schema": 1, "name": "onnxoptimizer", "version": "0.4.2", "mode": "sancov",
                 "build_s": 163.2, "built_at": "2026-11-23T10:40:00Z", "compiler": "clang-19 19.1.7",
                 "extension": "site/onnxoptimizer/onnx_opt_cpp2py_export.cpython-311-x86_64-linux-gnu.so"}
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from nnsmith_cov.atomic_file import write_atomic
from nnsmith_cov.coverage.llvm_runtime import cache_root, kit_dir

MARKER = "BUILT.json"
MARKER_SCHEMA = 1
ONNXOPTIMIZER_VERSION = "0.4.2"
# What `pip wheel --no-build-isolation` needs in the running interpreter's environment.
BUILD_REQUIREMENTS = {
    "setuptools": "setuptools>=68",
    "wheel": "wheel",
    "google.protobuf": "protobuf",
    "pybind11": "pybind11",
}


class BuildError(Exception):
    """An instrumented build failed or cannot start here: one line (the log has the rest)."""


@dataclass(frozen=True)
class InstrumentedBuild:
    root: Path
    marker: dict

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def extension(self) -> Path:
        return self.root / self.marker["extension"]

    @property
    def build_s(self) -> float:
        return float(self.marker["build_s"])


def build_dir(name: str = "onnxoptimizer", version: str = ONNXOPTIMIZER_VERSION) -> Path:
    return cache_root() / "instrumented" / f"{name}-{version}"


def find_build(name: str = "onnxoptimizer", version: str = ONNXOPTIMIZER_VERSION) -> InstrumentedBuild | None:
    """The finished build of `name`, or None (no marker, unreadable marker, files gone)."""
    return read_build(build_dir(name, version))


def read_build(root: Path) -> InstrumentedBuild | None:
    """The finished build under `root`, or None (no marker, unreadable marker, files gone)."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("schema") != MARKER_SCHEMA or "extension" not in marker:
        return None
    build = InstrumentedBuild(root, marker)
    return build if build.extension.is_file() else None


def _require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise BuildError(f"{', '.join(missing)} not found (make instrumented installs them)")


def _ensure_python_requirements(log: Path) -> None:
    """Install the build requirements of a no-isolation build into this interpreter's venv."""
    missing = [req for mod, req in BUILD_REQUIREMENTS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        with log.open("a") as f:
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], stdout=f, stderr=f)
        if r.returncode:
            raise BuildError(f"pip install {' '.join(missing)} failed (see {log})")


def clang_version() -> str:
    try:
        out = subprocess.run(["clang-19", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "clang-19 ?"
    first = out.splitlines()[0] if out else ""
    return "clang-19 " + next((w for w in first.split() if w[:1].isdigit()), "?")


def _safe_extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # refuses links and paths leaving dest


def _safe_extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as z:
        for member in z.namelist():
            target = (dest / member).resolve()
            if not target.is_relative_to(dest.resolve()):
                raise BuildError(f"{archive.name}: member {member!r} leaves the folder")
        z.extractall(dest)


def build_onnxoptimizer(force: bool = False, jobs: int | None = None, echo: bool = False) -> InstrumentedBuild:
    """Build onnxoptimizer from its PyPI sdist with SanitizerCoverage on its own sources
    (`onnxoptimizer/`, not the bundled onnx); reuses a finished build unless `force`."""
    version = ONNXOPTIMIZER_VERSION
    root = build_dir("onnxoptimizer", version)
    if not force and (found := find_build("onnxoptimizer", version)) is not None:
        return found
    _require_tools("clang-19", "clang++-19", "cmake", "protoc")
    root.mkdir(parents=True, exist_ok=True)
    # One build at a time (`make instrumented` and a test may start together); whoever
    # waited reuses what the other built.
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (found := find_build("onnxoptimizer", version)) is not None:
            return found
        return _build_onnxoptimizer(root, version, jobs, echo)


def _build_onnxoptimizer(root: Path, version: str, jobs: int | None, echo: bool) -> InstrumentedBuild:
    (root / MARKER).unlink(missing_ok=True)
    log = root / "build.log"
    log.write_text("")
    _ensure_python_requirements(log)

    def run(what: str, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            out = None if echo else f
            r = subprocess.run(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT if not echo else None)
        if r.returncode:
            raise BuildError(f"{what} failed with status {r.returncode} (see {log})")

    t0 = time.monotonic()
    sdist_dir = root / "sdist"
    sdist = sdist_dir / f"onnxoptimizer-{version}.tar.gz"
    if not sdist.is_file():
        run(
            "pip download",
            [sys.executable, "-m", "pip", "download", "-q", "--no-binary", "onnxoptimizer", "--no-deps"]
            + [f"onnxoptimizer=={version}", "-d", str(sdist_dir)],
        )
    if not sdist.is_file():
        raise BuildError(f"pip download left no {sdist.name} in {sdist_dir}")
    src_parent = root / "src"
    shutil.rmtree(src_parent, ignore_errors=True)
    src_parent.mkdir()
    _safe_extract_tar(sdist, src_parent)
    src = src_parent / f"onnxoptimizer-{version}"

    pybind11_dir = subprocess.run(
        [sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    kit = kit_dir()
    env = dict(os.environ)
    env.update(
        CC=str(kit / "bin" / "nncov-cc"),
        CXX=str(kit / "bin" / "nncov-c++"),
        NNCOV_MODE="sancov",
        # Only the optimizer's own sources: the bundled onnx and protobuf code would
        # otherwise be most of the counters.
        NNCOV_ALLOW=f"{src}/onnxoptimizer/*",
        NNCOV_PREFIX_MAP=f"{src}=/onnxoptimizer-{version}",
        # Debian's protobuf 3.21 (the bundled one fetches abseil from the network); its
        # static lite library is not PIC, so link the shared one.
        ONNX_OPT_USE_SYSTEM_PROTOBUF="1",
        CMAKE_ARGS=" ".join(
            [
                "-DONNX_USE_PROTOBUF_SHARED_LIBS=ON",
                f"-Dpybind11_DIR={pybind11_dir}",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
                # Release links with -s; RelWithDebInfo keeps what the symbolizer reads.
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            ]
        ),
        MAX_JOBS=str(jobs or os.cpu_count() or 1),
    )
    wheel_dir = root / "wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    run(
        "pip wheel",
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(wheel_dir), str(src)],
        env=env,
    )
    wheels = sorted(wheel_dir.glob("onnxoptimizer-*.whl"))
    if not wheels:
        raise BuildError(f"pip wheel produced no wheel (see {log})")
    site = root / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    _safe_extract_zip(wheels[0], site)
    exts = sorted(site.glob("onnxoptimizer/onnx_opt_cpp2py_export*.so"))
    if not exts:
        raise BuildError(f"{wheels[0].name} holds no onnx_opt_cpp2py_export extension")
    if b"__sanitizer_cov_8bit_counters_init" not in exts[0].read_bytes():
        raise BuildError(f"{exts[0].name} was built without SanitizerCoverage (were CC/CXX honoured?)")
    marker = {
        "schema": MARKER_SCHEMA,
        "name": "onnxoptimizer",
        "version": version,
        "mode": "sancov",
        "build_s": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "compiler": clang_version(),
        "extension": str(exts[0].relative_to(root)),
    }
    write_atomic(root / MARKER, json.dumps(marker, indent=1) + "\n")
    return InstrumentedBuild(root, marker)
