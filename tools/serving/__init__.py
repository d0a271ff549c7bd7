"""Inference serving: the Prometheus /metrics page of vLLM or SGLang, read once or twice, and its latency verdict.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.serving.metrics import InferenceMetricsInput, InferenceMetricsResult, fetch_exposition, inference_metrics
from tools.serving.prometheus import parse_exposition, parse_samples

__all__ = [
    "InferenceMetricsInput",
    "InferenceMetricsResult",
    "fetch_exposition",
    "inference_metrics",
    "parse_exposition",
    "parse_samples",
]
