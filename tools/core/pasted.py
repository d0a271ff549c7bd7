"""What a paste box or a page's rendering adds to a command's output before a user hands it over: a list marker or
a quote marker in front of every line (a pastebin rendered as a list, `- hca_id: mthca0`; a chat or forum quote,
`> state: PORT_DOWN (1)`). Such a marker on nearly every line is not the command's, and a reader that anchors on
the command's own line starts (`hca_id:`, `Port 1:`, vmstat's `r  b`) would see nothing: it is taken off first."""

from __future__ import annotations

import re

__all__ = ["without_line_markers"]

_MARKER = re.compile(r"^(?:[-*+]|>(?:[ \t]*>)*)(?:[ \t]|$)")
_MIN_LINES = 3
_SHARE = 0.9  # of the non-blank lines: a marker on fewer is the output's own (a list a tool printed)


def without_line_markers(text: str) -> str:
    """`text` without the one marker nearly every non-blank line starts with, else `text` as it is."""
    lines = text.splitlines()
    filled = [line for line in lines if line.strip()]
    if len(filled) < _MIN_LINES:
        return text
    marked = [m.group(0).rstrip() for line in filled if (m := _MARKER.match(line)) is not None]
    if len(marked) < _SHARE * len(filled) or len(set(marked)) != 1:
        return text
    return "\n".join(_MARKER.sub("", line, count=1) for line in lines) + ("\n" if text.endswith("\n") else "")
