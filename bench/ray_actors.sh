#!/usr/bin/env bash
# Throughput of examples/ray_transcribe.py with 1 and 2 actors against the CLI on the same
# manifest, interleaved (CLI, 1 actor, 2 actors; ROUNDS times), on this machine's local Ray.
#
#   bench/ray_actors.sh MANIFEST [ROUNDS] [PYTHON]
#
# PYTHON must have `pip install ./python "ray[data]"`; the binary is target/release/dicta. Prints one
# line per run; the Ray lines are the script's own summary (inputs, actors, audio_s, wall_s, rtfx).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="$1"
rounds="${2:-2}"
py="${3:-python3}"
out="$(mktemp -d)"
for round in $(seq "$rounds"); do
    s=$(date +%s.%N)
    target/release/dicta transcribe --manifest "$manifest" --beam-size 1 --threads 2 --quiet \
        --output "$out/cli.json" || true
    e=$(date +%s.%N)
    echo "round $round cli wall_s $(echo "$e - $s" | bc)"
    for actors in 1 2; do
        "$py" examples/ray_transcribe.py "$manifest" "$out/ray_$actors.jsonl" --actors "$actors" \
            --model tiny.en --beam-size 1 2>&1 | tail -1 | sed "s/^/round $round ray: /"
    done
done
"$py" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
cli = json.load(open(f"{out}/cli.json"))["results"]
for a in (1, 2):
    ray = [json.loads(l) for l in open(f"{out}/ray_{a}.jsonl")]
    print(f"{a} actor(s): {sum(x == y for x, y in zip(cli, ray))}/{len(cli)} results identical to the CLI's")
PY
