"""What a stripped shared object tells about itself: build id, function ranges, approximate file labels.

The binary collector numbers the basic blocks of one prebuilt module (ORT's pip wheel,
TensorRT's libraries) without rebuilding it, so it cannot list the blocks in advance.
Instead each function range of `.eh_frame` (the unwind tables every C++ shared object
keeps, stripped or not) gets a run of *slots*: a power of two, about one per
`SLOT_BYTES` bytes of code, and a block at module offset `o` inside function `f` lands
in slot `base[f] + (block_hash(o - start[f]) & mask[f])`. Slot numbers depend only on
the file, so they are stable for a build id; two blocks of one function may share a
slot (20% of the blocks a few ORT models reach do); blocks outside every range are
not counted. In a module that links other projects in after its own objects (`OWN_CODE`:
TVM's compiler library with LLVM, z3 and libstdc++ pieces), the functions past its own
last one are left out of the slots and run natively (`ModuleLayout.excluded`).

File labels are approximate: a function that loads the address of a source path string
from `.rodata` (ORT's error checks carry `__FILE__`) is labelled with the path it names
most often, its project's sources before headers; a run of functions between two labelled
with the same source file takes that file too (the linker keeps an object file's functions
together); exported functions left without a label are named after their C++ namespace
(`src/relax/transform/[tvm::relax::transform]`); the others are labelled with the module's
file name. Exact file and line mapping needs the build's debug
information, which wheels do not ship.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nnsmith_cov.coverage.collector import CollectorError
from nnsmith_cov.coverage.universe import Universe

SLOT_BYTES = 16  # one slot per this many bytes of a function, rounded up to a power of two
MAX_SLOTS_PER_FUNCTION = 1 << 16
_PATH = re.compile(rb"[A-Za-z0-9_./+-]{4,240}\.(?:cc|cpp|cxx|c|h|hpp|cu|cuh)\x00")


class BinaryFormatError(CollectorError):
    """The module is not an ELF64 little-endian shared object with usable unwind tables."""


@dataclass(frozen=True)
class Section:
    name: str
    addr: int
    offset: int
    size: int


@dataclass
class ModuleLayout:
    """Function ranges of one module and the slots given to each (offsets are ELF virtual addresses)."""

    path: str
    build_id: str
    start: np.ndarray  # uint64, sorted
    length: np.ndarray  # uint64
    slot_base: np.ndarray  # uint32, first slot of each function
    slot_mask: np.ndarray  # uint32, slots of the function minus one
    labels: list[str]  # file label per label index
    label_of: np.ndarray  # int32 per function
    # (start, end) ELF address pairs of code linked in from elsewhere, run natively (`OWN_CODE`)
    excluded: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.uint64))

    @property
    def slots(self) -> int:
        return int(self.slot_base[-1] + self.slot_mask[-1] + 1) if len(self.start) else 0

    def slot_of(self, offsets: np.ndarray) -> np.ndarray:
        """Slot per module offset (the agent computes the same); -1 outside every function."""
        offsets = np.asarray(offsets, dtype=np.uint64)
        f = np.searchsorted(self.start, offsets, side="right").astype(np.int64) - 1
        inside = f >= 0
        fi = np.where(inside, f, 0)
        inside &= offsets < self.start[fi] + self.length[fi]
        rel = (offsets - self.start[fi]).astype(np.uint32)
        slot = self.slot_base[fi].astype(np.int64) + (block_hash(rel) & self.slot_mask[fi]).astype(np.int64)
        return np.where(inside, slot, -1)

    def universe(self) -> Universe:
        """One branch per slot: file = the function's label, line = the function's offset,
        target = the slot's ordinal inside its function."""
        per_fn = (self.slot_mask.astype(np.int64) + 1).astype(np.int64)
        fn_of_slot = np.repeat(np.arange(len(self.start)), per_fn)
        ordinal = np.arange(self.slots, dtype=np.int64) - np.repeat(self.slot_base.astype(np.int64), per_fn)
        return Universe(
            "binary",
            "block",
            {os.path.basename(self.path): self.build_id},
            list(self.labels),
            self.label_of[fn_of_slot].astype(np.int32),
            self.start[fn_of_slot].astype(np.int32),
            ordinal.astype(np.int32),
        )


def block_hash(rel: np.ndarray) -> np.ndarray:
    """Spread a block's offset inside its function over the function's slots (uint32 arithmetic,
    the same as the agent's C code)."""
    h = np.asarray(rel, dtype=np.uint32) * np.uint32(2654435761)
    return h ^ (h >> np.uint32(15))


def read_sections(data: bytes, path: str) -> dict[str, Section]:
    if data[:4] != b"\x7fELF":
        raise BinaryFormatError(f"binary collector: {path} is not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise BinaryFormatError(f"binary collector: {path} is not a 64-bit little-endian ELF (unsupported)")
    shoff, shentsize, shnum, shstrndx = struct.unpack_from("<Q", data, 0x28)[0], *struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0 or shentsize != 64:
        raise BinaryFormatError(f"binary collector: {path} has no section table")
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    strtab = raw[shstrndx][4]

    def name(off: int) -> str:
        end = data.index(b"\0", strtab + off)
        return data[strtab + off : end].decode("ascii", "replace")

    return {name(s[0]): Section(name(s[0]), s[3], s[4], s[5]) for s in raw}


def build_id(data: bytes, sections: dict[str, Section]) -> str:
    """The GNU build id; without one, a hash of the file (still stable for the same bytes)."""
    note = sections.get(".note.gnu.build-id")
    if note is not None:
        namesz, descsz, _ = struct.unpack_from("<III", data, note.offset)
        desc = note.offset + 12 + ((namesz + 3) & ~3)
        return data[desc : desc + descsz].hex()
    return "sha256:" + hashlib.sha256(data).hexdigest()[:40]


def function_ranges(data: bytes, sections: dict[str, Section], path: str) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of every FDE listed in `.eh_frame_hdr`'s binary-search table."""
    hdr, frame = sections.get(".eh_frame_hdr"), sections.get(".eh_frame")
    if hdr is None or frame is None:
        raise BinaryFormatError(f"binary collector: {path} has no .eh_frame_hdr (no function ranges)")
    version, ptr_enc, count_enc, table_enc = data[hdr.offset : hdr.offset + 4]
    if version != 1 or count_enc != 0x03 or table_enc != 0x3B or ptr_enc & 0x0F != 0x0B:
        raise BinaryFormatError(f"binary collector: {path}: .eh_frame_hdr encoding not supported")
    (count,) = struct.unpack_from("<I", data, hdr.offset + 8)
    table = np.frombuffer(data, dtype="<i4", count=2 * count, offset=hdr.offset + 12).reshape(count, 2)
    start = table[:, 0].astype(np.int64) + hdr.addr
    fde = table[:, 1].astype(np.int64) + hdr.addr
    # Each FDE: length u32, CIE pointer u32, pc_begin (pcrel sdata4), pc_range (udata4), as
    # GCC and Clang write them for x86-64; an FDE that reads otherwise ends at the next start.
    at = fde - frame.addr + frame.offset
    ok = (at >= frame.offset) & (at + 16 <= frame.offset + frame.size)
    at = np.where(ok, at, frame.offset)
    words = np.frombuffer(data, dtype=np.uint8)
    begin_rel = _i32(words, at + 8)
    length = _i32(words, at + 12).astype(np.int64) & 0xFFFFFFFF
    ok &= fde + 8 + begin_rel == start
    following = np.append(start[1:], start[-1] + 1 if count else 0)
    length = np.where(ok, length, following - start)
    keep = length > 0
    return start[keep].astype(np.uint64), length[keep].astype(np.uint64)


def _i32(words: np.ndarray, at: np.ndarray) -> np.ndarray:
    b = [words[at + k].astype(np.uint32) << np.uint32(8 * k) for k in range(4)]
    return (b[0] | b[1] | b[2] | b[3]).view(np.int32)


def source_labels(data: bytes, sections: dict[str, Section], start: np.ndarray, length: np.ndarray) -> list[str | None]:
    """Per function, the source path it references most through `lea r64, [rip+disp32]`."""
    text, rodata = sections.get(".text"), sections.get(".rodata")
    out: list[str | None] = [None] * len(start)
    if text is None or rodata is None:
        return out
    ro = data[rodata.offset : rodata.offset + rodata.size]
    # A path has a folder: `llvm.dbg.cu` and the like are names, not files.
    found = ((rodata.addr + m.start(), m.group()[:-1].decode("ascii")) for m in _PATH.finditer(ro))
    strings = {at: _normalize(text) for at, text in found if "/" in text}
    if not strings:
        return out
    code = np.frombuffer(data, dtype=np.uint8, count=text.size, offset=text.offset)
    i = np.flatnonzero(((code[:-6] == 0x48) | (code[:-6] == 0x4C)) & (code[1:-5] == 0x8D) & ((code[2:-4] & 0xC7) == 5))
    target = text.addr + i.astype(np.int64) + 7 + _i32(code, i + 3)
    addrs = np.array(sorted(strings), dtype=np.int64)
    hit = np.isin(target, addrs)
    site = (text.addr + i[hit]).astype(np.uint64)
    fn = np.searchsorted(start, site, side="right").astype(np.int64) - 1
    inside = (fn >= 0) & (site < start[np.maximum(fn, 0)] + length[np.maximum(fn, 0)])
    votes: dict[int, dict[str, int]] = {}
    for f, t in zip(fn[inside].tolist(), target[hit][inside].tolist()):
        per = votes.setdefault(f, {})
        per[strings[t]] = per.get(strings[t], 0) + 1
    for f, per in votes.items():
        # A project file beats a library header that only inlined an assertion into the function,
        # and a source file (most likely the function's own) beats a project header.
        out[f] = max(per.items(), key=lambda kv: (not _library_header(kv[0]), not _is_header(kv[0]), kv[1], kv[0]))[0]
    return out


def _library_header(path: str) -> bool:
    """A path of the toolchain's or a dependency's headers (libstdc++, vcpkg, fetched deps)."""
    return any(part in path for part in ("/include/c++/", "usr/include/", "vcpkg_installed/", "_deps/", "gcc-toolset"))


# Where a build path's project-relative part begins: ORT keeps its top folder in the paths
# (`onnxruntime/core/...`); TVM's wheel is built in `/project` (`src/relax/transform/...`), its
# LLVM in a temporary `llvm-project` checkout.
_ANCHORS = (("onnxruntime/", 0), ("/project/", len("/project/")), ("llvm-project/", len("llvm-project/")))


_VENDORED = re.compile(r"/(z3)-[0-9a-f]{16,}/")  # a dependency unpacked under its commit: `z3/src/...`


def _normalize(path: str) -> str:
    """A build path as a project-relative one (see `_ANCHORS`)."""
    for anchor, skip in _ANCHORS:
        k = path.find(anchor)
        if k >= 0:
            return path[k + skip :]
    m = _VENDORED.search(path)
    if m:
        return m.group(1) + "/" + path[m.end() :]
    return path.lstrip("./")


def bridge_labels(raw: list[str | None]) -> list[str | None]:
    """Give a run of functions that name no source file of their own (no label, or a header's)
    the file their neighbours on both sides name, when that is the same: the linker lays out
    each object file's functions together, so such a run most likely came from that file too."""
    out = list(raw)
    last = -1  # index of the last function labelled with a source file
    for i, label in enumerate(raw):
        if label is None or _is_header(label):
            continue
        if last >= 0 and i - last > 1 and raw[last] == label:
            out[last + 1 : i] = [label] * (i - last - 1)
        last = i
    return out


def _is_header(path: str) -> bool:
    return path.endswith((".h", ".hpp", ".cuh", ".inc"))


def symbol_labels(data: bytes, sections: dict[str, Section], start: np.ndarray) -> list[str | None]:
    """Per function, a folder named after the C++ namespace of the exported symbol at its start
    (`tvm::relax::transform::FoldConstant()` -> `src/relax/transform/[tvm::relax::transform]`),
    for functions that carry no source path. Only the leading lowercase components count as
    namespaces (classes are CamelCase in the projects measured here); needs `c++filt`."""
    out: list[str | None] = [None] * len(start)
    names = dynamic_functions(data, sections)
    if not names:
        return out
    demangled = _demangle([n for _, n in names])
    for (addr, _), name in zip(names, demangled, strict=True):
        f = int(np.searchsorted(start, np.uint64(addr), side="left"))
        if f < len(start) and int(start[f]) == addr:
            folder = _namespace_folder(name)
            if folder is not None:
                out[f] = folder
    return out


def dynamic_functions(data: bytes, sections: dict[str, Section]) -> list[tuple[int, str]]:
    """(address, mangled name) of the functions the module defines in `.dynsym`."""
    sym, text = sections.get(".dynsym"), sections.get(".dynstr")
    if sym is None or text is None:
        return []
    rows = np.frombuffer(data, dtype=_ELF_SYM, count=sym.size // _ELF_SYM.itemsize, offset=sym.offset)
    keep = ((rows["info"] & 0xF) == 2) & (rows["shndx"] != 0) & (rows["value"] != 0)
    out = []
    for name_off, value in zip(rows["name"][keep].tolist(), rows["value"][keep].tolist()):
        end = data.index(b"\0", text.offset + name_off)
        out.append((value, data[text.offset + name_off : end].decode("ascii", "replace")))
    return out


_ELF_SYM = np.dtype(
    [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]
)


def _demangle(names: list[str]) -> list[str]:
    """`names` demangled by `c++filt` (unchanged where it is missing or fails)."""
    import shutil
    import subprocess

    tool = shutil.which("c++filt")
    if tool is None or not names:
        return names
    try:
        done = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return names
    lines = done.stdout.splitlines()
    return lines if done.returncode == 0 and len(lines) == len(names) else names


def _namespace_folder(demangled: str) -> str | None:
    head = demangled.split("(", 1)[0]
    if " " in head:  # a return type in front (templates): its last word is the name
        head = head.rsplit(" ", 1)[-1]
    parts = head.split("::")[:-1]
    spaces = []
    for p in parts:
        if not p or not p.replace("_", "").isalnum() or not p[0].islower():
            break
        spaces.append(p)
    if len(spaces) < 2:
        return None
    return "src/" + "/".join(spaces[1:]) + "/[" + "::".join(spaces) + "]"


# Modules that link other projects in statically, after their own objects: the label prefixes of
# the module's own code. libtvm_compiler.so lays out TVM's objects first, then LLVM (about 80 of
# its 168 MB of code, no source paths to label it), z3 and parts of libstdc++. Those run natively:
# they are not the compiler the paper measured, and following LLVM's code generation cost most of
# the collector's time.
OWN_CODE: dict[str, tuple[str, ...]] = {"libtvm_compiler.so": ("src/", "include/", "3rdparty/", "ffi/")}


def own_code_end(labels: list[str | None], prefixes: tuple[str, ...]) -> int:
    """Index of the first function past the last one labelled with the module's own sources
    (`len(labels)` when none is: then the whole module is followed)."""
    own = [i for i, x in enumerate(labels) if x is not None and x.startswith(prefixes)]
    return own[-1] + 1 if own else len(labels)


def read_layout(path: str) -> ModuleLayout:
    """Parse `path` (tens of MB: a second or two) into its slot layout."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise CollectorError(f"binary collector: cannot read {path} ({e.strerror})") from None
    sections = read_sections(data, path)
    start, length = function_ranges(data, sections, path)
    if not len(start):
        raise BinaryFormatError(f"binary collector: {path} lists no functions in .eh_frame_hdr")
    raw = bridge_labels(source_labels(data, sections, start, length))
    by_symbol = symbol_labels(data, sections, start)
    raw = [r if r is not None else b for r, b in zip(raw, by_symbol, strict=True)]
    excluded = np.zeros((0, 2), dtype=np.uint64)
    prefixes = OWN_CODE.get(os.path.basename(path))
    if prefixes:
        end = own_code_end(raw, prefixes)
        if end < len(start):
            excluded = np.array([[start[end], start[-1] + length[-1]]], dtype=np.uint64)
            start, length, raw = start[:end], length[:end], raw[:end]
    per_fn = np.ceil(length.astype(np.float64) / SLOT_BYTES).clip(1, MAX_SLOTS_PER_FUNCTION)
    slots = (1 << np.ceil(np.log2(per_fn)).astype(np.int64)).astype(np.int64)
    base = np.concatenate([[0], np.cumsum(slots)[:-1]])
    if int(base[-1] + slots[-1]) >= 1 << 31:
        raise BinaryFormatError(f"binary collector: {path} is too large for 31-bit slot numbers")
    module = os.path.basename(path)
    labels = sorted({x for x in raw if x is not None} | {module})
    index = {x: k for k, x in enumerate(labels)}
    label_of = np.array([index[x if x is not None else module] for x in raw], dtype=np.int32)
    return ModuleLayout(
        path,
        build_id(data, sections),
        start,
        length,
        base.astype(np.uint32),
        (slots - 1).astype(np.uint32),
        labels,
        label_of,
        excluded,
    )
