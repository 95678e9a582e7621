#!/usr/bin/env python3
"""Study the speaker clustering of `dicta diarize` without re-embedding: embed the evaluation's
mixtures once, then re-run clustering rules on the saved embeddings in seconds.

    python3 tools/diarization/replay.py dump --seed 7,11,3,5 --dir /tmp/dz      # runs dicta once
    python3 tools/diarization/replay.py replay --dir /tmp/dz                    # Dicta's rules, in numpy

`dump` builds the same mixtures as evaluate.py (same seeds, same audio), runs `dicta diarize
--embeddings-dir` (add `--extra "--speaker-window 1 --speaker-step 0.5"` to study other windows),
and keeps each mixture's windows, its reference turns and Dicta's own RTTM; two real recordings go
in `DIR/real` (pyannote_audio/sample, 2 speakers; Resemblyzer's demo interview, 3 speakers). `replay` re-implements the
clustering of crates/dicta-engine/src/diarize/mod.rs in numpy, checks that it finds the speaker
counts Dicta found, and prints the counts right, DER, the misses and the real recording's count;
edit `assign` (or the constants) to try a rule, then port the rule that wins to Rust and confirm
it with evaluate.py.

Judge a rule on the real recordings as well as on the mixtures: in session 37, 1 s windows with a
0.8 threshold gained 8 of 480 mixture counts and merged the pyannote sample's two speakers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import soundfile as sf
from pyannote.core import Annotation, Segment
from pyannote.metrics.diarization import DiarizationErrorRate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evaluate  # noqa: E402

# Constants of crates/dicta-engine/src/diarize/mod.rs.
THRESHOLD = 0.73
FAR_VOICE = 0.8
SAME_VOICE = 0.43
ONE_STRETCH_SECONDS = 4.5
MINOR_FLOOR = 3


def dump(args):
    rows = [json.loads(l) for l in open(os.path.join(evaluate.DATA, "manifest.jsonl"))]
    for seed in [int(s) for s in args.seed.split(",")]:
        out = os.path.join(args.dir, str(seed))
        os.makedirs(out, exist_ok=True)
        mixes = evaluate.build_mixtures(rows, args.mixtures, seed)
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for mx in mixes:
                p = os.path.join(tmp, mx["name"] + ".wav")
                sf.write(p, mx["audio"], evaluate.SR, subtype="PCM_16")
                paths.append(p)
                json.dump({"speakers": mx["speakers"], "ref": mx["ref"]},
                          open(os.path.join(out, mx["name"] + ".ref.json"), "w"))
            subprocess.run([args.dicta, "diarize", *paths, "--output-dir", out, "--embeddings-dir", out,
                            "--quiet", *args.extra.split()], check=True)
        print(f"seed {seed}: {len(mixes)} mixtures in {out}", flush=True)
    # Real recordings: the pyannote sample (2 speakers, with its RTTM) and Resemblyzer's demo
    # interview (3 speakers under laughter and crosstalk; no reference turns, so count only).
    out = os.path.join(args.dir, "real")
    os.makedirs(out, exist_ok=True)
    ref = evaluate.rttm_annotation(open(os.path.join(evaluate.DATA, "pyannote_audio/sample.rttm")).read().splitlines(),
                                   "sample")
    json.dump({"speakers": len(ref.labels()),
               "ref": [[s.start, s.end, who] for s, _, who in ref.itertracks(yield_label=True)]},
              open(os.path.join(out, "sample.ref.json"), "w"))
    json.dump({"speakers": 3, "ref": None}, open(os.path.join(out, "X2zqiX6yL3I.16k.ref.json"), "w"))
    subprocess.run([args.dicta, "diarize", os.path.join(evaluate.DATA, "pyannote_audio/sample.wav"),
                    os.path.join(evaluate.DATA, "resemblyzer/X2zqiX6yL3I.16k.wav"), "--output-dir", out,
                    "--embeddings-dir", out, "--quiet", *args.extra.split()], check=True)


def load(dirname, real=False):
    """[(seed, name, windows, ref, dicta_rttm_lines)] of the mixtures (or of the real recordings)"""
    out = []
    seeds = ["real"] if real else sorted((s for s in os.listdir(dirname) if s.isdigit()), key=int)
    for seed in seeds:
        d = os.path.join(dirname, seed)
        for f in sorted(os.listdir(d)):
            if f.endswith(".ref.json"):
                name = f[:-9]
                ref = json.load(open(os.path.join(d, f)))
                dump = json.load(open(os.path.join(d, name + ".json")))
                win = [dict(w, step=dump["options"]["step_seconds"]) for w in dump["windows"]]
                rttm = open(os.path.join(d, name + ".rttm")).read().splitlines()
                out.append((seed, name, win, ref, rttm))
    return out


# --- Dicta's clustering, step for step ---------------------------------------------------------

def dendrogram(x):
    """Average-linkage merges (a, b, height) ascending, as scipy computes them."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import pdist
    n = len(x)
    if n < 2:
        return []
    z = linkage(pdist(x, "cosine"), "average")
    # Map scipy's cluster ids to a representative point.
    rep = list(range(n))
    merges = []
    for a, b, h, _ in z:
        a, b = int(a), int(b)
        merges.append((rep[a], rep[b], h))
        rep.append(rep[a])
    return merges


def cut(n, merges, k):
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b, _ in merges[: n - k]:
        parent[find(b)] = find(a)
    return renumber([find(i) for i in range(n)])


def renumber(labels):
    ids = {}
    return [ids.setdefault(l, len(ids)) for l in labels]


def sums(x, labels):
    k = max(labels) + 1
    s = np.zeros((k, x.shape[1]))
    for e, l in zip(x, labels):
        s[l] += e
    return s


def cos(a, b):
    return float(a @ b / max(1e-12, np.linalg.norm(a) * np.linalg.norm(b)))


def returns(labels, spans, c):
    mine = [i for i, l in enumerate(labels) if l == c]
    return any(q > p + 1 and spans[q][0] >= spans[p][1] for p, q in zip(mine, mine[1:]))


def merge_into(labels, f, t):
    return [(t if l == f else l) - (1 if (t if l == f else l) > f else 0) for l in labels]


def assign(x, spans, threshold=THRESHOLD, step=0.75):
    n = len(x)
    if n == 0:
        return []
    merges = dendrogram(x)
    k = n - sum(1 for m in merges if m[2] <= threshold)
    labels = cut(n, merges, max(k, 1))
    voices = []
    while True:
        k = max(labels) + 1
        counts = np.bincount(labels, minlength=k)
        minor = max(-(-n // 20), MINOR_FLOOR)
        cand = [c for c in range(k) if counts[c] < minor and not any(labels[w] == c for w in voices)]
        if not cand:
            break
        small = min(cand, key=lambda c: counts[c])
        if k <= 1:
            break
        s = sums(x, labels)
        target = max((c for c in range(k) if c != small), key=lambda c: cos(s[small], s[c]))
        if 1 - cos(s[small], s[target]) > FAR_VOICE and returns(labels, spans, small):
            voices.append(labels.index(small))
            continue
        labels = renumber([target if l == small else l for l in labels])
    # merge close centroids
    while max(labels) + 1 > 1:
        s = sums(x, labels)
        k = len(s)
        best = min(((1 - cos(s[a], s[b]), a, b) for a in range(k) for b in range(a + 1, k)))
        if best[0] >= SAME_VOICE:
            break
        labels = merge_into(labels, best[2], best[1])
    # fold single stretches
    while max(labels) + 1 > 1:
        s = sums(x, labels)
        k = len(s)
        counts = np.bincount(labels, minlength=k)
        best = None
        for c in range(k):
            if counts[c] > round(ONE_STRETCH_SECONDS / step) or returns(labels, spans, c):
                continue
            t, d = min(((o, 1 - cos(s[c], s[o])) for o in range(k) if o != c), key=lambda p: p[1])
            if d < FAR_VOICE and (best is None or (counts[c], d) < (best[0], best[1])):
                best = (counts[c], d, c, t)
        if best is None:
            break
        labels = merge_into(labels, best[2], best[3])
    return labels


def turns(windows, assign_fn):
    emb_idx = [i for i, w in enumerate(windows) if w["embedding"] is not None]
    if not emb_idx:
        return []
    x = np.array([windows[i]["embedding"] for i in emb_idx], dtype=np.float64)
    spans = [(round(windows[i]["start"] * 16000), round(windows[i]["end"] * 16000)) for i in emb_idx]
    labels = assign_fn(x, spans, step=windows[0]["step"])
    lab = []
    for i, w in enumerate(windows):
        if w["embedding"] is not None:
            lab.append(labels[emb_idx.index(i)])
        else:
            j = min(range(len(emb_idx)), key=lambda k: abs(windows[emb_idx[k]]["own"][0] - w["own"][0]))
            lab.append(labels[j])
    out = []
    for w, l in zip(windows, lab):
        s, e = w["own"]
        if out and out[-1][2] == l and out[-1][1] == s:
            out[-1][1] = e
        else:
            out.append([s, e, l])
    return out


def score(items, assign_fn, show=True):
    right, total = 0, DiarizationErrorRate(collar=0.0, skip_overlap=False)
    misses = []
    for seed, name, win, ref, _ in items:
        hyp_turns = turns(win, assign_fn)
        h = Annotation(uri=name)
        for s, e, l in hyp_turns:
            h[Segment(s, e)] = f"S{l}"
        if ref["ref"] is not None:
            r = Annotation(uri=name)
            for s, e, v in ref["ref"]:
                r[Segment(s, e)] = v
            total(r, h)
        found = len(h.labels())
        if found == ref["speakers"]:
            right += 1
        else:
            misses.append(f"{seed}/{name}: {found} for {ref['speakers']}")
    if show:
        for m in misses:
            print("  miss", m)
    print(f"count right {right}/{len(items)} ({100 * right / len(items):.1f}%), DER {100 * abs(total):.2f}%")
    return right


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--dicta", default=os.path.join(evaluate.ROOT, "target/release/dicta"))
    d.add_argument("--seed", default="7,11,3,5,13,17,19,23,29,31,37,41,43,47,53,59,61,67,71,73")
    d.add_argument("--mixtures", type=int, default=12)
    d.add_argument("--dir", required=True)
    d.add_argument("--extra", default="", help="extra flags for dicta diarize")
    r = sub.add_parser("replay")
    r.add_argument("--dir", required=True)
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args)
        return
    items = load(args.dir)
    real = load(args.dir, real=True)
    # The numpy rules must find Dicta's own counts, or the replay studies something else.
    agree = sum(len({l.split()[7] for l in rttm if l.startswith("SPEAKER")}) == len({t[2] for t in turns(win, assign)})
                for _, _, win, _, rttm in items + real)
    print(f"replay agrees with dicta's speaker count on {agree}/{len(items) + len(real)}")
    print("mixtures:")
    score(items, assign)
    print("real recordings (pyannote_audio/sample: 2 speakers, DER; resemblyzer interview: 3 speakers):")
    score(real, assign)


if __name__ == "__main__":
    main()
