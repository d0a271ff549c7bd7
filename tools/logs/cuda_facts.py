"""The facts of a CUDA error or a GPU OOM read by the form of the message, whichever library printed it (issue 31).

A cuda_error's `error` is the CUDA error's own text as printed, whatever wraps it:
- the driver API's name and string, `CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered`
  (XLA, JAX, numba, TensorFlow's stream executor): both, as printed; the name alone when no string follows;
- the runtime API's name and string side by side, `cudaErrorIllegalAddress an illegal memory access was
  encountered` (RMM/cuDF), `cudaErrorInsufficientDriver : CUDA driver version is insufficient ...` (cuDNN's
  handle check): both; the name alone (`code=700(cudaErrorIllegalAddress)`, the CUDA samples' check) when no text
  follows it;
- PyTorch's `CUDA error: <string>` (`HIP error: <string>` on ROCm): the string, up to where the message goes on (a
  repr's literal `\\n`, cuBLAS's ` when calling `...``, a sentence end);
- a device-side `Assertion `...` failed` printed by a kernel (`block: [..], thread: [..]`): a device-side assert
  triggered, whatever the assertion;
- an exception the taxonomy put in cuda_error (`RuntimeError: ...`, TensorFlow's `UnknownError: ...`): the message
  without the exception's type, the condition of a failed `INTERNAL ASSERT`, and the whole message (not only its
  first sentence) when it says why in its second (`Failed to get convolution algorithm. This is probably because
  cuDNN failed to initialize, ...`).
`cuda_error_code` is the number printed with it (`(35): cudaError...`, `code=700`), `location` the C++ site
(`CUDA error at: file.cpp:45:`), `function` the framework op the source line right above calls (`ret =
torch.addmm(...)`, `return F.conv2d(...)`): the op whose kernel failed.

A cuda_oom's requested size in TensorFlow's stream executor form, `failed to allocate 968.17M (1015196672 bytes)
from device: CUDA_ERROR_OUT_OF_MEMORY`, is the byte count in brackets; its `error` the driver API's name (and
string when printed).

Only facts: what is a finding, and its category, stays with the rules (sop/log_rules.toml). Every pattern is
linear and the lines are short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tools.logs.exceptions import parse_exception
from tools.logs.oom import oom_facts

if TYPE_CHECKING:
    from tools.logs.diagnose import FactValue, Rule, _Hit

__all__ = ["cuda_exception_facts", "cuda_facts", "cuda_error_text", "native_function"]

# The driver API's name, and its string when printed after it.
_DRIVER = re.compile(r"\b(?P<name>CUDA_ERROR_[A-Z][A-Z_]*[A-Z])\b(?::\s*(?P<text>[a-z][a-z ]{2,98}[a-z]))?")
# The runtime API's name followed by its string (' ', ': ' or ' : ' between).
_RUNTIME = re.compile(r"\b(?P<name>cudaError[A-Z]\w*)(?:\s*:\s*|\s+)(?P<text>[A-Za-z]{2}[A-Za-z ]{1,98}[a-z])")
_RUNTIME_NAME = re.compile(r"\b(?P<name>cudaError[A-Z]\w*)\b")
_CODE_BEFORE_NAME = re.compile(r"\((?P<code>\d{1,4})\):?\s*(?:cudaError[A-Z]\w*|CUDA_ERROR_[A-Z_]+)")
# PyTorch's check: the string after 'CUDA error: ', up to where the message goes on.
_TORCH = re.compile(r"\b(?:CUDA|HIP) error: (?P<text>[^.(\n`]{3,120})")  # ROCm's PyTorch says HIP
_TORCH_END = re.compile(r"\\n|\s+when calling\b|\s+at \S+:\d+|\s*[;,]\s*$")
_AT_SITE = re.compile(r"\bCUDA error at:? (?P<location>[^\s:]+(?::[^\s:]+)*?:\d+)(?::|\s)")
_DEVICE_ASSERT = re.compile(r"\bblock: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `")
_INTERNAL_ASSERT = re.compile(r"(?:^|:\s)(?P<condition>[^:]{1,200}? INTERNAL ASSERT FAILED)\b")
_MESSAGE_END = re.compile(r",\s+(?:so try|please|see|consider)\b|\\n")
# The innermost frame's source line right above the error calls a framework op: that op launched the kernel.
_OP_CALL = re.compile(r"^\s*(?:[\w.,\s]+=\s*)?(?:return\s+)?(?:torch(?:\.nn\.functional|\._C\.\w+)?|F|_VF)\."
                      r"(?P<op>[a-z_]\w*)\(")
_CALLED = re.compile(r"when calling `\w+\(")  # the line names the library call itself (cuBLAS): that one
# glog's CHECK: `Check failed: status == CUBLAS_STATUS_SUCCESS (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED`. The
# condition names the success the code expected; the error is what the check prints after it (caffe, MXNet, TF).
_OPERAND = r"[\w:.\->\[\]]+(?:\(\))?"
_CHECK_FAILED = re.compile(r"\bCheck failed: (?:" + _OPERAND + r"\s*(?:==|!=|<=|>=|<|>)\s*" + _OPERAND
                           + r"(?:\s*(?:\|\||&&)\s*)?)+(?:\s*\([^()\s]+ vs\. [^()\s]+\))?\s+(?P<text>\S.{2,200})")
_NEXT_RECORD = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d")  # another thread's glog record run into the line
# A native stack's frames (glog's `*** Check failure stack trace: ***`, `@ 0x7f2f6f1d36a5  caffe::gemv<>()`): the
# innermost one with a name, past the logging and abort machinery, is the function that failed.
_NATIVE_FRAME = re.compile(rb"^\s*@\s+0x[0-9a-f]+\s+(?P<name>\S.*?)\s*$")
_NATIVE_MACHINERY = re.compile(r"^(?:\(unknown\)|\(nil\)|google::|abort|raise|gsignal|__libc|_start|main$)")
_TF_REQUESTED = re.compile(r"failed to allocate [\d.]+ ?[KMGT]?i?B? \((?P<bytes>\d+) bytes\)")
_OOM_LINES_BELOW = 2  # XLA names the request on the line under NCCL's OOM; TensorFlow the node's device
_WHOLE_MESSAGE = 200  # an exception's message up to this long is its error; a longer one, its first sentences


def cuda_error_text(text: str) -> tuple[str | None, int | None]:
    """The CUDA error a line prints, as printed (see the module's docstring), and its number when printed."""
    code_found = _CODE_BEFORE_NAME.search(text)
    code = int(code_found["code"]) if code_found else None
    driver = _DRIVER.search(text)
    if driver is not None and "OUT_OF_MEMORY" not in driver["name"]:
        return (f"{driver['name']}: {driver['text']}" if driver["text"] else driver["name"]), code
    runtime = _RUNTIME.search(text)
    if runtime is not None and not runtime["text"].startswith(("returned", "at ", "in ")):
        separator = text[runtime.end("name"):runtime.start("text")]
        return f"{runtime['name']}{' : ' if ':' in separator else ' '}{runtime['text'].strip()}", code
    torch = _TORCH.search(text)
    if torch is not None:
        cut = _TORCH_END.search(torch["text"])
        error = (torch["text"][:cut.start()] if cut else torch["text"]).strip()
        if len(error) >= 3:
            return error, code
    name = _RUNTIME_NAME.search(text)
    return (name["name"] if name else None), code  # the name is all that was printed


def native_function(after: Sequence[tuple[int, bytes]]) -> str | None:
    """The innermost named frame of the native stack printed under a line, past glog's and libc's own frames."""
    for _, line in after:
        frame = _NATIVE_FRAME.match(line.rstrip(b"\r\n"))
        if frame is None:
            if line.strip() and not line.lstrip().startswith(b"***"):
                return None  # the stack ended before a named frame
            continue
        name = frame["name"].decode("utf-8", "replace")
        if not _NATIVE_MACHINERY.match(name):
            return name
    return None


def cuda_facts(rule_id: str, category: str, facts: dict[str, FactValue], raw: bytes,
               before: Sequence[tuple[int, bytes]] = (), after: Sequence[tuple[int, bytes]] = ()) -> None:
    """Fill in (or correct) a cuda_error's or cuda_oom's facts from its line's form (and the source line above)."""
    text = raw.decode("utf-8", "replace")
    checked = _CHECK_FAILED.search(text)
    if checked is not None and category == "cuda_error":
        text = checked["text"]  # the expected success named in the condition is not the error
        next_record = _NEXT_RECORD.search(text)
        text = text[:next_record.start()].strip() if next_record else text.strip()
        function = native_function(after)
        if function is not None:
            facts.setdefault("function", function)
    above = next((t for _, t in reversed(before) if t.strip()), b"")
    op = _OP_CALL.search(above.decode("utf-8", "replace"))
    if op is not None and category == "cuda_error" and _CALLED.search(text) is None:
        facts.setdefault("function", op["op"])
    if category == "cuda_oom":
        requested = _TF_REQUESTED.search(text)
        if requested is not None and "requested_bytes" not in facts:
            facts["requested_bytes"] = int(requested["bytes"])
        sized: dict[str, object] = {}
        oom_facts(sized, [text, *(t.decode("utf-8", "replace") for _, t in after[:_OOM_LINES_BELOW])])
        for name, value in sized.items():  # the request and the GPU in the other allocators' words (tools/logs/oom.py)
            if isinstance(value, int) and name not in facts:
                facts[name] = value
        driver = _DRIVER.search(text)
        if driver is not None and "OUT_OF_MEMORY" in driver["name"] and "error" not in facts:
            facts["error"] = f"{driver['name']}: {driver['text']}" if driver["text"] else driver["name"]
        return
    if rule_id == "device_assert" and _DEVICE_ASSERT.search(text):
        facts.setdefault("error", "device-side assert triggered")  # what PyTorch then raises for it
        return
    error, code = cuda_error_text(text)
    if error is None and checked is not None and category == "cuda_error":
        error = text
    if error is not None:
        facts["error"] = error
    elif isinstance(facts.get("error"), str):
        facts["error"] = _trim(str(facts["error"]))
    if code is not None:
        facts.setdefault("cuda_error_code", code)
    site = _AT_SITE.search(text)
    if site is not None:
        facts.setdefault("location", site["location"])


def _trim(error: str) -> str:
    cut = _TORCH_END.search(error)
    return error[:cut.start()].strip() if cut and cut.start() >= 3 else error


def _exception_error(message: str) -> str | None:
    """A cuda_error exception's error: the CUDA error in its message, the failed internal assert, or the message."""
    condition = _INTERNAL_ASSERT.search(message)
    if condition is not None:
        return condition["condition"].strip()
    error, _ = cuda_error_text(message)
    if error is not None:
        return error
    cut = _MESSAGE_END.search(message)
    whole = (message[:cut.start()] if cut else message).strip()
    return whole if 3 <= len(whole) <= _WHOLE_MESSAGE else None


def cuda_exception_facts(hits: list[tuple[Rule, _Hit]]) -> None:
    """The exception taxonomy's cuda_error findings: `error` as the CUDA error's text, not 'Type: first sentence'."""
    for rule, hit in hits:
        if rule.category != "cuda_error" or not rule.id.startswith("exception_"):
            continue
        parsed = parse_exception(hit.text.decode("utf-8", "replace").rstrip("\r\n"))
        if parsed is None or not parsed[1]:
            continue
        error = _exception_error(parsed[1])
        if error is not None:
            hit.facts["error"] = error
        _, code = cuda_error_text(parsed[1])
        if code is not None:
            hit.facts.setdefault("cuda_error_code", code)
