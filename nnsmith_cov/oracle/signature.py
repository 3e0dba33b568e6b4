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


# -- defects: what one root cause shares across signatures ---------------------------------
#
# A signature keeps the instance text a backend prints after its message (the expression it
# failed on, a tensor type, which symbolic dim); two graphs that hit one check print it with
# different operands. `defect` folds that text away, so the same check firing from different
# ops or stages is one defect. It is used for grouping and for the reducer's "does the crash
# hold", never for the signatures a campaign files (those stay as fine as SIGNATURE_VERSION says).

# TVM appends the failing call after "However," (binary dtype / matmul checks); the operands
# name the instance, not the check.
_HOWEVER = re.compile(r"\.?\s+However,.*$")
# TVM prints an operator object in full (span, argument docs); the op's name is all that counts,
# and what follows it in a capped signature is that op's documentation, cut at a varying point.
_IR_OP = re.compile(r'ir\.Op\(span=None, ty=ir\.Type\(span=None\), name="([\w.]+)".*$')
# tirx's inverse trigonometric and hyperbolic intrinsics: LLVM codegen lowers each through one
# table of intrinsic rules, and TVM 0.27 lacks the whole family there (acos, asin, atan, asinh
# fail alike while sin/cos/tanh lower): one missing-lowering defect with one fix, not four.
_INVERSE_TRIG = re.compile(r"\btirx\.a(?:sin|cos|tan)h?\b")
# TIR expression classes a converter met where it expected a constant (`dim.value` on a
# symbolic dim): which expression the dim happened to be is the instance.
_PRIM_EXPR = re.compile(r"'(?:Var|SizeVar|Add|Sub|Mul|Div|Mod|FloorDiv|FloorMod|Min|Max|Cast|Select|Call)' object")
# A symbolic expression once dims are `sym`: operators, T.int64(S) casts and brackets around
# at least one `sym`, e.g. "sym * sym * T.int64(S)" or "(sym - T.int64(S)) * T.int64(S)".
_SYM_TERM = r"(?:sym|N|T\.int(?:32|64)\(S\))"
_SYM_EXPR = re.compile(rf"\(?{_SYM_TERM}\)?(?:\s*[-+*/]\s*\(?{_SYM_TERM}\)?)+|\(sym\)")
# tvm::min_value / max_value lack a bool case: a reduction over bool needs one or the other as
# its identity (ReduceMax min_value, ReduceMin max_value), one gap in one helper pair.
_MIN_MAX_VALUE = re.compile(r"Cannot decide (?:min|max)_value")
_RELAX_VAR = re.compile(r"\b(?:lv|gv|alloc|[iwov])#")
# After the first sentence TVM goes on about the instance (a hint naming its dims, a capped
# tail), and an object dump "(span=..." or a structural path "caused by lhs at ..." is the
# instance's IR: the check is said before them.
_TAIL = re.compile(r"(?<=[\w)\]'`])\. .*$|\(span=.*$|,? caused by lhs at .*$")
# Errors raised by Python itself inside a backend's code: their text names no check, so two of
# them are one defect only when they come from one place (the op at fault, the stage).
_GENERIC = re.compile(
    r"NoneType|object has no attribute|object is not (?:subscriptable|iterable|callable)|cannot unpack"
    r"|index out of range|out of bounds|unsupported operand type|^'?[\w.]*'?$"
)


def split(signature: str) -> tuple[str, str, str, str]:
    """(backend, stage, opt, text) of "backend/stage/opt: text"; text is "" for a bare death."""
    where, _, text = signature.partition(": ")
    parts = where.split("/")
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1], "/".join(parts[2:]), text


def defect(signature: str) -> str:
    """The crash text of `signature` with what varies between triggers of one check folded:
    "backend: Type: message" (no stage: one backend message is one check, whichever of our
    stages reached it)."""
    backend, _, _, text = split(canonical(signature))
    text = _HOWEVER.sub("", text)
    text = _IR_OP.sub(r"\1", text)
    text = _INVERSE_TRIG.sub("tirx.<inverse-trig>", text)
    text = _PRIM_EXPR.sub("'<PrimExpr>' object", text)
    text = _RELAX_VAR.sub("v#", text)
    text = _MIN_MAX_VALUE.sub("Cannot decide min_value/max_value", text)
    while True:
        folded = _SYM_EXPR.sub("sym", text)
        if folded == text:
            break
        text = folded
    return f"{backend}: {_TAIL.sub('', text)}"


def is_generic(signature: str) -> bool:
    """Whether the crash text names no check of its own (Python's own errors, a bare death or
    hang): then where it came from must tell defects apart."""
    _, _, _, text = split(signature)
    kind, sep, message = text.partition(": ")
    if not sep:
        return True  # "SIGSEGV", "timeout": a death says nothing of where
    return bool(_GENERIC.search(message.strip())) and kind.rsplit(".", 1)[-1] in _PY_ERRORS


# TVM's ONNX frontend names the node it failed on before re-raising ("Error converting operator
# Expand, with inputs: ..."): the op at fault of an import-time crash.
_CONVERTING = re.compile(r"Error converting operator (\w+)")


def fault_op(log: str) -> str | None:
    """The ONNX op type a backend's log says it failed on (the last one named), if any."""
    found = _CONVERTING.findall(log)
    return found[-1] if found else None


_PY_ERRORS = {"TypeError", "AttributeError", "IndexError", "KeyError", "ValueError", "UnboundLocalError", "NameError"}
