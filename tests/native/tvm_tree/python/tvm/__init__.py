"""The fixture's Python package: loads its libraries from lib/, as TVM's wheel does."""

import ctypes
import os

_LIB = os.path.join(os.path.dirname(__file__), "lib")
_runtime = ctypes.CDLL(os.path.join(_LIB, "libtvm_runtime.so"), mode=ctypes.RTLD_GLOBAL)
_extra = ctypes.CDLL(os.path.join(_LIB, "libtvm_runtime_extra.so"))
_compiler = ctypes.CDLL(os.path.join(_LIB, "libtvm_compiler.so"))
_compiler.tree_fold.argtypes = [ctypes.c_int]


def fold(x: int) -> int:
    return _compiler.tree_fold(x)


def sort_first(a: int, b: int) -> int:
    return _extra.tree_sort_first(a, b)
