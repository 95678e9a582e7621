#!/usr/bin/env python3
"""VAD parity of Dicta with faster-whisper over the whole dev set, and `--vad-filter`
transcription against faster-whisper's `vad_filter=True` on the long recordings.

Run from the repository root (after `cargo build --release -p dicta-cli`,
`dicta models fetch tiny.en` and `dicta models fetch silero-vad`):

    pip install faster-whisper==1.2.1 soundfile jiwer whisper-normalizer
    python3 tools/vad_parity/compare.py [--stages segments,transcribe]

- segments: every dev recording, three option sets (faster-whisper's defaults, tight pauses, a
  5 s maximum). Both sides read the same 16 kHz copies (`audio_16k_wav`); the two recordings
  without one (16 kHz MP3s) are decoded by each side's own MP3 decoder and reported apart.
  Counts recordings whose segments (in samples) are identical.
- transcribe: the long-form, diarization and multi-speaker recordings, tiny.en float32, beam 5,
  language en: faster-whisper `vad_filter=True` against `dicta transcribe --vad-filter`
  (identical texts, WER against the reference where there is one, and the agreement WER of Dicta
  against faster-whisper), plus wall times of both with and without the filter, interleaved.
Outputs results.md and results.json next to this script.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import jiwer
import numpy as np
import soundfile as sf
from faster_whisper import WhisperModel
from faster_whisper.vad import VadOptions, get_speech_timestamps
from whisper_normalizer.english import EnglishTextNormalizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
DATA = os.path.normpath(os.path.join(ROOT, "../shared/data"))
NORM = EnglishTextNormalizer()
OPTIONS = {
    "default": {},
    "tight": {"min_silence_duration_ms": 300, "speech_pad_ms": 100, "min_speech_duration_ms": 250},
    "max5": {"max_speech_duration_s": 5.0, "min_silence_duration_ms": 500, "speech_pad_ms": 200},
}
FLAGS = {
    "threshold": "--vad-threshold",
    "min_speech_duration_ms": "--vad-min-speech-duration-ms",
    "max_speech_duration_s": "--vad-max-speech-duration-s",
    "min_silence_duration_ms": "--vad-min-silence-duration-ms",
    "speech_pad_ms": "--vad-speech-pad-ms",
}


def read16k(path):
    x, sr = sf.read(path, dtype="float32")
    assert sr == 16000, (path, sr)
    if x.ndim > 1:
        x = x.mean(axis=1).astype(np.float32)
    return x


def item_path(r):
    rel = r.get("audio_16k_wav") or r["audio"]
    return os.path.join(DATA, rel), bool(r.get("audio_16k_wav"))


def dicta_vad(dicta, paths, opts, home):
    flags = []
    for k, v in opts.items():
        flags += [FLAGS[k], str(v)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "vad.json")
        subprocess.run([dicta, "vad", *paths, "--output", out, "--quiet", *flags], check=True, env=env(home))
        res = json.load(open(out))["results"]
    return [[[round(s["start"] * 16000), round(s["end"] * 16000)] for s in r["segments"]] for r in res]


def env(home):
    e = dict(os.environ)
    if home:
        e["DICTA_HOME"] = home
    return e


def stage_segments(args, rows):
    paths, exact = zip(*(item_path(r) for r in rows))
    report = {}
    for name, opts in OPTIONS.items():
        ours = dicta_vad(args.dicta, list(paths), opts, args.home)
        same = {True: [0, 0], False: [0, 0]}
        diffs = []
        for r, p, ex, got in zip(rows, paths, exact, ours):
            want = [[s["start"], s["end"]] for s in get_speech_timestamps(read16k(p), VadOptions(**opts))]
            same[ex][1] += 1
            if got == want:
                same[ex][0] += 1
            elif len(diffs) < 5:
                diffs.append({"id": r["id"], "dicta": got[:4], "faster_whisper": want[:4]})
        report[name] = {
            "identical_16k": same[True][0], "items_16k": same[True][1],
            "identical_mp3": same[False][0], "items_mp3": same[False][1], "first_differences": diffs,
        }
        print(f"segments {name}: {same[True][0]}/{same[True][1]} identical (16k wav), "
              f"{same[False][0]}/{same[False][1]} (mp3, separate decoders)", flush=True)
    return report


def wer(ref, hyp):
    r, h = NORM(ref), NORM(hyp)
    if not r.strip():
        return None
    return 100 * jiwer.wer(r, h if h.strip() else "<empty>")


def stage_transcribe(args, rows):
    items = [r for r in rows if r["category"] in ("long_form", "diarization", "multi_speaker")]
    paths = [item_path(r)[0] for r in items]
    audio_s = sum(len(read16k(p)) for p in paths) / 16000
    model = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=2)
    times = {}
    fw_text = {}

    def run_fw(vad):
        t = time.time()
        texts = []
        for p in paths:
            segs, _ = model.transcribe(read16k(p), language="en", beam_size=5, vad_filter=vad)
            texts.append("".join(s.text for s in segs).strip())
        return time.time() - t, texts

    def run_dicta(vad):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "t.json")
            # float32 on both sides (Dicta's default is int8 where the CPU has VNNI).
            cmd = [args.dicta, "transcribe", *paths, "--model", args.model, "--language", "en", "--threads", "2",
                   "--compute-type", "float32", "--output", out, "--quiet"] + (["--vad-filter"] if vad else [])
            t = time.time()
            subprocess.run(cmd, check=True, env=env(args.home))
            wall = time.time() - t
            res = json.load(open(out))["results"]
        return wall, [(r["text"] or "").strip() for r in res]

    for vad in (False, True):
        for side, f in (("faster_whisper", run_fw), ("dicta", run_dicta)):
            wall, texts = f(vad)
            key = f"{side}{'_vad' if vad else ''}"
            times[key] = wall
            fw_text[key] = texts
            print(f"transcribe {key}: {wall:.1f} s (RTFx {audio_s / wall:.1f})", flush=True)
    per_item = []
    for i, r in enumerate(items):
        a, b = fw_text["dicta_vad"][i], fw_text["faster_whisper_vad"][i]
        per_item.append({
            "id": r["id"], "identical": a == b,
            "wer_dicta_vad": wer(r.get("text") or "", a), "wer_fw_vad": wer(r.get("text") or "", b),
            "agreement_wer": wer(b, a),
        })
    return {"audio_seconds": audio_s, "wall_seconds": times, "items": per_item}


def write_md(res):
    lines = ["# VAD parity: Dicta vs faster-whisper 1.2.1", "",
             "Command: `python3 tools/vad_parity/compare.py` (see the script's docstring).", ""]
    if "segments" in res:
        lines += ["## Speech segments (every dev recording)", "",
                  "| options | identical (16 kHz WAV) | identical (16 kHz MP3, own decoders) |", "|---|---|---|"]
        for name, r in res["segments"].items():
            lines.append(f"| {name} `{json.dumps(OPTIONS[name])}` | {r['identical_16k']}/{r['items_16k']} | "
                         f"{r['identical_mp3']}/{r['items_mp3']} |")
        lines.append("")
    if "transcribe" in res:
        t = res["transcribe"]
        lines += ["## `--vad-filter` transcription (long-form, diarization, multi-speaker recordings)", "",
                  f"tiny.en float32, beam 5, 2 threads; {t['audio_seconds']:.0f} s of audio.", "",
                  "| recording | identical text | WER dicta --vad-filter | WER faster-whisper vad_filter | "
                  "dicta vs faster-whisper WER |", "|---|---|---|---|---|"]
        fmt = lambda v: "–" if v is None else f"{v:.2f}"
        for r in t["items"]:
            lines.append(f"| {r['id']} | {'yes' if r['identical'] else 'no'} | {fmt(r['wer_dicta_vad'])} | "
                         f"{fmt(r['wer_fw_vad'])} | {fmt(r['agreement_wer'])} |")
        lines += ["", "| run | wall s | RTFx |", "|---|---|---|"]
        for k, w in t["wall_seconds"].items():
            lines.append(f"| {k} | {w:.1f} | {t['audio_seconds'] / w:.1f} |")
        lines.append("")
    open(os.path.join(HERE, "results.md"), "w").write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/dicta/models/tiny.en"))
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--home", default=None, help="DICTA_HOME for the dicta runs")
    ap.add_argument("--stages", default="segments,transcribe")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(os.path.join(DATA, "manifest.jsonl"))]
    # Stages not run this time keep their previous results.
    path = os.path.join(HERE, "results.json")
    res = json.load(open(path)) if os.path.exists(path) else {}
    stages = args.stages.split(",")
    if "segments" in stages:
        res["segments"] = stage_segments(args, rows)
    if "transcribe" in stages:
        res["transcribe"] = stage_transcribe(args, rows)
    json.dump(res, open(os.path.join(HERE, "results.json"), "w"), indent=1)
    write_md(res)


if __name__ == "__main__":
    main()
