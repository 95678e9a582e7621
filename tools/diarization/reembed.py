#!/usr/bin/env python3
"""Study (session 41, not adopted): re-embed each cluster of Dicta's speaker clustering from its
own speech joined (up to --cap seconds, in 10 s ECAPA windows, averaged), then merge clusters whose
long-context embeddings are closer than --t2 (average linkage over clusters). Reads the dump of
replay.py (same mixtures, same windows); `prep` rebuilds each mixture's audio (evaluate.py), writes
one WAV per cluster and embeds them with `dicta diarize --embeddings-dir`; `score` prints the
speaker counts right and DER per --t2 (comma-separated); `pairs` the long-context distances of
same-speaker and different-speaker cluster pairs.

    python3 tools/diarization/replay.py dump --dir /tmp/dz
    python3 tools/diarization/reembed.py prep --dir /tmp/dz --mode rules --t1 0.73 --out /tmp/reembed
    python3 tools/diarization/reembed.py score --dir /tmp/dz --out /tmp/reembed --t2 0.5,0.55,0.6

--mode rules: the first stage is Dicta's whole rule set at threshold --t1 (replay.assign);
--mode plain: a bare dendrogram cut at --t1 (over-clustering, for the second stage to merge).
"""
import argparse, json, os, subprocess, sys
import numpy as np
import soundfile as sf
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evaluate, replay  # noqa
from pyannote.core import Annotation, Segment
from pyannote.metrics.diarization import DiarizationErrorRate

SR = 16000


def first_stage(win, t1, mode):
    emb_idx = [i for i, w in enumerate(win) if w["embedding"] is not None]
    x = np.array([win[i]["embedding"] for i in emb_idx], dtype=np.float64)
    spans = [(round(win[i]["start"] * SR), round(win[i]["end"] * SR)) for i in emb_idx]
    if len(emb_idx) == 0:
        return emb_idx, []
    if mode == "rules":
        labels = replay.assign(x, spans, threshold=t1, step=win[0]["step"])
    else:
        merges = replay.dendrogram(x)
        n = len(x)
        k = n - sum(1 for m in merges if m[2] <= t1)
        labels = replay.cut(n, merges, max(k, 1))
    return emb_idx, labels


def audio_of(seed, cache={}):
    if seed not in cache:
        rows = [json.loads(l) for l in open(os.path.join(evaluate.DATA, "manifest.jsonl"))]
        cache.clear()
        cache[seed] = {m["name"]: m["audio"] for m in evaluate.build_mixtures(rows, 12, int(seed))}
    return cache[seed]


def prep(args):
    items = replay.load(args.dir)
    os.makedirs(args.out, exist_ok=True)
    meta = {}
    paths = []
    for seed, name, win, ref, _ in items:
        audio = audio_of(seed)[name]
        emb_idx, labels = first_stage(win, args.t1, args.mode)
        k = max(labels) + 1 if labels else 0
        key = f"{seed}_{name}"
        meta[key] = {"emb_idx": emb_idx, "labels": labels}
        for c in range(k):
            pieces = []
            for i, l in zip(emb_idx, labels):
                if l != c:
                    continue
                s, e = win[i]["own"]
                pieces.append(audio[round(s * SR):round(e * SR)])
            a = np.concatenate(pieces)
            if len(a) > args.cap * SR:  # evenly spaced pieces up to the cap
                step = len(a) / (args.cap * SR)
                keep = []
                tot = 0
                for p in pieces[::max(1, int(step))]:
                    keep.append(p); tot += len(p)
                    if tot >= args.cap * SR:
                        break
                a = np.concatenate(keep)
            p = os.path.join(args.out, f"{key}_c{c}.wav")
            sf.write(p, a, SR, subtype="PCM_16")
            paths.append(p)
    json.dump(meta, open(os.path.join(args.out, "meta.json"), "w"))
    emb_dir = os.path.join(args.out, "emb")
    os.makedirs(emb_dir, exist_ok=True)
    for i in range(0, len(paths), 200):
        subprocess.run([os.path.join(evaluate.ROOT, "target/release/dicta"), "diarize", *paths[i:i + 200], "--output-dir", emb_dir,
                        "--embeddings-dir", emb_dir, "--quiet", "--speaker-window", "10", "--speaker-step", "10"],
                       check=True)


def long_emb(out, key, c):
    p = os.path.join(out, "emb", f"{key}_c{c}.json")
    if not os.path.exists(p):
        return None
    d = json.load(open(p))
    es = [(np.array(w["embedding"]), w["end"] - w["start"]) for w in d["windows"] if w["embedding"] is not None]
    if not es:
        return None
    v = sum(e * wt for e, wt in es)
    return v / np.linalg.norm(v)


def score(args):
    items = replay.load(args.dir)
    meta = json.load(open(os.path.join(args.out, "meta.json")))
    right, total = 0, DiarizationErrorRate(collar=0.0, skip_overlap=False)
    byk = {}
    miss = []
    for seed, name, win, ref, _ in items:
        key = f"{seed}_{name}"
        m = meta[key]
        labels = m["labels"]
        k = max(labels) + 1 if labels else 0
        x = np.array([win[i]["embedding"] for i in m["emb_idx"]])
        sizes = np.bincount(labels, minlength=k)
        embs = []
        for c in range(k):
            e = long_emb(args.out, key, c)
            if e is None:
                e = x[np.array(labels) == c].sum(0); e = e / np.linalg.norm(e)
            embs.append(e)
        # agglomerate clusters by long embeddings, average linkage over members
        groups = [[c] for c in range(k)]
        def dist(a, b):
            return np.mean([1 - embs[i] @ embs[j] for i in a for j in b])
        while len(groups) > 1:
            best = min(((dist(groups[a], groups[b]), a, b) for a in range(len(groups)) for b in range(a + 1, len(groups))))
            if best[0] > args.t2:
                break
            _, a, b = best
            groups[a] += groups[b]
            del groups[b]
        newl = {c: gi for gi, g in enumerate(groups) for c in g}
        lab2 = [newl[l] for l in labels]
        # small-cluster folding: clusters under minor windows fold to nearest long-embedding group
        found = len(groups)
        # turns
        lab_all = []
        emb_idx = m["emb_idx"]
        for i, w in enumerate(win):
            if i in emb_idx:
                lab_all.append(lab2[emb_idx.index(i)])
            elif emb_idx:
                j = min(range(len(emb_idx)), key=lambda q: abs(win[emb_idx[q]]["own"][0] - w["own"][0]))
                lab_all.append(lab2[j])
        h = Annotation(uri=name)
        for w, l in zip(win, lab_all):
            h[Segment(*w["own"])] = f"S{l}"
        r = Annotation(uri=name)
        for s, e, v in ref["ref"]:
            r[Segment(s, e)] = v
        total(r, h)
        found = len(h.labels())
        byk.setdefault(ref["speakers"], [0, 0])
        byk[ref["speakers"]][1] += 1
        if found == ref["speakers"]:
            right += 1; byk[ref["speakers"]][0] += 1
        else:
            miss.append(f"{key}: {found} for {ref['speakers']} (stage1 {k})")
    if args.verbose:
        print("\n".join(miss))
    print(f"t2 {args.t2}: count right {right}/{len(items)}, DER {100 * abs(total):.2f}%, by k {byk}")


def pairs(args):
    """Long-context distance of every pair of clusters, split by whether their majority
    reference speaker is the same: where a merge threshold could sit."""
    items = replay.load(args.dir)
    meta = json.load(open(os.path.join(args.out, "meta.json")))
    same, diff = [], []
    for seed, name, win, ref, _ in items:
        key = f"{seed}_{name}"
        m = meta[key]
        labels = m["labels"]
        k = max(labels) + 1 if labels else 0
        maj = []
        for c in range(k):
            tally = {}
            for i, l in zip(m["emb_idx"], labels):
                if l != c:
                    continue
                s, e = win[i]["own"]
                for rs, re_, who in ref["ref"]:
                    ov = min(e, re_) - max(s, rs)
                    if ov > 0:
                        tally[who] = tally.get(who, 0) + ov
            maj.append(max(tally, key=tally.get) if tally else None)
        embs = [long_emb(args.out, key, c) for c in range(k)]
        for a in range(k):
            for b in range(a + 1, k):
                if embs[a] is None or embs[b] is None:
                    continue
                d = round(float(1 - embs[a] @ embs[b]), 3)
                (same if maj[a] == maj[b] else diff).append((d, key, maj[a], maj[b]))
    same.sort()
    diff.sort()
    print(f"same-speaker pairs ({len(same)}):", *same, sep="\n  ")
    print(f"closest different-speaker pairs (of {len(diff)}):", *diff[:15], sep="\n  ")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--dir", default="/tmp/dz")
    ap.add_argument("--out", required=True)
    ap.add_argument("--t1", type=float, default=0.73)
    ap.add_argument("--mode", default="rules")
    ap.add_argument("--cap", type=float, default=12)
    ap.add_argument("--t2", type=str, default="0.5")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    if a.cmd == "prep":
        prep(a)
    elif a.cmd == "pairs":
        pairs(a)
    else:
        for t in a.t2.split(","):
            a.t2 = float(t)
            score(a)
