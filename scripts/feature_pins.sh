#!/usr/bin/env bash
# Checks python/Cargo.toml's feature pins: every dependency of the Python extension (built alone by
# `pip install ./python`) must resolve with a feature set that the workspace build also uses, or the
# wheel recompiles that crate and everything above it instead of reusing scripts/test.sh's release
# build. Prints the crates that differ and exits 1; add them to the pins (with the features shown).
set -euo pipefail
cd "$(dirname "$0")/.."
tree() { cargo tree "$@" -f "{p}|{f}" --prefix none 2>/dev/null | sed 's/ (\*)$//' | sort -u; }
# Two views: the target side alone (no proc macros or build scripts, whose host-side features cargo
# resolves apart), and every edge (where the host side's crates, such as syn, show).
python3 - <(tree --workspace -e normal,dev,no-proc-macro) <(tree -p dicta-python -e normal,no-proc-macro) \
    <(tree --workspace -e normal,build,dev) <(tree -p dicta-python -e normal,build) <<'PY'
import sys


def read(path):
    sets = {}
    for line in open(path):
        if "|" in line:
            pkg, feats = line.rstrip("\n").split("|", 1)
            sets.setdefault(pkg.strip(), set()).add(feats)
    return sets


bad = 0
for view in (1, 3):
    workspace, python = read(sys.argv[view]), read(sys.argv[view + 1])
    for pkg in sorted(python):
        if not pkg.startswith("dicta") and python[pkg] - workspace.get(pkg, set()):
            bad += 1
            print(f"{pkg}: python {sorted(python[pkg])}, workspace {sorted(workspace.get(pkg, set()))}")
if bad:
    print(f"{bad} crates resolve differently for `pip install ./python`; pin them in python/Cargo.toml")
    sys.exit(1)
print("feature pins: the Python extension's dependencies resolve as in the workspace build")
PY
