"""Line repair (issue 31): a log hard-wrapped at a fixed width, as a terminal's copy, a CI page or a paste box cuts
it, read as the lines it was printed in.

A hard wrap shows in the text: every line longer than the width was cut into pieces of exactly that width, so the
longest lines of the file all share one length and the line after each one carries on mid-sentence instead of
starting a record of its own. Tables and runs of same-shaped records (NCCL's ring lines, a device assert repeated
per thread) share a length too, but each of their lines starts like the one before it: those are never joined.
What joins is decided once per file from its first bytes; a rule of one repeated mark (IPython's `-----` above its
header, as long as the header) is a separator, never a cut piece. A hard wrap drops no character, but a paste loses
the space a cut line ended in (GitHub strips trailing blanks): a piece one short of the width was cut at a space and
is joined back with one; a piece of the full width with nothing between. A line that ends in a run of blanks was
padded to the width (a full-screen terminal's copy), not cut: never joined.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["hard_wrap_width", "rejoin_wrapped", "split_records"]

WRAP_MIN_COLUMNS = 60  # narrower cuts are a layout (a column of numbers), not a terminal or a page
_MIN_CUT_LINES = 2  # one long line of the maximum length could be chance
_CUT_SHARE = 0.25  # of the lines at least WRAP_MIN_COLUMNS long, the share that must be cut at the width
_CONTINUED_SHARE = 0.6  # of the cut lines, the share whose next line does not start like a record of its own
_ALIKE_SHARE = 0.8  # of the cut lines, more starting alike than this are records, not pieces
_SHAPE_CHARS = 6
_LETTER = re.compile(r"[^\W\d_]")
_DIGIT = re.compile(r"\d")


def _shape(line: str) -> str:
    """The first characters with letters and digits abstracted: records of one kind start alike. A line that starts
    with a border or a bullet (a table's `|`, a box's `│`, a rule of `=`) is shaped by that character alone: a table's
    rows start with it whatever their cells say."""
    first = line[:1]
    if first and not first.isalnum() and not first.isspace() and first not in "([{<'\"":
        return first
    return _DIGIT.sub("0", _LETTER.sub("a", line[:_SHAPE_CHARS]))


_RULE = re.compile(r"^\s*([^\w\s])\1{9,}\s*$")  # a rule of one repeated mark (IPython's `-----`, `=====`): a separator
# A line padded with blanks to the width (a copy of a full-screen terminal keeps each row's padding, issue 31 round 9):
# its text ended before the width, so it is a whole line, not a piece cut mid-text.
_PADDED = re.compile(r"\s{3,}$")


_SENTENCE_END = re.compile(r"[.!?]$")


def _sentence_ends(piece: str, after: str) -> bool:
    """A line that ends a sentence before one that starts another (`... might be incorrect.` then `For debugging
    ...`): no sign of a cut, so it does not count towards deciding that a file is wrapped (once it is, a cut may fall
    after a full stop too). PyTorch's CUDA error note is 119 characters: with one other line of that length a log
    looked cut at 119 columns (issue 31)."""
    return _SENTENCE_END.search(piece.rstrip()) is not None and after.lstrip()[:1].isupper()


def hard_wrap_width(head: bytes) -> int | None:
    """The width every long line of the file was cut at, when its first bytes (`head`) show one; None for a log
    whose lines have the lengths they were printed with."""
    lines = [line.rstrip("\r") for line in head.decode("utf-8", "replace").split("\n")[:-1]]  # last: maybe cut
    long = [len(line) for line in lines if len(line) >= WRAP_MIN_COLUMNS]
    if len(long) < _MIN_CUT_LINES:
        return None
    width = max(long)
    cut = [i for i, line in enumerate(lines[:-1])
           if len(line) in (width, width - 1) and not _RULE.match(line) and not _PADDED.search(line)]
    if len(cut) < _MIN_CUT_LINES or len(cut) < _CUT_SHARE * len(long):
        return None
    continued = sum(1 for i in cut if lines[i + 1].strip() and _shape(lines[i + 1]) != _shape(lines[i])
                    and not _sentence_ends(lines[i], lines[i + 1]))
    # Records of one kind that happen to be the longest lines (a notebook's autosave line between errors) start
    # alike; the pieces of a wrap start wherever the cut fell.
    alike = Counter(_shape(lines[i]) for i in cut).most_common(1)[0][1]
    if continued < _CONTINUED_SHARE * len(cut) or (len(cut) > _MIN_CUT_LINES and alike > _ALIKE_SHARE * len(cut)):
        return None
    return width


def rejoin_wrapped(block: bytes, width: int) -> bytes:
    """`block` (whole lines) with each line exactly `width` characters long joined to the line after it, unless
    that one starts like it (a table's next row). A cut at the block's end stays cut."""
    joined: list[str] = []
    last_piece = ""  # the physical line the last joined line ends with
    for line in block.decode("utf-8", "surrogateescape").split("\n"):
        piece = last_piece.removesuffix("\r")
        if (joined and line and len(piece) in (width, width - 1) and _shape(line) != _shape(piece)
                and not _RULE.match(piece) and not _PADDED.search(piece)):
            joined[-1] = joined[-1].removesuffix("\r") + ("" if len(piece) == width else " ") + line
        else:
            joined.append(line)
        last_piece = line
    return "\n".join(joined).encode("utf-8", "surrogateescape")


# Several records written into one line (a paste that lost its line breaks, threads writing into one stream): the
# line's own first token (`ptxas`, `OSError:`) comes back after a run of blanks, where the next record starts.
_FIRST_TOKEN = re.compile(r"^\s*(?P<token>[A-Za-z_][\w.]*:?)")
_RECORD_GAP = re.compile(r"\s{3,}")


def split_records(line: str) -> list[str]:
    """`line` cut where a record like its first starts again after three or more blanks (`ptxas error : ...   ptxas
    info : ...`, `OSError: x         OSError: y`): the records, each as printed; the line alone when there is none."""
    first = _FIRST_TOKEN.match(line)
    if first is None or len(line) < 2 * len(first["token"]) + 3:
        return [line]
    token = first["token"]
    records: list[str] = []
    start = 0
    for gap in _RECORD_GAP.finditer(line, first.end()):
        if line.startswith(token, gap.end()) and not line[gap.end() + len(token):gap.end() + len(token) + 1].isalnum():
            records.append(line[start:gap.start()])
            start = gap.end()
    records.append(line[start:])
    return records
