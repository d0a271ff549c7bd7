"""Fault lab: torch.compile graph breaks and recompiles until the recompile limit.

Run with TORCH_LOGS=graph_breaks,recompiles. Uses backend="eager" (no C++ compiler needed).
The compiled function has three graph breaks: print(), .item(), and a data-dependent
`if x.sum() > 0`. It is called with three batch sizes (one recompile, dim 0 becomes dynamic) and
then with a different dtype each time, so Dynamo recompiles until
torch._dynamo.config.recompile_limit (LAB_RECOMPILE_LIMIT, default 2) is hit and falls back to eager
for that frame.
"""

import os

import torch
import torch._dynamo


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin(x.float())).to(x.dtype)
        print("debug: h computed")  # graph break: print
        scale = h.abs().max().item()  # graph break: .item() (capture_scalar_outputs off)
        if h.sum() > 0:  # graph break: data-dependent control flow
            h = h * 2
        return h / (scale + 1.0)


def main() -> None:
    limit = int(os.environ.get("LAB_RECOMPILE_LIMIT", "2"))
    torch._dynamo.config.recompile_limit = limit
    print(
        f"torch {torch.__version__} recompile_limit {torch._dynamo.config.recompile_limit} "
        f"TORCH_LOGS={os.environ.get('TORCH_LOGS', '')}",
        flush=True,
    )
    torch.manual_seed(0)
    model = torch.compile(Block(), backend="eager")
    step = 0
    # shape changes first: the second shape seen makes dim 0 dynamic (automatic_dynamic_shapes)
    for n in [4, 8, 12]:
        step += 1
        y = model(torch.randn(n, 16))
        print(f"step {step} shape {[n, 16]} out {y.sum().item():.4f}", flush=True)
    # then dtype changes: each one fails a dtype guard until the recompile limit is hit
    for dt in [torch.float64, torch.bfloat16, torch.float16]:
        step += 1
        y = model(torch.randn(4, 16).to(dt))
        print(f"step {step} dtype {dt} out {y.float().sum().item():.4f}", flush=True)


if __name__ == "__main__":
    main()
