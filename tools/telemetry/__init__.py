"""GPU telemetry history: dcgm-exporter series read from a Prometheus-compatible API over a job's window, and what
changed on which GPU (telemetry_history).

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.telemetry.client import ENV_URL as PROMETHEUS_URL_ENV
from tools.telemetry.history import TelemetryHistoryInput, TelemetryHistoryResult, telemetry_history

__all__ = ["PROMETHEUS_URL_ENV", "TelemetryHistoryInput", "TelemetryHistoryResult", "telemetry_history"]
