#!/usr/bin/env python3
"""`dicta transcribe --final-window seek` against `--final-window finish`: windows, wall time and
WER, the two modes run one after the other on each workload (README: `--final-window`).

Run from the repository root (after `cargo build --release -p dicta-cli`):

    pip install jiwer whisper-normalizer soundfile numpy
    python3 tools/final_window_compare.py                       # 40 joined recordings, default decoding
    python3 tools/final_window_compare.py --workloads joined,8x30s-s0,mixed-s1 -- --beam-size 1 \\
        --temperature 0 --no-condition-on-previous-text          # greedy, as the bench decodes
    MODEL=base python3 tools/final_window_compare.py -- --language en

`joined` is built here: 40 recordings of 12–28.5 s, each English dev utterance with a reference
(shared/data) drawn at random (seed 123) and joined with 0.3 s pauses until the length is reached,
so that a recording's last window holds the end of speech and some padding, where the seek loop
often spends a second window on the last seconds. Other names are `dicta bench` workload folders
(`$DICTA_HOME/bench/<name>`, e.g. `8x30s-s0`: `dicta bench workloads -w 8x30s --seed 0`). WER:
Whisper's English normalizer, jiwer, corpus level over the recordings with a reference.
"""
import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
DATA = os.path.normpath(os.path.join(ROOT, "../shared/data"))
HOME = os.environ.get("DICTA_HOME", os.path.expanduser("~/.cache/dicta"))


def build_joined(folder, n=40, seed=123):
    """Writes `n` joined recordings and their manifest into `folder`; returns the manifest path."""
    import numpy as np
    import soundfile as sf

    man = os.path.join(folder, "manifest.jsonl")
    if os.path.exists(man):
        return man
    os.makedirs(folder, exist_ok=True)
    rows = [json.loads(line) for line in open(os.path.join(DATA, "manifest.jsonl"))]
    items = [r for r in rows if isinstance(r.get("text"), str) and r.get("category") == "short_utterance"
             and r.get("contains_markup") is not True and r.get("language") == "en" and r.get("audio_16k_wav")]
    rng = random.Random(seed)
    with open(man + ".tmp", "w") as out:
        for k in range(n):
            target = rng.uniform(12, 28.5)
            audio, text, t = [], [], 0.0
            pool = items[:]
            rng.shuffle(pool)
            for r in pool:
                x, sr = sf.read(os.path.join(DATA, r["audio_16k_wav"]), dtype="float32")
                if x.ndim > 1:
                    x = x.mean(axis=1)
                if t + len(x) / sr > target:
                    continue
                audio += [x, np.zeros(int(0.3 * sr), dtype="float32")]
                text.append(r["text"])
                t += len(x) / sr + 0.3
                if t > target - 1.0:
                    break
            a = np.concatenate(audio)
            path = os.path.join(folder, f"{k:03d}.wav")
            sf.write(path, a, 16000, subtype="PCM_16")
            out.write(json.dumps({"id": f"joined/{k:03d}", "audio": path, "text": " ".join(text),
                                  "duration_s": len(a) / 16000}) + "\n")
    os.replace(man + ".tmp", man)
    return man


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="joined")
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--model", default=os.environ.get("MODEL", "tiny.en"))
    ap.add_argument("--out", default="/tmp/final_window_compare")
    ap.add_argument("extra", nargs="*", help="flags for dicta transcribe (after --)")
    args = ap.parse_args()
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    os.makedirs(args.out, exist_ok=True)
    total = {}
    for wl in args.workloads.split(","):
        man = (build_joined(os.path.join(HOME, "bench", "joined-s123")) if wl == "joined"
               else os.path.join(HOME, "bench", wl, "manifest.jsonl"))
        refs = [json.loads(line) for line in open(man)]
        for mode in ["seek", "finish"]:
            out = os.path.join(args.out, f"{wl}_{mode}.json")
            subprocess.run([args.dicta, "transcribe", "--manifest", man, "--model", args.model, "--threads", "2",
                            "--batch-size", "8", "--quiet", "--format", "json", "-o", out,
                            "--final-window", mode, *args.extra], check=True)
            d = json.load(open(out))
            pairs = [(norm(r["text"]), norm(x.get("text") or "")) for r, x in zip(refs, d["results"])
                     if norm(r.get("text") or "").strip()]
            m = jiwer.process_words([p[0] for p in pairs], [p[1] or "<empty>" for p in pairs])
            errors = m.substitutions + m.deletions + m.insertions
            words = sum(len(p[0].split()) for p in pairs)
            s = d["stats"]
            t = total.setdefault(mode, [0, 0, 0.0, 0])
            for i, v in enumerate((errors, words, s["wall_seconds"], s["windows"])):
                t[i] += v
            print(f"{wl:14s} {mode:6s} wall {s['wall_seconds']:6.2f} s, {s['windows']:4d} windows, "
                  f"WER {100 * errors / max(words, 1):6.2f}% ({errors}/{words})", flush=True)
    for mode, (e, w, wall, win) in total.items():
        print(f"total          {mode:6s} wall {wall:6.2f} s, {win:4d} windows, WER {100 * e / max(w, 1):6.2f}% ({e}/{w})")


if __name__ == "__main__":
    sys.exit(main())
