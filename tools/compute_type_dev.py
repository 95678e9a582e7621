#!/usr/bin/env python3
"""Corpus WER of `dicta transcribe` per compute type on every English dev item with a reference
(issue #13's rule: the default compute type is the fastest one within 0.3 WER points of float32).

Run from the repository root (after `cargo build --release -p dicta-cli`):

    pip install jiwer whisper-normalizer
    python3 tools/compute_type_dev.py float32,int8 [--model tiny.en] [--dicta target/release/dicta]
    python3 tools/compute_type_dev.py float32,int8 --model base --all-languages

Each compute type is one `dicta transcribe` process over all items (16 kHz WAV copies where the
manifest has them) with default decoding (beam 5, temperature fallback, 2 threads); the wall time
includes loading the model. WER: Whisper English normalizer, jiwer, corpus level; an empty
transcript scores as all deletions. `--all-languages` (multilingual models) adds the Swedish and
Spanish items: language detected by the model, Whisper's basic normalizer, WER per language and
over all items.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import jiwer
from whisper_normalizer.basic import BasicTextNormalizer
from whisper_normalizer.english import EnglishTextNormalizer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "../../shared/data"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("compute_types", help="comma-separated, e.g. float32,int8")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--dicta", default=os.path.join(HERE, "../target/release/dicta"))
    ap.add_argument("--threads", default="2")
    ap.add_argument("--all-languages", action="store_true",
                    help="also the non-English items with a reference (multilingual models)")
    args = ap.parse_args()
    english, basic = EnglishTextNormalizer(), BasicTextNormalizer()
    rows = [json.loads(line) for line in open(os.path.join(DATA, "manifest.jsonl"))]
    items = [r for r in rows if r.get("text") and "+" not in r.get("language", "+")
             and (args.all_languages or r.get("language") == "en")]
    langs = sorted({r["language"] for r in items})
    files = [os.path.join(DATA, r.get("audio_16k_wav") or r["audio"]) for r in items]
    texts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ct in args.compute_types.split(","):
            out = os.path.join(tmp, f"{ct}.json")
            t0 = time.time()
            subprocess.run([args.dicta, "transcribe", *files, "--model", args.model, "--compute-type", ct,
                            "--threads", args.threads, "--quiet", "--format", "json", "--output", out],
                           check=False)
            wall = time.time() - t0
            got = {r["audio"]: r.get("text") or "" for r in json.load(open(out))["results"]}
            texts[ct] = [got.get(f, "") for f in files]
            pairs = []
            for it, h in zip(items, texts[ct]):
                norm = english if it["language"] == "en" else basic
                ref = norm(it["text"])
                if ref.strip():
                    pairs.append((it["language"], ref, norm(h)))
            parts = []
            for lang in langs + (["all"] if len(langs) > 1 else []):
                sel = [(r, h) for la, r, h in pairs if lang in ("all", la)]
                wer = jiwer.wer([r for r, _ in sel], [h if h.strip() else "<empty>" for _, h in sel])
                parts.append(f"{lang} {len(sel)} items WER {wer * 100:.2f}%")
            print(f"{ct}: {', '.join(parts)}, wall {wall:.1f} s", flush=True)
    cts = list(texts)
    for other in cts[1:]:
        differ = sum(a != b for a, b in zip(texts[cts[0]], texts[other]))
        print(f"{other} vs {cts[0]}: {differ} of {len(files)} texts differ")


if __name__ == "__main__":
    main()
