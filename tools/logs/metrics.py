"""Metric values (issue 31): a training or eval metric line whose loss, grad norm or loss scale is nan/inf is
`nan_inf`, whatever the framework prints around it.

The rules in sop/log_rules.toml (nan_loss, nan_grad_norm, and the metric-value section) decide that a line is
one; this module reads the line as metrics, in every form frameworks print them: `key: value`, `key=value`,
`'key': value` (HF Trainer), `| key: value |` (Megatron), Keras' `- loss: nan`, a running average `0.39 (nan)`,
prose (`Loss is Infinity`, `NaN loss`). It adds, where the line (or the record it belongs to) says them:
- `field`: every field of the line that is non-finite, as printed and in its order (`Loss, AngleError`; a name of two
  words after a field separator, `pem class_loss`), or the loss scale an overflow skip halves (`loss scale`);
  `value`: the worst one's value (a loss before a grad norm);
- `loss`, `grad_norm`: the first non-finite value of each kind (nan, inf, -inf; Infinity as inf);
- `loss_scale`: the loss scale printed beside it (a number);
- `step`: step / iteration / iter / `[N/M]` / Batch N, else the epoch (a whole number); from the lines just
  above when a record was wrapped over several lines (Megatron's iteration line);
- `nonfinite`: the worst kind that went non-finite: loss, grad_norm, loss_scale, or best_loss (a `best_loss: inf`
  that only starts a minimum);
- `recovered`: the lines just below show the same field finite again (for an fp16 overflow skip, a finite loss).
`metric_level` turns these into a severity: a non-finite loss is crit, and so is a grad norm (the loss finite) that
stays non-finite over several lines; a grad norm non-finite once is warn, and info when the next lines are finite
again (an fp16 scaler calibrating its first step); a `best_loss: inf` is info.

Python's `re` runs only on lines a rule already matched, on at most METRIC_LINE_CHARS of each; every pattern is
linear (no nested repeats).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from tools.core.thresholds import FP16_LOSS_SCALE_LOW, FP16_OVERFLOW_SKIPS_NORMAL

__all__ = ["METRIC_LINE_CHARS", "metric_facts", "metric_level", "overflow_level"]

Level = Literal["info", "warn", "crit"]
FactValue = int | float | str | bool | list[int]

METRIC_LINE_CHARS = 4000
LOOK_BACK = 3  # a wrapped record's step sits at most this many lines above its values
LOOK_AHEAD = 3

_NONFINITE = r"[-+]?(?:nan|infinity|inf)\b"
_PAIR = re.compile(
    # A key starts a word: `1.0e-4 loss nan` is the loss, not a field `e-4 loss` read out of the number before it.
    r"(?<![\w.\-])(?P<key>[A-Za-z_][\w.\-]*?(?:[ _\-](?:loss|norm|scale))?)['\"]?"
    r"(?P<sep>\s*[:=|]\s*|\s+is\s+|\s+)(?:tensor\(|[-+]?\d[\d.eE+\-]*\s*\(\s*)?(?P<value>" + _NONFINITE + ")",
    re.IGNORECASE,
)
_PROSE = re.compile(r"\b(?P<value>nan|inf)\s+(?P<key>loss|grad(?:ient)?[ _]norm)\b", re.IGNORECASE)
_PROSE_GRAD = re.compile(r"\b(?P<value>nan|inf)s?\s+(?:(?:found|detected)\s+)?(?:in|of)\s+(?:the\s+)?(?:\w+\s+)?"
                         r"grad(?:ient)?[ _]norm\b", re.IGNORECASE)
_LOSS_SCALE = re.compile(r"\bloss[ _]scale['\"]?\s*[:=]\s*(?P<value>\d[\d.]*(?:e[+-]?\d+)?)", re.IGNORECASE)
_FINITE_LOSS = re.compile(r"\bloss['\"]?\s*[:=]?\s*[-+]?\d", re.IGNORECASE)  # `loss=9.12`, `'loss': 1.2`, `loss 2.3`
_NAN_ITERATIONS = re.compile(r"number of (?P<kind>skipped|nan) iterations:\s*(?P<n>\d+)", re.IGNORECASE)
_STEPS = [re.compile(p, re.IGNORECASE) for p in (
    # `total_step 90260`, `train_step=12`: a step counter whose name ends in _step (issue 31 round 9)
    r"(?:\b|(?<=[a-z]_))(?:global[_ ])?step['\"]?\s*[:=]?\s*\[?\s*(?P<n>\d+)\b(?!\.\d)",
    r"\b(?:iteration|iter)['\"]?\s*[:=]?\s*\[?\s*(?P<n>\d+)\b(?!\.\d)",
    r"\bbatch\s*[:=]?\s*\[?\s*(?P<n>\d+)\s*/\s*\d+",
    r"\[\s*(?P<n>\d+)\s*/\s*\d+\s*\]",
    r"\|\s*(?P<n>\d+)/\d+\s*\[\d",  # tqdm's counter (`| 378/2724 [13:58:09<...`): the bar the record ran into
    r"^\s*(?P<n>\d+)/\d+ \[[=>.]*\]",  # Keras' progress bar (`   2/1500 [=====>......] - ETA: 46s - loss: nan`)
    r"\bBatch (?P<n>\d+): Invalid loss",  # Keras' TerminateOnNaN
)]
_EPOCH = re.compile(r"\bepoch['\"]?\s*[:=]?\s*\[?\s*(?P<n>\d+)\b(?![.\d])", re.IGNORECASE)
# A field whose name has two words (`pem class_loss`): the word before the key, right after a field separator.
_WORD_BEFORE = re.compile(r"(?:^|[,;|]\s*)(?P<word>[A-Za-z][\w.\-]*) $")
_BEST = re.compile(r"(?:^|[_\s.])(?:best|min|lowest|prev(?:ious)?)(?:$|[_\s.])", re.IGNORECASE)


_AFTER_VALUE = re.compile(r"\s*(?:\(|$|[,;|]|\s-\s)")


def _is_field(text: str, match: re.Match[str]) -> bool:
    """Whether a key that names no loss is a metric field printed non-finite (`AngleError nan (nan)`, `acc: nan`),
    not prose (`number of nan iterations`): its value follows a `:` / `=`, or ends the field."""
    return bool(match.group("sep").strip()) or _AFTER_VALUE.match(text, match.end()) is not None


# A loss named by its function (MXNet's `Train-SmoothL1=nan`, `Train-CrossEntropy`, an `mse`): the same names as
# metric_nonfinite's rule in sop/log_rules.toml.
_LOSS_FUNCTION = re.compile(r"smooth[_\-]?l1|cross[_\-]?entropy|(?:^|[_\-])(?:nll|bce|mse|rmse|kld?)$", re.IGNORECASE)


def _kind(key: str) -> str | None:
    low = key.lower()
    if "scale" in low:
        return "loss_scale"
    if "gnorm" in low or ("grad" in low and "norm" in low):
        return "grad_norm"
    if "loss" in low or _LOSS_FUNCTION.search(low):
        return "best_loss" if _BEST.search(low) else "loss"
    return None


def _value(printed: str) -> str:
    low = printed.lower().lstrip("+")
    return low.replace("infinity", "inf")


_WORST = ("loss", "grad_norm", "loss_scale", "best_loss")


def _step(text: str) -> int | None:
    for pattern in _STEPS:
        found = pattern.search(text)
        if found:
            return int(found.group("n"))
    return None


def metric_facts(facts: dict[str, FactValue], line: bytes, before: Sequence[tuple[int, bytes]] = (),
                 after: Sequence[tuple[int, bytes]] = ()) -> None:
    """Fill `facts` (a nan_inf hit's) with what its line says as metrics; facts the rule found stay."""
    text = line[:METRIC_LINE_CHARS].decode("utf-8", "replace")
    found: list[tuple[str, str, str]] = []  # (kind, key as printed, value)
    fields: list[str] = []  # every non-finite field, in the line's order
    for match in _PAIR.finditer(text):
        key = match.group("key").strip(" .-")
        if " " not in key and (word := _WORD_BEFORE.search(text, 0, match.start("key"))) is not None:
            key = f"{word['word']} {key}"
        kind = _kind(key)
        if key not in fields and (kind is not None or _is_field(text, match)):
            fields.append(key)
        if kind is not None:
            found.append((kind, key, _value(match.group("value"))))
    for pattern in (_PROSE, _PROSE_GRAD):
        for match in pattern.finditer(text):
            kind = "loss" if "loss" in match.group(0).lower() and pattern is _PROSE else "grad_norm"
            found.append((kind, "loss" if kind == "loss" else "grad_norm", _value(match.group("value"))))
    counters = {m.group("kind").lower(): int(m.group("n")) for m in _NAN_ITERATIONS.finditer(text)}
    for kind_name, count in counters.items():
        facts.setdefault(f"{kind_name}_iterations", count)
    if not found and not counters.get("nan"):
        scale = _LOSS_SCALE.search(text)
        if scale is not None:  # an fp16 overflow skip: the loss scale is the field that shows it
            facts.setdefault("field", text[scale.start():scale.start("value")].rstrip(" :='\""))
        if any(_FINITE_LOSS.search(t[:METRIC_LINE_CHARS].decode("utf-8", "replace")) for _, t in after[:LOOK_AHEAD]):
            facts.setdefault("recovered", True)  # the skip, then a step with a finite loss: the scaler found its scale
        _step_fact(facts, text, before)  # a finite line the rule matched (an fp16 overflow skip) still has its step
        return
    if found:
        ranked = sorted(found, key=lambda f: _WORST.index(f[0]))
        kind, key, value = ranked[0]
        facts.setdefault("field", ", ".join(fields) if key in fields else key)
        facts.setdefault("value", value)
        facts.setdefault("nonfinite", kind)
        for name in ("loss", "grad_norm"):
            first = next((v for k, _, v in found if k == name), None)
            if first is not None:
                facts.setdefault(name, first)
        if kind == "grad_norm" and after:
            finite = re.compile(re.escape(key) + r"['\"]?\s*[:=]?\s*[-+]?\d", re.IGNORECASE)
            if any(finite.search(t[:METRIC_LINE_CHARS].decode("utf-8", "replace")) for _, t in after[:LOOK_AHEAD]):
                facts.setdefault("recovered", True)
    else:
        facts.setdefault("nonfinite", "loss")  # Megatron counted nan iterations
    scale = _LOSS_SCALE.search(text)
    if scale:
        facts.setdefault("loss_scale", float(scale.group("value")))
    _step_fact(facts, text, before)


def _step_fact(facts: dict[str, FactValue], text: str, before: Sequence[tuple[int, bytes]]) -> None:
    step = _step(text)
    if step is None:
        for _, earlier in reversed(before[-LOOK_BACK:]):
            step = _step(earlier[:METRIC_LINE_CHARS].decode("utf-8", "replace"))
            if step is not None:
                break
    if step is None:
        epoch = _EPOCH.search(text)
        step = int(epoch.group("n")) if epoch else None
    if step is not None:
        facts.setdefault("step", step)


def metric_level(level: Level, facts: dict[str, FactValue], hits: int) -> Level:
    """The severity of a nan_inf finding read as metrics (unchanged for other nan_inf findings)."""
    kind = facts.get("nonfinite")
    if kind == "best_loss":
        return "info"
    if kind in ("grad_norm", "loss_scale") and hits == 1 and "error" not in facts:  # an exception stopped the run
        if facts.get("recovered") is True:
            return "info"
        return "warn" if level == "crit" else level
    return level


def overflow_level(level: Level, facts: dict[str, FactValue], hits: int) -> Level:
    """The severity of fp16 overflow skips: info while the loss scaler is still finding its scale (the skips are
    few, and the scale it fell to is known and not low, or the next lines print a finite loss: training went on),
    the rule's level otherwise (thresholds.FP16_*)."""
    scale = facts.get("loss_scale")
    scale_ok = isinstance(scale, int | float) and not isinstance(scale, bool) and scale >= FP16_LOSS_SCALE_LOW
    if hits <= FP16_OVERFLOW_SKIPS_NORMAL and (scale_ok or facts.get("recovered") is True):
        return "info"
    return level

