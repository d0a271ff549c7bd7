"""Every reader fed mutated real inputs (a seeded mutator over the committed fixtures): truncation, byte flips, huge,
negative and non-finite numbers, wrong types, deep nesting, duplicated lines, invalid UTF-8, long arrays, an empty
file. Each case is one tool call in this process, under a deadline, as the server runs it.

Printed per reader: cases, clear errors (a refusal that says what is wrong), results, tracebacks (any other
exception: must be 0), calls that ran to their deadline (must be 0: a mutated input must not make a reader hang)
and the peak RSS. tests/test_fuzz.py runs a short seeded slice of the same cases in CI.

Usage: .venv/bin/python benchmarks/fuzz.py [--cases 2000] [--seed 1] [--readers a,b] [--show 3]
"""

from __future__ import annotations

import argparse
import gzip
import random
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.core.errors import TriageError  # noqa: E402

DATA = REPO / "tests" / "data"
DEADLINE_S = 10.0
MAX_SEED_BYTES = 400_000  # compressed size: the seeds stay small, so thousands of cases run in minutes


@dataclass(frozen=True)
class Reader:
    name: str
    seeds: tuple[str, ...]  # globs under tests/data
    call: Callable[[str], tuple[Any, dict[str, Any]]]  # file name -> (the tool's registry row, its arguments)
    suffix: str = ""


def _reader(name: str, seeds: tuple[str, ...], tool: str, argument: str, as_list: bool, suffix: str = "",
            **extra: Any) -> Reader:
    def call(file: str) -> tuple[Any, dict[str, Any]]:
        from mcp_server.registry import tool_by_name

        spec = tool_by_name(tool)
        assert spec is not None
        return spec, {argument: [file] if as_list else file, **extra}

    return Reader(name, seeds, call, suffix)


READERS = (
    _reader("kineto_json", ("traces/wild/files/*.json", "traces/wild/files/*.json.gz"), "summarize_trace", "path",
            False, ".json"),
    _reader("nsys_sqlite", ("nsys/files/*.sqlite",), "summarize_trace", "path", False, ".sqlite"),
    _reader("logs", ("logs/wild/*.log",), "diagnose_logs", "paths", True, ".log"),
    _reader("step_logs", ("logs/steps/*.log",), "find_stragglers", "logs", True, ".log"),
    _reader("stacks", ("stacks/*/*", "stacks/*/*/*"), "dump_stacks", "from_files", True, ".txt"),
    _reader("pyspy_record", ("host/pyspy/*.json",), "profile_cpu", "from_files", True, ".txt"),
    _reader("flight_recorder", ("flight_recorder/*/rank_*", "flight_recorder/*/json/*"), "analyze_flight_recorder",
            "path", False),
    _reader("memory", ("memory/*.log", "memory/*.txt"), "analyze_memory", "path", False, ".txt"),
    _reader("prometheus", ("inference/*.txt",), "inference_metrics", "source", False, ".txt"),
    _reader("smi_csv", ("nvidia_smi/*.csv",), "nvidia_smi_query", "csv_path", False, ".csv"),
    _reader("host_captures", ("host/*.txt",), "sample_host", "from_files", True, ".txt"),
    _reader("nccl_logs", ("interconnect/*/*.log", "interconnect/*/*/*.log"), "check_interconnect", "nccl_logs", True,
            ".log"),
    _reader("compile_logs", ("logs/compile/*.log",), "diagnose_compile", "paths", True, ".log"),
    _reader("gpu_activity", ("activity/*.txt", "activity/*.prom"), "gpu_activity", "files", True, ".txt"),
)


# ---------------------------------------------------------------- the mutator


def _mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One seeded mutation of a real input: (what was done, the bytes)."""
    kind = rng.choice(("truncate", "flip", "huge_number", "negative", "non_finite", "wrong_type", "deep_nesting",
                       "duplicate_lines", "invalid_utf8", "long_array", "empty", "swap_lines", "null_bytes"))
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data) + 1)]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            if out:
                out[rng.randrange(len(out))] = rng.randrange(256)
        return kind, bytes(out)
    if kind == "empty":
        return kind, b""
    if kind == "invalid_utf8":
        at = rng.randrange(len(data) + 1)
        return kind, data[:at] + b"\xff\xfe\xc3\x28\xa0\xa1" * rng.randint(1, 50) + data[at:]
    if kind == "null_bytes":
        at = rng.randrange(len(data) + 1)
        return kind, data[:at] + b"\x00" * rng.randint(1, 4096) + data[at:]
    lines = data.split(b"\n")
    if kind == "duplicate_lines" and lines:
        line = rng.choice(lines)
        at = rng.randrange(len(lines))
        copies = min(rng.choice((1000, 100_000)), 8_000_000 // (len(line) + 1))  # at most ~8 MB of copies
        return kind, b"\n".join(lines[:at] + [line] * copies + lines[at:])
    if kind == "swap_lines" and len(lines) > 2:
        rng.shuffle(lines)
        return kind, b"\n".join(lines)
    if kind == "deep_nesting":
        at = rng.randrange(len(data) + 1)
        depth = rng.choice((1000, 100_000))
        return kind, data[:at] + b"[" * depth + b"1" + b"]" * depth + data[at:]
    if kind == "long_array":
        at = rng.randrange(len(data) + 1)
        return kind, data[:at] + b"[" + b"0," * 1_000_000 + b"0]" + data[at:]
    numbers = [i for i, b in enumerate(data) if 48 <= b <= 57][:100_000]
    if not numbers:
        return "flip", data[::-1]
    at = rng.choice(numbers)
    replacement = {"huge_number": b"9" * rng.choice((20, 400, 5000)) + b".5e308",
                   "negative": b"-" + b"9" * rng.randint(1, 30),
                   "non_finite": rng.choice((b"NaN", b"Infinity", b"-Infinity", b"nan", b"inf", b"1e999")),
                   "wrong_type": rng.choice((b'"text"', b"null", b"true", b"{}", b"[]", b'{"a": [1, {"b": 2}]}'))}
    end = at
    while end < len(data) and (48 <= data[end] <= 57 or data[end] in b".eE+-"):
        end += 1
    return kind, data[:at] + replacement.get(kind, b"0") + data[end:]


# ---------------------------------------------------------------- running the cases


@dataclass
class Tally:
    cases: int = 0
    errors: int = 0
    results: int = 0
    tracebacks: int = 0
    late: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)


def _seed_files(reader: Reader) -> list[Path]:
    files = sorted({p for pattern in reader.seeds for p in DATA.glob(pattern)
                    if p.is_file() and 0 < p.stat().st_size <= MAX_SEED_BYTES and p.name != "PROVENANCE.md"})
    return files


async def _one(reader: Reader, folder: Path, name: str) -> tuple[str, float]:
    """One call through the contract, as the server and the CLI make it (its deadline, its refusals)."""
    from mcp_server.contract import execute
    from mcp_server.settings import Settings

    spec, arguments = reader.call(name)
    started = time.monotonic()
    try:
        with anyio.fail_after(DEADLINE_S + 5):  # the contract's own deadline comes first
            await execute(spec, arguments, Settings(roots=(folder,), timeout_s=DEADLINE_S))
        outcome = "result"
    except TriageError as exc:
        outcome = "late" if "did not finish within" in exc.message else "error"
    except TimeoutError:
        outcome = "late"
    return outcome, time.monotonic() - started


def run_reader(reader: Reader, cases: int, seed: int, show: int = 0) -> Tally:
    """`cases` mutated inputs of the reader's seeds, seeded: the same seed gives the same cases."""
    tally = Tally()
    seeds = _seed_files(reader)
    if not seeds:
        raise SystemExit(f"{reader.name}: no seed file under {DATA} matches {reader.seeds}")
    rng = random.Random(f"{seed}-{reader.name}")
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{reader.name}-") as raw_folder:
        folder = Path(raw_folder).resolve()
        for case in range(cases):
            source = rng.choice(seeds)
            original = source.read_bytes()
            if original[:2] == b"\x1f\x8b":  # mutate the text, not its compression
                original = gzip.decompress(original)
            kind, data = _mutate(original, rng)
            if source.name.endswith(".gz") and rng.random() < 0.3:
                data = gzip.compress(data, compresslevel=1)
            name = f"case{case}_rank{case % 4}{reader.suffix or source.suffix}"
            (folder / name).write_bytes(data)
            tally.cases += 1
            tally.kinds[kind] += 1
            try:
                outcome, elapsed = anyio.run(_one, reader, folder, name)
            except Exception:  # anything but a clear refusal is a defect: counted, and shown with --show
                tally.tracebacks += 1
                if len(tally.samples) < show:
                    tally.samples.append(f"{reader.name} {source.name} {kind}:\n{traceback.format_exc(limit=-4)}")
                (folder / name).unlink()
                continue
            (folder / name).unlink()
            if outcome == "late" or elapsed > DEADLINE_S + 2:
                tally.late += 1
                if len(tally.samples) < show:
                    tally.samples.append(f"{reader.name} {source.name} {kind}: ran {elapsed:.1f} s, to its deadline")
            elif outcome == "error":
                tally.errors += 1
            else:
                tally.results += 1
    return tally


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=2000, help="Cases per reader.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--readers", default="", help="Comma-separated reader names (default: all).")
    parser.add_argument("--show", type=int, default=3, help="Tracebacks to print per reader.")
    args = parser.parse_args()
    chosen = [r for r in READERS if not args.readers or r.name in args.readers.split(",")]
    print(f"{'reader':16} {'seeds':>5} {'cases':>6} {'errors':>7} {'results':>8} {'tracebacks':>10} {'timeouts':>8} "
          f"{'peak RSS MiB':>12} {'s':>6}")
    bad = 0
    for reader in chosen:
        started = time.monotonic()
        tally = run_reader(reader, args.cases, args.seed, args.show)
        bad += tally.tracebacks + tally.late
        print(f"{reader.name:16} {len(_seed_files(reader)):5} {tally.cases:6} {tally.errors:7} {tally.results:8} "
              f"{tally.tracebacks:10} {tally.late:8} {peak_rss_mib():12.0f} {time.monotonic() - started:6.0f}",
              flush=True)
        for sample in tally.samples:
            print("  " + sample.replace("\n", "\n  "))
    print(f"tracebacks + calls that ran to their deadline: {bad} (must be 0)")


if __name__ == "__main__":
    main()
