"""Fault lab: a single-process training run whose loss becomes NaN.

LAB_NAN_MODE=lr (default): linear regression with a far too large learning rate (LAB_LR, default 0.5
on inputs of scale 10); the loss grows to inf and then nan. Each step prints a
"step N loss X grad_norm G" line and an HF-Trainer-like dict
{'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...}.
LAB_NAN_MODE=anomaly: the same loop with torch.autograd.set_detect_anomaly(True) and a "safe sqrt"
(torch.where(y > 0, y.sqrt(), 0)) whose backward yields nan once an output goes negative; autograd
raises "RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output."
"""

import math
import os

import torch
import torch.nn as nn


def run_lr() -> None:
    lr = float(os.environ.get("LAB_LR", "0.5"))
    torch.manual_seed(0)
    n, d, bs = 256, 16, 32
    x = torch.randn(n, d) * 10
    y = x @ torch.randn(d, 1) + 0.1 * torch.randn(n, 1)
    model = nn.Linear(d, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    steps_per_epoch = n // bs
    step = 0
    first_nan = None
    for _epoch in range(4):
        for i in range(steps_per_epoch):
            step += 1
            xb, yb = x[i * bs : (i + 1) * bs], y[i * bs : (i + 1) * bs]
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf")))
            opt.step()
            lv = float(loss.item())
            print(f"step {step} loss {lv:.4f} grad_norm {grad_norm:.4f} lr {lr}", flush=True)
            print(
                {
                    "loss": round(lv, 4),
                    "grad_norm": grad_norm,
                    "learning_rate": lr,
                    "epoch": round(step / steps_per_epoch, 2),
                },
                flush=True,
            )
            if math.isnan(lv) and first_nan is None:
                first_nan = step
            if first_nan is not None and step >= first_nan + 3:
                print(f"loss is nan since step {first_nan}; stopping", flush=True)
                return


def run_anomaly() -> None:
    torch.autograd.set_detect_anomaly(True)
    torch.manual_seed(0)
    d = 8
    x = torch.randn(64, d)
    target = torch.rand(64, 1) * 0.05
    model = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, 1))
    with torch.no_grad():
        model[2].weight.mul_(0.1)
        model[2].bias.fill_(1.0)  # all outputs start positive; training pushes some below 0
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 51):
        opt.zero_grad()
        out = model(x)
        # "safe" sqrt: the forward is finite, but sqrt's backward is nan where out < 0
        pred = torch.where(out > 0, out.sqrt(), torch.zeros_like(out))
        loss = nn.functional.mse_loss(pred, target)
        print(f"step {step} loss {loss.item():.4f} min_out {out.min().item():.4f}", flush=True)
        loss.backward()
        opt.step()


def main() -> None:
    mode = os.environ.get("LAB_NAN_MODE", "lr")
    print(f"torch {torch.__version__} mode {mode}", flush=True)
    if mode == "lr":
        run_lr()
    elif mode == "anomaly":
        run_anomaly()
    else:
        raise SystemExit(f"unknown LAB_NAN_MODE {mode!r}")


if __name__ == "__main__":
    main()
