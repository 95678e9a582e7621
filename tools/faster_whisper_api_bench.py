#!/usr/bin/env python3
"""The same faster-whisper script run on faster-whisper and on `dicta.faster_whisper` (the import
swapped, nothing else): wall time of `model.transcribe(...)` + reading the segments, per library,
runs interleaved, and whether the texts agree.

    pip install ./python faster-whisper
    python3 tools/faster_whisper_api_bench.py [--model DIR] [--compute-type int8] [--runs 3]
        [--beam-size 5] [FILES...]

Default files: the dev set's English short utterances with text (../shared/data), one call each, in
order; the model folder defaults to the tiny.en CTranslate2 folder Dicta fetched. Both load the same
weights once, outside the timing.
"""
import argparse
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "../../shared/data"))


def dev_files():
    rows = [json.loads(l) for l in open(os.path.join(DATA, "manifest.jsonl"))]
    return [os.path.join(DATA, r["audio_16k_wav"]) for r in rows
            if r["category"] == "short_utterance" and r["language"] == "en" and r["text"] and r["audio_16k_wav"]]


def run(model, files, kw):
    texts = []
    t0 = time.perf_counter()
    for f in files:
        segments, _ = model.transcribe(f, **kw)
        texts.append("".join(s.text for s in segments).strip())
    return time.perf_counter() - t0, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/dicta/models/tiny.en"))
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    files = a.files or dev_files()
    import faster_whisper
    import dicta.faster_whisper
    models = {
        "faster-whisper": faster_whisper.WhisperModel(a.model, device="cpu", compute_type=a.compute_type, cpu_threads=a.threads),
        "dicta": dicta.faster_whisper.WhisperModel(a.model, device="cpu", compute_type=a.compute_type, cpu_threads=a.threads),
    }
    kw = dict(beam_size=a.beam_size, language="en")
    walls = {k: [] for k in models}
    texts = {}
    for _ in range(a.runs):
        for name, m in models.items():
            wall, texts[name] = run(m, files, kw)
            walls[name].append(wall)
    same = sum(x == y for x, y in zip(texts["faster-whisper"], texts["dicta"]))
    audio = 0.0
    import soundfile as sf
    for f in files:
        audio += sf.info(f).duration
    print(f"{len(files)} files, {audio:.1f} s of audio, beam {a.beam_size}, {a.compute_type}, {a.threads} threads")
    print("| library | walls (s) | best | RTFx |")
    print("|---|---|---|---|")
    for name, w in walls.items():
        print(f"| {name} | {' / '.join(f'{x:.2f}' for x in w)} | {min(w):.2f} | {audio / min(w):.1f} |")
    print(f"speed-up (best against best): {min(walls['faster-whisper']) / min(walls['dicta']):.2f}x; "
          f"identical texts {same} of {len(files)}")


if __name__ == "__main__":
    main()
