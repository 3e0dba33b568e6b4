"""Deduplication signatures: one short, instance-independent line per distinct symptom."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

_HEADLINE_CAP = 300  # characters of a headline; signatures cut after normalizing, so lengths agree

# Lines that belong to a backtrace rather than to the error itself.
_TB_HEADER = re.compile(r"Traceback \(most recent call last\):\s*$")
_FILE_LINE = re.compile(r'^\s*File "[^"]*", line \d+')
_FRAME = re.compile(r"^\s+(?:\d+:\s|\[bt\]|at\s+\S+:\d+)")  # TVM "  0: tvm::...", "[bt] (0) ...", "  at x.cc:12"
_MARKER = re.compile(r"^[\s^~]*\^[\s^~]*$")  # Python's "    ^^^^" / "~~~^^^" under the failing source
_RULE = re.compile(r"^[\s\-=*_]+$")  # "-----" separators around TVM's banner
# A Python exception line: an unindented (dotted) class name, a colon, then text.
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*:\s*\S")


def headline(message: str) -> str:
    """The first line of `message` that says what went wrong (after a traceback: its exception line)."""
    kept: list[tuple[int, str]] = []  # (line number, line) of lines that are not backtrace noise
    last_tb = -1  # line number of the last backtrace line seen
    in_source = False  # inside the indented source lines that follow a 'File "..."' line
    for i, line in enumerate(message.splitlines()):
        if not line.strip():
            continue
        if _TB_HEADER.search(line) or _FILE_LINE.match(line) or _FRAME.match(line):
            last_tb, in_source = i, bool(_FILE_LINE.match(line))
            continue
        if in_source and line[:1].isspace():
            last_tb = i
            continue
        in_source = False
        if _MARKER.match(line) or _RULE.match(line):
            continue
        kept.append((i, line.strip()))
    after = [line for i, line in kept if i > last_tb]
    if last_tb >= 0:  # the exception line follows the (last) traceback; prefer it to other text there
        exc = [line for line in after if _EXC_LINE.match(line)]
        chosen = exc or after or [line for _, line in kept]
    else:
        chosen = [line for _, line in kept]
    return chosen[0][: 4 * _HEADLINE_CAP] if chosen else ""


# Bumped whenever `normalize` changes what it keeps; `same_signature` lets bundles written
# under an older version still match (their text is normalized again).
SIGNATURE_VERSION = 3

# Context PyTorch's exporter appends to an error: the TorchScript value it failed on, its
# type, scope and source line. It names the instance (which value, which shape), not the cause.
_CAUSED_BY = re.compile(r"\s*\[Caused by the value .*$", re.DOTALL)
# A source file, absolute or relative, with its line (and column): "/a/b/nn.py:720:0",
# "src/runtime/ndarray.cc:284", "utils.py(1108)" after a slash. Which copy of the tree and which
# line moved with every edit; the file alone is kept when no folder precedes it.
_SOURCE = re.compile(
    r"(?:[A-Za-z]:)?(?:[\w.~+-]*/)+[\w.+-]+\.(?:py|pyx|pyi|cc|cpp|cxx|c|h|hpp|cu|so)\b"
    r"(?::(?:[0-9]+|N))*(?:\((?:[0-9]+|N)\))?",
    re.ASCII,
)
# TorchScript / Relay / Relax values (%x.3, %60, %lv1, %onnx::Reshape_12) and ONNX value
# names the exporter numbers (onnx::Reshape_12): one name each, whatever the instance's count.
_IR_VALUE = re.compile(r"%[\w.]+(?:::[\w.]+)?", re.ASCII)
_ONNX_VALUE = re.compile(r"\bonnx::([A-Za-z]\w*?)_[0-9]+\b", re.ASCII)
# PyTorch's tensor types, "Half(6, *, 10, strides=[...], requires_grad=0, device=cpu)": the
# sizes and strides of one instance (the element type stays).
_TS_TYPE = re.compile(
    r"\b(Float|Half|Double|BFloat16|Long|Int|Short|Char|Byte|Bool|ComplexFloat|ComplexDouble)"
    r"\((?:[^()\[\]]|\([^()]*\)|\[[^\[\]]*\])*\)",
    re.ASCII,
)
# A quoted node name after "name" ("node with name 'Conv_3'"): the numbering suffix goes.
_QUOTED_NAME = re.compile(r"(\bname:?\s*')([^'/\s]*)(')")

# Applied in order; each keeps digits that are part of a word (float32, Conv2d, int64) untouched.
_SUBS: list[tuple[re.Pattern[str], str]] = [
    # Addresses: 0x7f3a... .
    (re.compile(r"(?<!\w)0[xX][0-9a-fA-F]+", re.ASCII), "0x?"),
    # Graph value names (i12, w3, o7, v45) and TVM temporaries (lv12, gv3, alloc5). The input
    # names come from value ids, so "i64" is a value name here, not a dtype.
    (re.compile(r"\b(lv|gv|alloc|[iwov])[0-9]+\b", re.ASCII), r"\1#"),
    (re.compile(r"\b(lv|gv|alloc)\b(?!#)", re.ASCII), r"\1#"),  # TVM's first temporary has no number
    # Free-standing numbers (in shapes, tuples, "Atan(7)", "file.cc:1532"), incl. sign, decimals
    # and exponents; a number glued to a letter or '_' is part of an identifier and is kept.
    (re.compile(r"(?<!\w)-?(?:[0-9]+(?:\.[0-9]+)*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?(?!\w)", re.ASCII), "N"),
]
_SPACE = re.compile(r"\s+")
# A shape once its numbers are N: "(N, N, N)", "[N,N]", "()", "(N,)". Ranks vary between
# instances of one bug as much as sizes do.
_SHAPE = re.compile(r"[(\[]\s*(?:N\s*,\s*)*N?\s*,?\s*[)\]]")


# Slash-prefixed node names (/Conv_3, /Add_output_0, /layer_2/Relu_1) and the numeric "_3"
# suffixes inside them; a suffix glued to letters ("_3d") is part of the name and is kept.
_NODE = re.compile(r"/[\w./-]+", re.ASCII)
_NODE_SUFFIX = re.compile(r"_[0-9]+(?=[_/.-]|$)", re.ASCII)


# TVM's symbolic text, which one cause prints differently per graph: our symbolic input dims
# (i0_d2), Relax tensor types with or without a static shape, nested T.min/T.max bounds.
_SYM_DIM = re.compile(r"\b([iwov])(?:[0-9]+|#)_d(?:[0-9]+|#)\b", re.ASCII)
_RELAX_TENSOR = re.compile(r'R\.Tensor\((?:[^()]|\([^()]*\))*?dtype="(\w+)"(?:[^()]|\([^()]*\))*\)', re.ASCII)
_MIN_MAX = re.compile(r"T\.(?:min|max)\([^()]*(?:\([^()]*\)[^()]*)*\)", re.ASCII)


def _symbolic(text: str) -> str:
    text = _SYM_DIM.sub("sym", text)
    text = _RELAX_TENSOR.sub(r"R.Tensor(\1)", text)
    while True:  # innermost first: T.min(S, T.min(S, i#_d#)) is one bound
        collapsed = _MIN_MAX.sub("sym", text)
        if collapsed == text:
            return text
        text = collapsed


def normalize(text: str) -> str:
    """`text` with what varies between instances of one bug (numbers, addresses, names) abstracted."""
    text = _CAUSED_BY.sub("", text)
    # Whitespace first, so that the rewrites below never see (or create) edge or run changes.
    text = _SPACE.sub(" ", text).strip()
    # Paths before node names: a path's folders would otherwise read as a node's scopes.
    text = _SOURCE.sub("<src>", text)
    text = _ONNX_VALUE.sub(r"onnx::\1", text)
    text = _IR_VALUE.sub("%v", text)
    text = _QUOTED_NAME.sub(lambda m: m.group(1) + _NODE_SUFFIX.sub("", m.group(2)) + m.group(3), text)
    # "/Conv" and "/Conv_3" are the first and fourth Conv node: one name for both.
    text = _NODE.sub(lambda m: _NODE_SUFFIX.sub("", m.group()), text)
    for pattern, repl in _SUBS:
        text = pattern.sub(repl, text)
    text = _SHAPE.sub("(S)", text)
    return _symbolic(_TS_TYPE.sub(r"\1(T)", text))


def error_signature(backend: str, stage: str, opt: str, error_type: str, message: str) -> str:
    """Signature of a backend exception at `stage` (e.g. compile, execute)."""
    return f"{backend}/{stage}/{opt}: {error_type}: {normalize(headline(message))[:_HEADLINE_CAP]}"


def death_signature(backend: str, stage: str, opt: str, how: str) -> str:
    """Signature of a backend process that died (`how`: "SIGSEGV", "timeout", ...)."""
    return f"{backend}/{stage}/{opt}: {how}"


def mismatch_signature(backend: str, opt: str, reason: str, ops: Sequence[str]) -> str:
    """Signature of wrong outputs; `ops` is the op-type pattern near the first differing output."""
    return f"{backend}/execute/{opt}: inconsistent {reason} near {'<-'.join(ops)}"


def same_signature(recorded: str, now: str) -> bool:
    """Whether a signature on record (possibly written under an older SIGNATURE_VERSION) names
    the same symptom as `now`: equal, or equal once the recorded text is normalized again."""
    if recorded == now:
        return True
    return canonical(recorded) == canonical(now)


def canonical(signature: str) -> str:
    """`signature` normalized again under today's rules: what triage groups by, so a run filed
    under an older SIGNATURE_VERSION groups like a new one."""
    # "backend/stage/opt: Type: text" (or "...: inconsistent ..."): the prefix is not free text.
    where, sep, rest = signature.partition(": ")
    return where + sep + normalize(rest)[:_HEADLINE_CAP]


def short_id(signature: str) -> str:
    """First 12 hex digits of the signature's SHA-1, for folder names."""
    return hashlib.sha1(signature.encode("utf-8")).hexdigest()[:12]
