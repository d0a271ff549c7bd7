"""GPU kernel names as the profilers print them, brought to forms that can be compared, and the ncu kernel filter
that selects them.

The same kernel is spelled differently by each tool: Nsight Compute and CUPTI (Kineto, Nsight Systems) demangle with
NVIDIA's demangler (`void at::native::<unnamed>::k<float, (int)4>(T1)`), GNU c++filt writes `(anonymous namespace)`
and `4`, Nsight Systems also keeps the bare function name (`shortName`), and ncu's `--kernel-name-base function`
(its default for `-k`) is the function name alone, without namespaces, template arguments or parameters. Four
forms are compared, strictest first: the whole name (spaces, a leading `void`, the anonymous-namespace spelling,
integer casts and a `[clone .kd]` suffix aside), the name without its parameters, the qualified function (template
arguments and parameters stripped) and the bare function name. Used by analyze_kernels (joining ncu's kernels with a
trace's) and summarize_trace (the ncu command for a trace's top kernels).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["bare_function", "full_form", "instance_form", "is_cut", "is_mangled", "ncu_kernel_filter",
           "ncu_profile_command", "qualified_function"]

_SPACES = re.compile(r"\s+")
_CLONE = re.compile(r"\s*\[clone [^\]]*\]$")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)|<unnamed>|\{anonymous\}")
_INNERMOST_TEMPLATE = re.compile(r"<[^<>]*>")
_LEADING_VOID = re.compile(r"^void\s+")
# A character a bare function name may hold that needs no quoting in a shell's single quotes (a quote would).
_SAFE_BARE = re.compile(r"^[A-Za-z_$][\w$]*$")


def is_mangled(name: str) -> bool:
    """An Itanium C++ ABI symbol (`_Z...`), as ncu prints with --print-kernel-base mangled and Kineto for some
    libraries' kernels."""
    return name.startswith("_Z") and " " not in name


def is_cut(name: str) -> bool:
    """A name cut short by whoever printed it ("...", or brackets left open)."""
    stripped = name.rstrip()
    return stripped.endswith(("...", "\u2026")) or stripped.count("(") > stripped.count(")") or (
        stripped.count("<") > stripped.count(">"))


# NVIDIA's demangler writes non-type template arguments with a cast, `(int)4`, `(unsigned long)4`, `(bool)1`, GNU
# c++filt as literals, `4`, `4ul`, `true`; lambdas as `[lambda(float) (instance 1)]` and `{lambda(float)#1}`.
_INT_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char)\)(?=-?\d)")
_INT_SUFFIX = re.compile(r"(?<=\d)(?:ull|ul|ll|u|l)(?=[,>)\]])", re.IGNORECASE)
_BOOL = {"(bool)1": "true", "(bool)0": "false"}
_GNU_LAMBDA = re.compile(r"\{lambda\(([^{}]*)\)#(\d+)\}")


def full_form(name: str) -> str:
    """The whole name, with what tools print differently made alike: spaces, a leading `void`, the spelling of the
    anonymous namespace, of integer and bool template arguments and of lambdas, a trailing `[clone .kd]`."""
    text = _CLONE.sub("", _SPACES.sub(" ", name.strip()))
    text = _ANONYMOUS.sub("(anonymous namespace)", text)
    text = _INT_SUFFIX.sub("", _INT_CAST.sub("", text))
    for cast, literal in _BOOL.items():
        text = text.replace(cast, literal)
    text = _GNU_LAMBDA.sub(r"[lambda(\1) (instance \2)]", text)
    text = re.sub(r"\s*([<>(),*&])\s*", r"\1", text)  # `float *` and `float*`, `T<a, b>` and `T<a,b>`
    return _LEADING_VOID.sub("", text).rstrip("\u2026.").strip()


def instance_form(name: str) -> str:
    """The whole name without its parameter list: the function with its template arguments, which tells one
    instance of a template from another (NVIDIA's demangler writes the parameters as `T2, T3`, GNU c++filt spells
    them out; NVIDIA also writes `void` before function types inside template arguments)."""
    text = full_form(name)
    if text.endswith(")"):
        depth = 0
        for index in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[index], 0)
            if depth == 0:
                text = text[:index]
                break
    return re.sub(r"(?<=[<,])void ", "", text)


def qualified_function(name: str) -> str:
    """The function's qualified name without template arguments, parameters, return type or anonymous namespaces:
    `at::native::vectorized_elementwise_kernel` for every instance of that template."""
    text = _CLONE.sub("", _SPACES.sub(" ", name.strip()))
    text = _ANONYMOUS.sub("", text)
    while True:  # template arguments, innermost first (they nest, and hold parentheses of their own)
        stripped = _INNERMOST_TEMPLATE.sub("", text)
        if stripped == text:
            break
        text = stripped
    text = text.split("(", 1)[0].split("<", 1)[0]  # the parameters; a template a cut left open
    text = text.strip().rsplit(" ", 1)[-1]  # the return type
    text = re.sub(r"(?:::)+", "::", text).strip(":")
    return text


def bare_function(name: str) -> str:
    """The function's name alone, as ncu's `--kernel-name-base function` (the default for -k) matches it."""
    return qualified_function(name).rsplit("::", 1)[-1]


def _safe_bare(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(b for name in names if _SAFE_BARE.match(b := bare_function(name))))


def ncu_kernel_filter(names: Sequence[str]) -> str | None:
    """The `-k` argument that profiles these kernels (by their bare function names, anchored, escaped), as it is
    typed in a shell: `regex:'^(a|b)$'`; None when no name can be written safely."""
    bare = _safe_bare(names)
    if not bare:
        return None
    return f"regex:'^({'|'.join(re.escape(b) for b in bare)})$'"


def ncu_profile_command(names: Sequence[str], output: str, application: str = "<the application>") -> str | None:
    """The ncu command line that profiles one launch of each kernel with the full section set into `output`.ncu-rep:
    `ncu --set full -k regex:'^(NAME)$' -c 1 -o OUTPUT APP`. With N names, -c N: ncu counts the launches that match
    the filter across all of them (checked with ncu 2024.1 on a report), so N launches cover N kernels when they run
    in turn; a kernel that repeats before the others run takes more than its one."""
    target = ncu_kernel_filter(names)
    if target is None:
        return None
    return f"ncu --set full -k {target} -c {len(_safe_bare(names))} -o {output} {application}"
