"""Fault lab: one torch.compile run (backend="eager", CPU) with each graph-break and recompile case that
diagnose_compile names. Run with TORCH_LOGS=graph_breaks,recompiles and stderr to a file; the lines marked
`# case:` are where the log must point.

- print_break: print() inside the compiled function (one graph break, GB0059)
- item_branch: `.item()` then a Python `if` on it (graph break from Tensor.item(), GB0124)
- shape_fn: called with 4, 8 and 12 rows (one recompile: dim 0 becomes dynamic)
- dtype_fn: called with float32 then float64 (one recompile: dtype guard)
- limit_fn: a str argument that changes every call, under recompile_limit=2 (the limit is hit, then eager)
- fullgraph_fn: print() under fullgraph=True (raises Unsupported; printed as a job would print it)
"""

import sys
import traceback

import torch
import torch._dynamo


def print_break(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("print_break: y computed")  # case: print
    return y + 1


def item_branch(x: torch.Tensor) -> torch.Tensor:
    if x.sum().item() > 0:  # case: item
        return x * 2
    return x - 1


def shape_fn(x: torch.Tensor) -> torch.Tensor:  # case: shape
    return x * 3


def dtype_fn(x: torch.Tensor) -> torch.Tensor:  # case: dtype
    return x + 1


def limit_fn(x: torch.Tensor, mode: str) -> torch.Tensor:  # case: limit
    return x * 2 if mode == "double" else x + len(mode)


def fullgraph_fn(x: torch.Tensor) -> torch.Tensor:
    print("fullgraph_fn")  # case: fullgraph
    return x * 2


def main() -> None:
    print(f"torch {torch.__version__}", flush=True)
    compiled = torch.compile(print_break, backend="eager")
    for _ in range(3):
        compiled(torch.ones(4))
    torch.compile(item_branch, backend="eager")(torch.ones(4))
    shaped = torch.compile(shape_fn, backend="eager")
    for rows in (4, 8, 12):
        shaped(torch.ones(rows, 2))
    typed = torch.compile(dtype_fn, backend="eager")
    for dtype in (torch.float32, torch.float64):
        typed(torch.ones(4, dtype=dtype))
    limited = torch.compile(limit_fn, backend="eager")
    with torch._dynamo.config.patch(recompile_limit=2):
        for mode in ("double", "a", "bb", "ccc", "dddd"):
            limited(torch.ones(4), mode)
    try:
        torch.compile(fullgraph_fn, backend="eager", fullgraph=True)(torch.ones(4))
    except Exception:
        traceback.print_exc()  # what an uncaught error prints; the run goes on to flush the logs
    sys.stderr.flush()


if __name__ == "__main__":
    main()
