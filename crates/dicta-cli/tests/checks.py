"""What the standalone client scripts of these tests share (each runs as `python3 SCRIPT`, so
this folder is on its import path): one check line per assertion, and the words of a text."""

import re
import sys


def check(cond, what):
    """Prints `ok: what` (its first line), or `FAILED: what` and exits 1."""
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what.splitlines()[0][:150]}")


def words(s):
    """Lower-case words (letters, digits, apostrophes) of `s`."""
    return re.findall(r"[a-z0-9']+", s.lower())
