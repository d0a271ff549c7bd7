"""A bounded client of the Prometheus HTTP API (Prometheus, VictoriaMetrics, Thanos, Mimir serve the same /api/v1):
POST form queries, no proxy, no redirects, an answer of at most TELEMETRY_MAX_BYTES, each query within its own timeout
(sent to the server too) and all within the call's deadline. The API's error envelope becomes a message that says
what the server refused and what to change.

Compatible backends (not tested here; shared/notes/metrics_history.md section 2.6): VictoriaMetrics serves the same
API at :8428 (or under /prometheus, /select/<account>/prometheus) and allows 30,000 points a series, above the
10,000 a query here asks for; Thanos Querier adds dedup / partial_response; Mimir and Grafana Cloud need the tenant
header or basic auth below.

Credentials come from the environment only and are never part of a message or a result:
GPU_TRIAGE_PROMETHEUS_TOKEN (bearer), or GPU_TRIAGE_PROMETHEUS_USER and GPU_TRIAGE_PROMETHEUS_PASSWORD (basic, as
Grafana Cloud uses), and GPU_TRIAGE_PROMETHEUS_TENANT (Mimir's X-Scope-OrgID).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from tools.core.errors import BadInput, LimitExceeded, Unavailable, UnreadableInput
from tools.core.limits import TELEMETRY_MAX_BYTES, TELEMETRY_MAX_SERIES, TELEMETRY_QUERY_TIMEOUT_S
from tools.core.urls import opener

__all__ = ["ENV_PASSWORD", "ENV_TENANT", "ENV_TOKEN", "ENV_URL", "ENV_USER", "PromClient", "Series"]

ENV_URL = "GPU_TRIAGE_PROMETHEUS_URL"
ENV_TOKEN = "GPU_TRIAGE_PROMETHEUS_TOKEN"  # noqa: S105 - the variable's name, not a secret
ENV_USER = "GPU_TRIAGE_PROMETHEUS_USER"
ENV_PASSWORD = "GPU_TRIAGE_PROMETHEUS_PASSWORD"  # noqa: S105
ENV_TENANT = "GPU_TRIAGE_PROMETHEUS_TENANT"
_MIN_QUERY_S = 0.5  # a query is not started with less time than this left


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]  # (unix seconds, value); one point for an instant query


def _auth_headers() -> dict[str, str]:
    headers: dict[str, str] = {}
    token = os.environ.get(ENV_TOKEN)
    user, password = os.environ.get(ENV_USER), os.environ.get(ENV_PASSWORD)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif user and password is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if tenant := os.environ.get(ENV_TENANT):
        headers["X-Scope-OrgID"] = tenant
    return headers


@dataclass
class PromClient:
    base_url: str  # checked by tools.core.urls.checked_url; may carry a prefix (/prometheus, /select/0/prometheus)
    deadline: float  # time.monotonic() by which every query must be answered
    query_timeout_s: float = TELEMETRY_QUERY_TIMEOUT_S
    queries: int = 0
    points: int = 0
    bytes_read: int = 0
    _headers: dict[str, str] = field(default_factory=_auth_headers)

    # --------------------------------------------------------------------------------------------- endpoints

    def label_values(self, label: str, start: float | None, end: float | None,
                     match: str | None = None) -> list[str]:
        """The values of `label` over [start, end] (the whole store when they are None)."""
        params: dict[str, Any] = {} if start is None or end is None else {"start": _ts(start), "end": _ts(end)}
        if match:
            params["match[]"] = match
        data = self._call(f"/api/v1/label/{urllib.parse.quote(label)}/values", params, f"the values of {label}",
                          post=False)
        return [str(v) for v in data] if isinstance(data, list) else []

    def labels(self, match: str, start: float, end: float) -> list[str]:
        data = self._call("/api/v1/labels", {"match[]": match, "start": _ts(start), "end": _ts(end)},
                          "the label names")
        return [str(v) for v in data] if isinstance(data, list) else []

    def instant(self, query: str, at: float) -> list[Series]:
        data = self._call("/api/v1/query", {"query": query, "time": _ts(at)}, _short(query), query=True)
        return self._series(data, query, instant=True)

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        data = self._call("/api/v1/query_range", {"query": query, "start": _ts(start), "end": _ts(end),
                                                   "step": f"{step:g}"}, _short(query), query=True)
        return self._series(data, query, instant=False)

    def optional(self, path: str) -> Any:
        """A status endpoint some backends lack (buildinfo, flags): its data, or None on any refusal."""
        try:
            return self._call(path, {}, path, post=False)
        except (UnreadableInput, Unavailable, BadInput):
            return None

    # --------------------------------------------------------------------------------------------- plumbing

    def _series(self, data: Any, query: str, *, instant: bool) -> list[Series]:
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix"):
            raise UnreadableInput(f"{self.base_url} answered {_short(query)} with no vector or matrix.",
                                  "Point url at a Prometheus-compatible query API.")
        result = data.get("result") or []
        if len(result) > TELEMETRY_MAX_SERIES:
            raise LimitExceeded(f"{_short(query)} matched {len(result)} series (limit {TELEMETRY_MAX_SERIES}).",
                                "Narrow the call with nodes, gpus or job.")
        out = []
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            raw = [item["value"]] if instant and "value" in item else item.get("values") or []
            points = []
            for pair in raw:
                try:
                    points.append((float(pair[0]), float(pair[1])))
                except (TypeError, ValueError, IndexError):
                    continue  # NaN stays NaN (float accepts it); anything else is not a sample
            self.points += len(points)
            out.append(Series(labels, points))
        return out

    def _call(self, path: str, params: dict[str, Any], what: str, *, post: bool = True, query: bool = False) -> Any:
        left = self.deadline - time.monotonic()
        if left < _MIN_QUERY_S:
            raise LimitExceeded(f"the call's time ran out before {what} could be asked ({self.queries} queries done).",
                                "Narrow the window, nodes or gpus, raise step_s, or raise the call timeout.")
        timeout_s = min(self.query_timeout_s, left)
        if query:
            params = {**params, "timeout": f"{max(100, int(1000 * timeout_s) - 200)}ms"}  # whole units only
        url = self.base_url.rstrip("/") + path
        body = urllib.parse.urlencode(params, doseq=True)
        headers = {**self._headers, "Accept": "application/json", "Accept-Encoding": "identity"}
        if post:
            request = urllib.request.Request(url, data=body.encode(), headers={
                **headers, "Content-Type": "application/x-www-form-urlencoded"}, method="POST")
        else:
            request = urllib.request.Request(url + ("?" + body if body else ""), headers=headers)
        self.queries += 1
        started = time.monotonic()
        try:
            with opener().open(request, timeout=timeout_s) as response:
                text = self._read(response, started + timeout_s, what, timeout_s)
        except urllib.error.HTTPError as exc:
            try:
                text = self._read(exc, started + timeout_s, what, timeout_s)
            except (OSError, LimitExceeded):
                text = ""
            finally:
                exc.close()
            raise self._refusal(exc.code, text, what) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._slow(what, timeout_s) from exc
            raise Unavailable(f"cannot reach {self.base_url}: {exc.reason}.",
                              "Check the URL and port of the Prometheus API (Prometheus listens on 9090, "
                              "VictoriaMetrics on 8428).") from exc
        except TimeoutError as exc:
            raise self._slow(what, timeout_s) from exc
        except OSError as exc:
            raise Unavailable(f"cannot read {self.base_url}: {exc}.", "Check the URL and port.") from exc
        return _envelope(text, self.base_url, what)

    def _read(self, response: Any, deadline: float, what: str, timeout_s: float) -> str:
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read1(256 * 1024):  # what has arrived: a dripping answer still meets the deadline
            size += len(chunk)
            if size > TELEMETRY_MAX_BYTES:
                raise LimitExceeded(f"the answer to {what} passed {TELEMETRY_MAX_BYTES} bytes; reading stopped.",
                                    "Narrow the call with nodes, gpus or job, or raise step_s.")
            if time.monotonic() > deadline:
                raise self._slow(what, timeout_s)
            chunks.append(chunk)
        self.bytes_read += size
        return b"".join(chunks).decode("utf-8", "replace")

    def _slow(self, what: str, timeout_s: float) -> LimitExceeded:
        return LimitExceeded(f"{self.base_url} did not answer {what} within {timeout_s:.1f} s.",
                             "Check the server's load; narrow the window, nodes or gpus, or raise step_s.")

    def _refusal(self, status: int, text: str, what: str) -> Exception:
        kind, message = "", ""
        try:
            envelope = json.loads(text)
            kind, message = str(envelope.get("errorType", "")), str(envelope.get("error", ""))[:300]
        except (ValueError, AttributeError):
            pass
        if status in (401, 403):
            return Unavailable(f"{self.base_url} answered HTTP {status}: it needs credentials.",
                               f"Set {ENV_TOKEN} (bearer) or {ENV_USER} and {ENV_PASSWORD} in the server's "
                               "environment.")
        if not kind:
            return UnreadableInput(f"{self.base_url} answered HTTP {status} to {what}, not a Prometheus API "
                                   "answer.", "Check the URL's path prefix (e.g. /prometheus, "
                                   "/select/0/prometheus) and that it is the query API, not a /metrics page.")
        if kind == "timeout" or status == 503:
            return LimitExceeded(f"Prometheus gave up on {what} ({kind}: {message}).",
                                 "Narrow the window, nodes or gpus, or raise step_s.")
        if kind == "execution":
            return LimitExceeded(f"Prometheus refused {what} ({kind}: {message}).",
                                 "It would read too many samples: narrow the window, nodes or gpus, or raise step_s.")
        if kind == "bad_data":
            return BadInput(f"Prometheus refused {what} ({kind}: {message}).",
                            "Check start, end and step_s (at most 11,000 points per series).")
        return UnreadableInput(f"Prometheus failed on {what} ({kind}: {message}).", "Check the server.")


def _envelope(text: str, base_url: str, what: str) -> Any:
    try:
        envelope = json.loads(text)
    except ValueError as exc:
        raise UnreadableInput(f"{base_url} answered {what} with something that is not JSON "
                              f"({text[:80]!r}).", "Point url at the Prometheus API root (the part before "
                              "/api/v1), not a web page.") from exc
    if not isinstance(envelope, dict) or envelope.get("status") != "success":
        kind = envelope.get("errorType", "") if isinstance(envelope, dict) else ""
        raise UnreadableInput(f"{base_url} did not answer {what} with success ({kind}).", "Check the server.")
    return envelope.get("data")


def _ts(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _short(query: str) -> str:
    return f"the query {query[:120]!r}" + ("..." if len(query) > 120 else "")
