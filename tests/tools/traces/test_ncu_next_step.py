"""summarize_trace's next step for a busy GPU whose compute kernels hold the time: the Nsight Compute command line for
its top kernels, pointing to analyze_kernels. Through the CLI, on real Nsight Systems exports (tests/data/nsys)."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers import REPO, base_env, run_cli

NSYS = REPO / "tests" / "data" / "nsys" / "files"


def summarize(name: str) -> dict[str, Any]:
    done = run_cli(["summarize-trace", name, "--root", str(NSYS), "--json"], base_env(), timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_compute_dominated_trace_names_the_ncu_command_for_its_top_kernels() -> None:
    # Two ranks of a training job, GPU busy ~90 % of the step, flash-attention and GEMM kernels on top.
    result = summarize("nsysai-mfu-2gpu-before.sqlite")
    assert result["bottleneck"] == "gpu_busy"
    step = result["next_steps"][0]
    assert (step["branch"], step["step"]) == ("gpu_utilization_low", "kernels")
    assert step["action"] == (
        "ncu --set full -k regex:'^(flash_fwd_kernel|nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN|"
        "elementwise_kernel)$' -c 3 -o top_kernels <the user's command>, then "
        "analyze_kernels(files=['top_kernels.ncu-rep'], trace=<this trace>)")
    top = [k["share_pct"] for k in result["top_kernels"][:3]]
    assert f"take {sum(top):.0f}%" in step["why"]
    # The step of the largest cause of idle time still follows.
    assert result["next_steps"][1]["step"] == "trace"


def test_a_busy_gpu_held_by_copies_and_an_idle_one_get_no_ncu_step() -> None:
    # Busy, but a host-to-device copy holds 96 % of the GPU time: no kernel's inside to look at.
    copies = summarize("nsysai-h100-2gpu-1s.sqlite")
    assert copies["bottleneck"] == "gpu_busy" and copies["top_kernels"][0]["kind"] == "memory"
    assert not any("ncu" in s["action"] for s in copies["next_steps"])
    # Launch-bound: the GPU idles between kernels, their insides are not what holds the step.
    idle = summarize("flameox-nsight-2025-5-2.sqlite")
    assert idle["bottleneck"] == "launch_bound"
    assert not any("ncu" in s["action"] for s in idle["next_steps"])
