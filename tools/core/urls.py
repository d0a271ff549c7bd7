"""The HTTP seam: which URLs a tool may contact (loopback, or a host the caller allows by name) and an opener that
follows no redirect and uses no proxy. inference_metrics (a /metrics page) and telemetry_history (a Prometheus API)
both go out through here, so the rule is the same for every tool that reaches a URL.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
import urllib.request
from typing import Any

from tools.core.errors import BadInput

__all__ = ["NoRedirect", "checked_url", "is_loopback", "opener"]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect could lead anywhere (another host, a file): it is refused, not followed."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        fp.close()
        raise BadInput(f"{req.full_url} answered {code} redirecting to {newurl[:200]!r}; redirects are not followed.",
                       "Pass the final URL (and allow_host for its host if it is not loopback).")


def checked_url(source: str, allow_host: list[str], example: str = "http://HOST:PORT/metrics") -> str:
    """`source` when it is an http(s) URL without credentials whose host is loopback or in `allow_host`; else
    BadInput naming what to pass (`example` is the URL shape the tool expects)."""
    try:
        parts = urllib.parse.urlsplit(source)
        _ = parts.port  # a port that is not a number raises here
    except ValueError as exc:
        raise BadInput(f"{source[:200]!r} is not a valid URL: {exc}.", f"Use {example}.") from exc
    if parts.scheme not in ("http", "https"):
        raise BadInput(f"scheme {parts.scheme!r} is not scraped.", "Use http:// or https://, or pass a file path.")
    if parts.username is not None or parts.password is not None:
        raise BadInput("credentials in the URL are not accepted.", "Scrape an endpoint that needs no login.")
    host = (parts.hostname or "").lower()
    if not host:
        raise BadInput(f"{source[:200]!r} names no host.", f"Use {example}.")
    if not (is_loopback(host) or host in {h.lower().strip("[]") for h in allow_host}):
        raise BadInput(f"host {host!r} is not loopback and not in allow_host, so it is not contacted.",
                       f"If you mean to scrape it, pass allow_host=['{host}'] (CLI: --allow-host {host}).")
    return source


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def opener() -> urllib.request.OpenerDirector:
    """An opener with no proxy (a proxy from the environment would see the query and any credential) and no
    redirects."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
