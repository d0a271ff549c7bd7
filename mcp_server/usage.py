"""The CLI's exit codes, one table for every command, and the argument parser that keeps to them.

A CI job gates on the exit code, so each code means one thing: 0 ok, 1 a warning, 2 a critical finding, 4 unknown
(the inputs were read but do not decide the question), 3 the call itself failed: a usage error (an unknown flag or
subcommand, a bad value), bad input, or a tool error. argparse's own exit code for a usage error is 2, the code of a
critical finding, hence the parser below.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["EXIT_BAD_INPUT", "EXIT_CODES_HELP", "UsageParser"]

EXIT_BAD_INPUT = 3

EXIT_CODES_HELP = ("Exit codes: 0 ok, 1 warning, 2 critical, 4 unknown (the inputs do not decide; the result says "
                   "what would), 3 the call failed (usage error, bad input, tool failure).")


class UsageParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit EXIT_BAD_INPUT with argparse's message (subcommands inherit it)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")
