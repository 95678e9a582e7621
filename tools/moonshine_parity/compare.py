#!/usr/bin/env python3
"""Moonshine parity of Dicta with onnxruntime (the moonshine_onnx package's generate loop) on the
same .ort files, over the dev set's English short utterances.

Run from the repository root (after `cargo build --release -p dicta-cli` and
`dicta models fetch moonshine-tiny`):

    pip install onnxruntime soundfile jiwer whisper-normalizer
    pip install --no-deps useful-moonshine-onnx==20251121
    CT=default python3 tools/moonshine_parity/compare.py [--model ~/.cache/dicta/models/moonshine-tiny]
    CT=float32 python3 tools/moonshine_parity/compare.py --model ~/.cache/dicta/models/moonshine-base

CT picks Dicta's --compute-type (default = int8 for Moonshine; float32 dequantizes the weights).
Tiny's results go to results.md/.json, base's to results_base_<CT>.md/.json (base's export keeps
8-bit weights but multiplies in float, as float32 does).

Both sides read the same 16 kHz mono WAV copies (`audio_16k_wav`), decode greedily with the same
token cap (6.5 tokens per second of audio, at least 16: dicta_engine::moonshine::max_tokens) and
never cut the clips (all are < 20 s). Reported: identical-text rate, corpus WER of each against the
reference (Whisper English normalizer, jiwer) and the first differing items.
Outputs results.md and results.json next to this script.
"""
import argparse
import json
import math
import os
import subprocess
import time

import jiwer
import numpy as np
import soundfile as sf
from moonshine_onnx import MoonshineOnnxModel
from moonshine_onnx.transcribe import load_tokenizer
from whisper_normalizer.english import EnglishTextNormalizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
DATA = os.path.normpath(os.path.join(ROOT, "../shared/data"))
NORM = EnglishTextNormalizer()


def max_tokens(samples):
    return max(16, math.ceil(samples / 16000 * 6.5))


def wer(refs, hyps):
    pairs = [(NORM(r), NORM(h)) for r, h in zip(refs, hyps)]
    pairs = [(r, h) for r, h in pairs if r.strip()]
    return 100 * jiwer.wer([r for r, _ in pairs], [h if h.strip() else "<empty>" for _, h in pairs])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/dicta/models/moonshine-tiny"))
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--size", choices=["tiny", "base"], default=None,
                    help="the model's size (default: base when the folder's name says so, else tiny)")
    args = ap.parse_args()
    size = args.size or ("base" if "base" in os.path.basename(os.path.normpath(args.model)) else "tiny")
    # tiny's results keep their names; base's say the compute type (both are measured).
    stem = "results" if size == "tiny" else f"results_base_{os.environ.get('CT', 'default')}"
    rows = [json.loads(l) for l in open(os.path.join(DATA, "manifest.jsonl"))]
    items = [r for r in rows if r["language"] == "en" and r.get("text") and r["category"] == "short_utterance"]
    paths = [os.path.join(DATA, r["audio_16k_wav"]) for r in items]

    t = time.time()
    out = subprocess.run(
        [args.dicta, "transcribe", "--model", args.model, "--beam-size", "1",
         "--compute-type", os.environ.get("CT", "default"), "--format", "json", *paths],
        check=True, capture_output=True, text=True,
    )
    dicta_s = time.time() - t
    dicta = [r["text"] for r in json.loads(out.stdout)["results"]]

    model = MoonshineOnnxModel(models_dir=args.model, model_name=size, model_format="ort")
    tok = load_tokenizer()
    ref_texts, nudged = [], []
    rng = np.random.default_rng(0)
    t = time.time()
    for p in paths:
        audio, sr = sf.read(p, dtype="float32")
        assert sr == 16000 and audio.ndim == 1, p
        tokens = model.generate(audio[None, :], max_len=max_tokens(len(audio)))[0]
        ref_texts.append(tok.decode(tokens, skip_special_tokens=True).strip())
    ort_s = time.time() - t
    # How stable the reference is: onnxruntime again on the same audio with 1% of the samples
    # moved by one float32 ulp. Its 8-bit per-tensor activation quantization turns such
    # rounding-level changes into different tokens on some clips; no reimplementation that is
    # not bit-identical in every kernel can agree with it more often than it agrees with itself.
    for p in paths:
        audio, _ = sf.read(p, dtype="float32")
        b = audio.copy()
        idx = rng.random(len(b)) < 0.01
        b[idx] = np.nextafter(b[idx], np.float32(np.inf))
        tokens = model.generate(b[None, :], max_len=max_tokens(len(b)))[0]
        nudged.append(tok.decode(tokens, skip_special_tokens=True).strip())

    same = [a == b for a, b in zip(dicta, ref_texts)]
    self_same = sum(a == b for a, b in zip(nudged, ref_texts))
    refs = [r["text"] for r in items]
    res = {
        "items": len(items),
        "identical": sum(same),
        "identical_rate": sum(same) / len(items),
        "wer_dicta": wer(refs, dicta),
        "wer_onnxruntime": wer(refs, ref_texts),
        "onnxruntime_self_identical": self_same,
        "wer_onnxruntime_nudged": wer(refs, nudged),
        "compute_type": os.environ.get("CT", "default"),
        "seconds_dicta_process": dicta_s,
        "seconds_onnxruntime_loop": ort_s,
        "differences": [
            {"id": r["id"], "dicta": a, "onnxruntime": b}
            for r, a, b, s in zip(items, dicta, ref_texts, same) if not s
        ],
    }
    with open(os.path.join(HERE, stem + ".json"), "w") as f:
        json.dump(res, f, indent=1)
    lines = [
        f"# Moonshine {size}: Dicta vs onnxruntime (same .ort files, greedy)",
        "",
        f"- items: {res['items']} English short utterances of the dev set (16 kHz copies)",
        f"- Dicta compute type: {res['compute_type']}",
        f"- identical texts: {res['identical']} / {res['items']} ({100 * res['identical_rate']:.1f}%)",
        f"- onnxruntime vs itself with 1% of the samples moved by one ulp: {self_same} / {res['items']} identical "
        f"(WER {res['wer_onnxruntime_nudged']:.2f}%)",
        f"- corpus WER: Dicta {res['wer_dicta']:.2f}%, onnxruntime {res['wer_onnxruntime']:.2f}% "
        f"(Δ {res['wer_dicta'] - res['wer_onnxruntime']:+.2f})",
        f"- time (rough, shared machine): Dicta process {dicta_s:.1f} s (load included), onnxruntime loop {ort_s:.1f} s",
        "",
    ]
    if res["differences"]:
        lines += ["| item | Dicta | onnxruntime |", "|---|---|---|"]
        lines += [f"| {d['id']} | {d['dicta']} | {d['onnxruntime']} |" for d in res["differences"]]
    with open(os.path.join(HERE, stem + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
