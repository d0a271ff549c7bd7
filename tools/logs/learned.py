"""Issue 31, "learning where rules stop": a learned fallback for the category of a log the rules say nothing serious
about.

The model (sop/log_model.json, trained by benchmarks/train_log_model.py on the development sets only) is a
multinomial naive Bayes over the normalised tokens of a log's error lines: lines with an error word (error,
exception, fail, fatal, killed, nan, timeout, warn, ...) and the final line of each Python traceback. Tokens are
lower-cased words, dotted and CamelCase names split (kept whole too), adjacent-word pairs, with numbers, hex and
paths masked to placeholders (a path's file name is kept). Classes: the categories, `benign` and
`unclassified_error` (an error no category fits); a prediction of either of the last two says nothing.

It never overrides a rule: it is consulted only when no rule produced a serious (warn/crit) finding other than
`unclassified_error`, and it never names a category a rule already reported at any severity. Its finding is a warn,
says it is a learned guess, and gives the tokens that decided. Facts still come from the rules; the only facts it
gives are its own (probability, tokens). The switch and the amount read are in sop/log_model.toml.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from tools.core.errors import TriageError
from tools.core.files import InputFile, open_input

__all__ = ["OVERRIDE", "LearnedGuess", "NaiveBayes", "document", "error_lines", "model", "predict_file", "settings",
           "tokens"]

# A prediction of these says nothing: no finding.
SILENT_CLASSES = frozenset({"benign", "unclassified_error"})

_ERRORISH = re.compile(
    r"error|exception|fail|fatal|killed|\bkill|\bnan\b|\binf\b|timeout|timed out|warn|abort|terminat|\boom|"
    r"out of memory|segmentation|\bfault|core dump|exit|signal|denied|refused|unable|cannot|can't|could not|invalid|"
    r"illegal|assert|unexpected|not found|no such|mismatch|overflow|crash|\bhang|stuck|panic|died|\bdead|\blost|"
    r"unhealthy|corrupt|not supported|unsupported|incompatible|too many|too old|exceed",
    re.IGNORECASE)
# An error line that says it retries is no finding (tools/logs/lines.py): nor is it evidence here.
_RETRY = re.compile(r"(?i)\bretry(?:ing)?\b|\bwill retry\b|\bretried\b|\bretrying\b|\battempt \d+\s*(?:/|of)")
# A record of one HTTP request and the status it got (httpx's `HTTP Request: HEAD url "HTTP/1.1 404 Not Found"`,
# uvicorn's `"POST /v1/chat/completions HTTP/1.1" 200 OK`, urllib3's `"HEAD /x HTTP/1.1" 404 0`): below 500 the
# server answered as designed (a hub probing for an optional file gets 404, a served request 200), so its words
# ("Not Found") are no evidence of a fault of the job; a 5xx, the server's own failure, still is.
_HTTP_RECORD = re.compile(r"\bHTTP/\d(?:\.\d)?\"?\s+[1-4]\d\d\b")
# Python's warnings module's record, `path/x.py:475: UserWarning: resource_tracker: There appear to be 1 leaked
# semaphore objects to clean up at shutdown`: the program warned and went on (a deprecation, a clean-up note at exit),
# so the words of the warning are not evidence of a fault; what went wrong is in an error line or a traceback.
_PY_WARNING = re.compile(r"\.py:\d+: [A-Z]\w*Warning: ")
# A line that says what the program did instead (`... not supported by the V1 Engine. Falling back to V0.`, `Output
# type generation is not supported ... Using server model adapter instead.`): a condition it handled, as a retry is.
_FALLBACK = re.compile(r"(?i)\bfall(?:s|ing)? back\b|\busing\b[^.]{0,80}\binstead\b")
# A compiler's warning diagnostic (gcc/clang `x.cpp:542:41: warning: narrowing conversion`, nvcc/EDG `x.cu(12):
# warning #177-D`): the build went on; a failed build prints `error:` lines and a failed command, which stay evidence.
_COMPILER_WARNING = re.compile(r"(?::\d+(?::\d+)?|\(\d+\)): warning\b")
# A line that warns of a cost that may follow (`Recording too many CUDAGraphs may lead to extra overhead`, `This can
# cause ... Too many open files`): advice about what could happen, not a report that it did.
_ADVISORY = re.compile(r"(?i)\b(?:may|might|could|can)\s+(?:lead to|cause|result in)\b")
# An orderly end: status 0, or a server's own words for shutting down as asked (`cleaning up before exit...`,
# `exited with code 0`): an exit is evidence of a fault only with a failing status or signal.
_ORDERLY_EXIT = re.compile(r"(?i)\b(?:exit(?:ed)?|return(?:ed)?)\b[^\n]{0,30}\b(?:code|status)\b[ :=]*0\b(?![.\d])|"
                           r"\bcleaning up before exit|\bexiting normally\b|\bgraceful(?:ly)?\s+shut")
# A line that is a list of bare words (a word2vec neighbour table's `war | military, forces, troops, killed, soviet`, a
# CSV header `epoch,loss,error,killed`): data the program printed, not a message about itself.
_WORD_LIST = re.compile(r"^\W*[A-Za-z_]\w*(?:\s*[,|]\s*[A-Za-z_]\w*){3,}\W*$")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{12,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.+~-]*[/\\])+([\w.+-]+)")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_WORD = re.compile(r"<\w+>|[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOP = frozenset("a an the of to in on at for and or is are was be by with as it this that from".split())
_MAX_LINES = 400  # error lines per document (distinct ones), the first ones
# None: as sop/log_model.toml says; True/False: forced (benchmarks and tests compare rules alone with rules + model).
OVERRIDE: bool | None = None


def error_lines(text: str) -> list[str]:
    """The lines a human reads first: those with an error word (not one that says it retries), and the final line of
    each traceback; each distinct line once (a merged log repeats one rank's line per rank), in order."""
    lines = text.splitlines()
    picked: dict[str, None] = {}
    in_traceback = False
    for line in lines:
        stripped = line.strip()
        if _TRACEBACK.search(line):
            in_traceback = True
            continue
        if in_traceback and stripped and not line[:1].isspace() and not stripped.startswith(("File ", "^", "~")):
            in_traceback = False
            picked.setdefault(stripped, None)  # the final exception, whatever its words
        elif (stripped and _ERRORISH.search(line) and not _RETRY.search(line) and not _HTTP_RECORD.search(line)
              and not _PY_WARNING.search(line) and not _FALLBACK.search(line)
              and not _COMPILER_WARNING.search(line) and not _ADVISORY.search(line)
              and not _ORDERLY_EXIT.search(line) and not _WORD_LIST.match(stripped)):
            picked.setdefault(stripped, None)
        if len(picked) >= _MAX_LINES:
            break
    return list(picked)


def _words(line: str) -> list[str]:
    line = _HEX.sub(" <hex> ", line)
    line = _PATH.sub(lambda m: f" <path> {m.group(1)} ", line)
    line = _NUMBER.sub(" <num> ", line)
    return _WORD.findall(line)


def tokens(line: str) -> list[str]:
    """The normalised tokens of one line: each word lower-cased (a dotted, snake or CamelCase name also split into
    its parts), and each pair of adjacent words (`a__b`)."""
    out: list[str] = []
    base: list[str] = []
    for word in _words(line):
        if word.startswith("<"):
            base.append(word)
            out.append(word)
            continue
        lower = word.lower()
        if lower in _STOP:
            continue
        base.append(lower)
        out.append(lower)
        parts = [p.lower() for chunk in word.split("_") for p in _CAMEL.findall(chunk)]
        if len(parts) > 1:
            out.extend(p for p in parts if p not in _STOP and len(p) > 1)
    out.extend(f"{a}__{b}" for a, b in zip(base, base[1:], strict=False))
    return out


def document(text: str) -> set[str]:
    """A log's features: the set of tokens of its error lines (present or not, not how often)."""
    return {t for line in error_lines(text) for t in tokens(line)}


@dataclass(frozen=True)
class LearnedGuess:
    category: str
    probability: float
    tokens: list[str]  # the tokens that decided, most telling first
    line: int  # the error line (1-based, in the part read) that holds the most telling token; 0 if none
    text: str


class NaiveBayes:
    """Multinomial naive Bayes over a document's token set, with Laplace smoothing `alpha`. Kept as counts (what
    training saw: exact, so the shipped file is the same byte for byte from the same data); the log-probabilities
    are scaled by `temperature` x sqrt(tokens) before the softmax (naive Bayes is overconfident, the more so the
    longer the log; the scale is chosen by cross-validation)."""

    def __init__(self, classes: Sequence[str], documents: Sequence[int], counts: dict[str, list[int]],
                 alpha: float, temperature: float) -> None:
        self.classes = list(classes)
        self.documents = list(documents)
        self.counts = counts
        self.alpha = alpha
        self.temperature = temperature
        totals = [sum(row[c] for row in counts.values()) for c in range(len(classes))]
        size = len(counts)
        denominators = [math.log(totals[c] + alpha * size) for c in range(len(classes))]
        self.log_prior = [math.log((n + 1) / (sum(documents) + len(classes))) for n in documents]
        self.log_likelihood = {t: [math.log(row[c] + alpha) - denominators[c] for c in range(len(classes))]
                               for t, row in counts.items()}

    @classmethod
    def train(cls, docs: Sequence[set[str]], labels: Sequence[str], alpha: float = 0.5, min_docs: int = 2,
              temperature: float = 1.0) -> NaiveBayes:
        classes = sorted(set(labels))
        document_frequency: dict[str, int] = {}
        for doc in docs:
            for token in doc:
                document_frequency[token] = document_frequency.get(token, 0) + 1
        counts = {t: [0] * len(classes) for t in sorted(document_frequency) if document_frequency[t] >= min_docs}
        per_class = [0] * len(classes)
        for doc, label in zip(docs, labels, strict=True):
            c = classes.index(label)
            per_class[c] += 1
            for token in doc:
                row = counts.get(token)
                if row is not None:
                    row[c] += 1
        return cls(classes, per_class, counts, alpha, temperature)

    def scores(self, doc: Iterable[str]) -> list[float]:
        score = list(self.log_prior)
        for token in doc:
            row = self.log_likelihood.get(token)
            if row is not None:
                score = [s + r for s, r in zip(score, row, strict=True)]
        return score

    def probabilities(self, doc: set[str]) -> list[float]:
        known = sorted(t for t in doc if t in self.log_likelihood)
        score = self.scores(known)
        scale = self.temperature * max(1.0, math.sqrt(len(known)))
        top = max(score)
        weights = [math.exp((s - top) / scale) for s in score]
        total = sum(weights)
        return [w / total for w in weights]

    def explain(self, doc: Iterable[str], category: str, count: int = 6) -> list[str]:
        """The tokens that most favour `category` over the mean of the other classes, most telling first."""
        c = self.classes.index(category)
        others = max(len(self.classes) - 1, 1)
        weight: list[tuple[float, str]] = []
        for token in doc:
            row = self.log_likelihood.get(token)
            if row is None:
                continue
            lead = row[c] - (sum(row) - row[c]) / others
            if lead > 0:
                weight.append((-lead, token))
        return [t for _, t in sorted(weight)[:count]]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "multinomial naive Bayes over error-line tokens (tools/logs/learned.py)",
                "classes": self.classes, "documents": self.documents, "alpha": self.alpha,
                "temperature": self.temperature, "counts": self.counts}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NaiveBayes:
        return cls(raw["classes"], raw["documents"], raw["counts"], float(raw["alpha"]), float(raw["temperature"]))


@cache
def settings() -> dict[str, Any]:
    """sop/log_model.toml: whether the fallback is on, how much of a file it reads."""
    return tomllib.loads(resources.files("sop").joinpath("log_model.toml").read_text("utf-8"))


@cache
def model() -> tuple[NaiveBayes, dict[str, float]]:
    """The shipped model and its threshold per category (sop/log_model.json)."""
    raw = json.loads(resources.files("sop").joinpath("log_model.json").read_text("utf-8"))
    return NaiveBayes.from_json(raw["model"]), {k: float(v) for k, v in raw["thresholds"].items()}


def guess(text: str, nb: NaiveBayes, threshold: dict[str, float], exclude: frozenset[str] = frozenset()
          ) -> LearnedGuess | None:
    """The category the model names for this text, when it is a fault, not one in `exclude` (a rule's), and its
    probability reaches that category's threshold."""
    doc = document(text)
    if not doc:
        return None
    probabilities = nb.probabilities(doc)
    best = max(range(len(nb.classes)), key=lambda c: (probabilities[c], -c))
    category = nb.classes[best]
    if category in SILENT_CLASSES or category in exclude or probabilities[best] < threshold.get(category, 1.01):
        return None
    decided = nb.explain(doc, category)
    line, where = 0, ""
    for number, raw in enumerate(text.splitlines(), 1):  # the first line holding the most telling token
        if decided and decided[0] in tokens(raw):
            line, where = number, raw.strip()
            break
    return LearnedGuess(category, round(probabilities[best], 3), decided, line, where)


def read_part(file: InputFile, part_bytes: int) -> str:
    """The file's first and last `part_bytes` (a gzip's first 2 x part_bytes), as text."""
    stream, compressed = open_input(file.path)
    with stream:
        head = stream.read(2 * part_bytes if compressed else part_bytes)
        tail = b""
        if not compressed:
            size = file.path.stat().st_size
            if size > 2 * part_bytes:
                stream.seek(size - part_bytes)
                tail = b"\n" + stream.read(part_bytes).split(b"\n", 1)[-1]
            elif size > part_bytes:
                tail = stream.read()
    return (head + tail).decode("utf-8", "replace")


def predict_file(file: InputFile, exclude: frozenset[str] = frozenset()) -> LearnedGuess | None:
    """The model's guess for one file (None when switched off, unsure, or it says benign)."""
    if not (settings()["enabled"] if OVERRIDE is None else OVERRIDE):
        return None
    nb, threshold = model()
    try:
        text = read_part(file, int(settings()["part_kib"]) * 1024)
    except (TriageError, OSError, EOFError):  # the scan already said the file could not be read
        return None
    return guess(text, nb, threshold, exclude)
