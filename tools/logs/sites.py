"""Where a failure was raised: the source `location` ("path:line") and `function`, read from the failure's
line and the few lines around it (the Python traceback that ends at it, the C++ "Exception raised from"
line PyTorch prints after it, a Lua frame or TensorFlow's `{{node X}}` below it).

The forms come from real logs (tests/data/logs/wild): PyTorch's C++ exceptions, NCCL's `file.cc:LINE NCCL
WARN` prefix, gloo's `[file.cc:LINE]`, CUDA check macros (`file=X line=N`, `[X, N]`, `X: line N`), glog and
TensorFlow's logger prefix, device-side asserts, Python and Lua tracebacks. These run only on the first line
of each finding per file, so Python's `re` is fast enough; each pattern is linear (no nested repeats) and
sees at most SITE_LINE_CHARS of a line.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["SITE_CONTEXT_LINES", "defined_at", "logger_site", "python_frame", "site_facts"]

SITE_CONTEXT_LINES = 6  # a Python frame sits 2-4 lines above its error; "Exception raised from" up to 5 below
SITE_LINE_CHARS = 2000

_PATH = r"[\w./<>\-\[\]~+@:]*?[\w<>\-\]]"  # a source path, possibly with a drive letter or <ipython-input-3>
_SOURCE = r"\.(?:cu|cuh|cc|cpp|cxx|c|h|hpp|py|lua|pyx)"
_NATIVE = r"\.(?:cu|cuh|cc|cpp|cxx|c|h|hpp)"  # a C++ logger's file:line is its CHECK's; a Python logger's is not

# The line's own statement of where it failed, most explicit first: the first pattern that matches wins.
_ON_LINE = [re.compile(p) for p in (
    rf"Exception raised from (?P<function>[\w:~<>]+) at (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)",
    rf"\((?P<function>\w+) at (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)\)",  # PyTorch < 1.7: what(): ... (f at x:N)
    rf"failed at (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)",  # TensorFlow: OP_REQUIRES failed at x.cc:253
    rf"NCCL error in: (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)",
    rf"\[(?:\w+\]\[)?(?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)\]",  # gloo [x.cc:81], TensorRT [error][x.cu:556]
    rf"\bfile=(?P<path>{_PATH}{_SOURCE}) line=(?P<line>\d+)",  # THCudaCheck FAIL file=x line=70
    rf"\[(?P<path>{_PATH}{_SOURCE}), (?P<line>\d+)\]",  # CUDA error 716 [x.cuh, 351]
    rf"(?P<path>{_PATH}{_SOURCE}): line (?P<line>\d+)",
    rf"(?:^|\] )(?P<path>{_PATH}{_SOURCE}):(?P<line>\d+) NCCL (?:WARN|INFO)",  # host:pid:tid [dev] x.cc:N NCCL WARN
    rf"(?:^|\s)(?P<path>{_PATH}{_SOURCE}):(?P<line>\d+):? (?:in function '(?P<function>[\w.:]+)'|"
    rf"(?:void )?(?P<kernel>\w+)(?:<[^>]{{0,200}}>)?\(|(?P<func2>\w+): block)",  # device assert, Lua
    rf" \d+ (?P<path>{_PATH}{_NATIVE}):(?P<line>\d+)\] ",  # glog: F0327 14:22:53.845 4828 x.hpp:179]
    rf"\b[IWEF] (?P<path>{_PATH}{_NATIVE}):(?P<line>\d+)\] ",  # TensorFlow: E tensorflow/x/ring_alg.cc:276]
    rf"\bat (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)",
    rf"^(?:\w+: )?(?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)[:\]] ",
)]

# A function named on the line, when the location patterns did not name one.
_FUNCTION_ON_LINE = [re.compile(p) for p in (
    r"when calling `(?P<function>\w+)\(",  # CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(
    r"\bexpr=(?P<function>\w+)\(",  # CNTK: expr=cublas_gemm(
    r" at function (?P<function>\w+)\(",
    r"\bfailed call to (?P<function>\w+)",  # TensorFlow: failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_...
    r"\bin function '(?P<function>[\w.:]+)'",
    r"^(?:\S+\s+)?what\(\):\s+(?P<function>[A-Z]\w+) [Ff]ailed\b",  # what():  BatchPrefill... Failed with error
)]

# The last line of a Python traceback: 'RuntimeError: ...', 'torch.distributed.DistBackendError: ...' after any prefix.
_EXCEPTION = re.compile(r"(?:^|[\s:\]|])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
_RAISE = re.compile(r"(?:^|[\s\]|])raise [\w.]+\(")  # the innermost frame's source line: raise ValueError(
# A Python frame in the forms tracebacks print: CPython's own, rich's boxed one (`│ /x/y.py:397 in f`), IPython 8's
# (`File ~/x/y.py:1130, in Module._call_impl(self, ...)`).
_PYTHON_FRAMES = [re.compile(p) for p in (
    r'File "(?P<path>[^"]{1,400})", line (?P<line>\d+)(?:, in (?P<function>[\w<>.]+))?',
    r"│\s*(?P<path>[^\s│|\"]{1,400}\.pyx?):(?P<line>\d+) in (?P<function>[\w<>.]+)",
    r"^\W{0,3}File (?P<path>[^\s\"]{1,400}\.pyx?):(?P<line>\d+)(?:, in (?P<function>[\w<>.]+))?",
)]
# TensorFlow 1.x names where a failing op was built: [[node x/Conv3D (defined at /x/layers.py:257) ...
_TF_DEFINED = re.compile(rf"\(defined at (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)\)")
_LUA_FRAME = re.compile(rf"(?P<path>{_PATH}\.lua):(?P<line>\d+): in function '(?P<function>[\w.:]+)'")
_RAISED_FROM = _ON_LINE[0]
# Paddle's enforce: the error's summary, then its source on a line of its own: `  (at /paddle/x/cuda_allocator.cc:69)`.
_PADDLE_AT = re.compile(rf"^\s*\[?\s*\(at (?P<path>{_PATH}{_SOURCE}):(?P<line>\d+)\)")
_TF_NODE = re.compile(r"\[\[\{\{node (?P<function>[\w/.\-]+)\}\}\]\]")  # TensorFlow: [[{{node CollectiveReduceV2_2}}]]


def _text(raw: bytes) -> str:
    return raw[:SITE_LINE_CHARS].decode("utf-8", "replace").rstrip("\r\n")


def _from_line(text: str) -> tuple[str | None, str | None]:
    location = function = None
    for pattern in _ON_LINE:
        found = pattern.search(text)
        if found is not None:
            named = found.groupdict()
            location = f"{named['path']}:{named['line']}"
            function = named.get("function") or named.get("kernel") or named.get("func2")
            break
    if function is None:
        for pattern in _FUNCTION_ON_LINE:
            found = pattern.search(text)
            if found is not None:
                function = found.group("function")
                break
    return location, function


# The source line of the logging call a line's prefix names (NCCL's `x.cc:N NCCL WARN`, glog's `E0501 ... x.cc:N]`,
# c10's and TensorFlow's `[E x.cpp:N]` / `E x.cc:N]`): where the message was printed, not where the program was when
# it failed; a Python traceback printed under the line knows that better (issue 31, round 9).
_LOGGER_SITES = [re.compile(p) for p in (
    rf"(?:^|\] )(?P<path>{_PATH}{_SOURCE}):(?P<line>\d+) NCCL (?:WARN|INFO)",
    rf" \d+ (?P<path>{_PATH}{_NATIVE}):(?P<line>\d+)\] ",
    rf"\b[IWEF] (?P<path>{_PATH}{_NATIVE}):(?P<line>\d+)\] ",
)]


def logger_site(line: bytes) -> str | None:
    """The "path:line" of the logging call that printed `line`, when its prefix names one."""
    text = _text(line)
    for pattern in _LOGGER_SITES:
        found = pattern.search(text)
        if found is not None:
            return f"{found['path']}:{found['line']}"
    return None


@lru_cache(maxsize=4096)  # a log repeating a traceback parses each of its frames once
def python_frame(text: str) -> tuple[str, int, str | None] | None:
    """(path, line, function) of a traceback frame line, in any of the forms tracebacks print."""
    for pattern in _PYTHON_FRAMES:
        found = pattern.search(text)
        if found is not None:
            return found["path"], int(found["line"]), found["function"]
    return None


def defined_at(after: list[bytes]) -> str | None:
    """Where TensorFlow says the failing op was defined ("path:line"), from the lines under its exception."""
    for raw in after[:4]:
        found = _TF_DEFINED.search(_text(raw))
        if found is not None:
            return f"{found['path']}:{found['line']}"
    return None


def _innermost_frame(before: list[str]) -> tuple[str, str | None] | None:
    """The last frame of the Python traceback that ends right above the failure (a frame within four lines of it:
    the frame, its source line, a caret line)."""
    for text in reversed(before[-4:]):
        frame = python_frame(text)
        if frame is not None and frame[2] is not None:
            return f"{frame[0]}:{frame[1]}", frame[2]
    return None


# Julia's stack trace under its `ERROR: ...`: `Stacktrace:`, then frames innermost first, `[1] f(args)` and under it
# `@ Module path/file.jl:28 [inlined]` (issue 31, round 18: CUDA.jl's errors).
_JULIA_STACK = re.compile(r"^\s*Stacktrace:\s*$")
_JULIA_CALL = re.compile(r"^\s*\[1\]\s+(?:#*(?P<function>[A-Za-z_][\w!.]*))")
_JULIA_AT = re.compile(r"^\s*@ (?:\S+ )?(?P<path>\S+\.jl):(?P<line>\d+)\b")


def _julia_frame(after: list[bytes]) -> tuple[str, str | None] | None:
    """The innermost frame of the Julia stack trace right under the failure ("path:line", its function)."""
    texts = [_text(raw) for raw in after[:SITE_CONTEXT_LINES]]
    start = next((i for i, t in enumerate(texts[:2]) if _JULIA_STACK.match(t)), None)
    if start is None:
        return None
    call = _JULIA_CALL.match(texts[start + 1]) if start + 1 < len(texts) else None
    at = _JULIA_AT.match(texts[start + 2]) if start + 2 < len(texts) else None
    if at is None:
        return None
    return f"{at['path']}:{at['line']}", call["function"] if call is not None else None


def site_facts(line: bytes, before: list[bytes], after: list[bytes]) -> dict[str, str]:
    """`location` and `function` of the failure on `line`, from the line itself first, then the traceback
    above it (when the line is a Python exception), then a C++ "Exception raised from f at x:N" below it;
    empty when none is printed."""
    text = _text(line)
    location, function = _from_line(text)
    in_traceback = _EXCEPTION.search(text) is not None or _RAISE.search(text) is not None
    frame = _innermost_frame([_text(b) for b in before]) if in_traceback else None
    if frame is not None:
        location = location or frame[0]
        function = function or frame[1]
    julia = _julia_frame(after)
    if julia is not None:
        location = location or julia[0]
        function = function or julia[1]
    for raw in after:
        text = _text(raw)
        frame_below = _LUA_FRAME.search(text) or _TF_NODE.search(text)
        raised = _RAISED_FROM.search(text)
        paddle = _PADDLE_AT.search(text)
        if paddle is not None:
            location = location or f"{paddle['path']}:{paddle['line']}"
        if frame_below is not None and function is None:
            function = frame_below["function"]
        if raised is not None:
            location = location or f"{raised['path']}:{raised['line']}"
            function = function or raised["function"]
    facts: dict[str, str] = {}
    if location is not None:
        facts["location"] = location
    if function is not None:
        facts["function"] = function
    return facts
