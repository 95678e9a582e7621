#!/usr/bin/env python3
"""Whisper greedy-decoding parity of Dicta with faster-whisper on a real + synthetic corpus.

Run from the repository root (after `cargo build --release -p dicta-cli`):

    python3 tools/whisper_parity/compare.py [--model /work/models/tiny.en-ct2] [--dicta target/release/dicta]

What it does (all deterministic except the timings):
  1. Corpus: every English item with a reference text in ../shared/data/manifest.jsonl, plus ~30
     synthetic utterances spoken by espeak-ng (voice en-us, regenerated into a temp dir each run).
     Both engines transcribe (a) the original files (so Dicta's own audio decoder/resampler is
     exercised; faster-whisper decodes with PyAV) and (b) the 16 kHz mono WAV copies.
     Settings on both sides: fp32, beam_size=1, temperature 0 only, condition_on_previous_text
     False, no VAD, timestamps on, word_timestamps False, language en.
     Reported: identical-text rate, corpus WER of each engine against the reference (Whisper
     English normalizer, jiwer), and the WER delta.
  2. Long-form: a ~4 min and a ~10 min recording concatenated from utterances with known text
     (0.5 s of silence between them), and a held-out ~10 min espeak-ng recording of continuous
     prose (the GPL-3 text, sentence by sentence, four voices, 0.15-0.65 s pauses), transcribed by
     Dicta in --long-form sequential and batched and by faster-whisper (sequential); WER,
     deletions/insertions, and the errors that fall near window boundaries (batched: overlaps at
     every 25 s; 30 s windows, 5 s overlap), with those the sequential mode does not also make.
  3. RTFx: 8 x 29 s files; Dicta (batch 8, 2 threads) vs faster-whisper fp32 and int8
     (cpu_threads=2). The machine is shared: treat the timings as rough.

Outputs: tools/whisper_parity/results.md and results.json (next to this script).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import jiwer
import numpy as np
import soundfile as sf
import soxr
from whisper_normalizer.english import EnglishTextNormalizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
DATA = os.path.normpath(os.path.join(ROOT, "../shared/data"))
SR = 16000
NORM = EnglishTextNormalizer()

# Synthetic utterances with known text: numbers, names, dates, common sentences.
ESPEAK_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "My phone number is five five five, one two three, four five six seven.",
    "The meeting starts at nine thirty in the morning on Tuesday.",
    "There are twenty four hours in a day and seven days in a week.",
    "John Smith moved to Chicago in nineteen ninety eight.",
    "She sells sea shells by the sea shore.",
    "Turn left at the second traffic light and then go straight ahead.",
    "The train to Boston leaves from platform number three.",
    "I would like a cup of coffee with milk and no sugar.",
    "Mary had a little lamb whose fleece was white as snow.",
    "The weather today is sunny with a high of seventy two degrees.",
    "Can you send me the report by Friday afternoon?",
    "Our company was founded by Alice Johnson and Robert Brown.",
    "The library is closed on Sundays and public holidays.",
    "Add two cups of flour, one egg, and a pinch of salt.",
    "The population of the city is about three million people.",
    "Thank you very much for your help with the project.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The children played in the park until the sun went down.",
    "Paris is the capital of France and Berlin is the capital of Germany.",
    "He paid fifteen dollars for the book and two dollars for the pen.",
    "The doctor said that I should get more sleep and exercise.",
    "Please remember to turn off the lights when you leave the room.",
    "The first man on the moon was Neil Armstrong in nineteen sixty nine.",
    "We are going to the beach this weekend if it does not rain.",
    "The password must contain at least eight characters.",
    "A journey of a thousand miles begins with a single step.",
    "Michael and Sarah are getting married in June.",
    "The store opens at eight and closes at ten in the evening.",
]

# Items whose `audio` cannot be fed as is: stereo files holding two items (one per channel) and a
# headerless raw file; both engines get the 16 kHz copy for these in the "original" run too.
USE_16K_ALWAYS = {"faster_whisper/stereo_diarization_left", "faster_whisper/stereo_diarization_right",
                  "pocketsphinx/goforward"}


def clean_reference(text):
    """The data README's markup rule: drop <cutoff-…>, […], <unk>, <VOCNOISE>; <hes-w> -> w."""
    text = re.sub(r"<cutoff-[^>]*>", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"<unk>|<VOCNOISE>", " ", text, flags=re.I)
    text = re.sub(r"<hes-([^>]*)>", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def load_manifest():
    with open(os.path.join(DATA, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f]


def real_items():
    items = []
    for r in load_manifest():
        if r["language"] != "en" or not r.get("text"):
            continue
        orig = r["audio_16k_wav"] if r["id"] in USE_16K_ALWAYS else r["audio"]
        items.append({
            "id": r["id"], "kind": "real",
            "orig": os.path.join(DATA, orig), "wav16": os.path.join(DATA, r["audio_16k_wav"]),
            "reference": clean_reference(r["text"]),
            "duration": r["duration_s"],
        })
    return items


def espeak_items(tmp):
    """espeak-ng en-us WAVs (22.05 kHz, the 'original') and 16 kHz s16 copies (soxr VHQ)."""
    items = []
    for i, text in enumerate(ESPEAK_SENTENCES):
        orig = os.path.join(tmp, f"espeak_{i:02d}.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", orig, text], check=True)
        x, sr = sf.read(orig, dtype="float32")
        y = soxr.resample(x, sr, SR, quality="VHQ")
        wav16 = os.path.join(tmp, f"espeak_{i:02d}.16k.wav")
        sf.write(wav16, y, SR, subtype="PCM_16")
        items.append({"id": f"espeak/{i:02d}", "kind": "espeak", "orig": orig, "wav16": wav16,
                      "reference": text, "duration": len(x) / sr})
    return items


# ---------------------------------------------------------------- engines

def fw_transcribe(model, path):
    segs, _ = model.transcribe(
        path, language="en", beam_size=1, temperature=0.0, condition_on_previous_text=False,
        vad_filter=False, word_timestamps=False)
    segs = list(segs)
    return "".join(s.text for s in segs).strip(), [(s.start, s.end, s.text) for s in segs]


def dicta_transcribe(args, tmp, paths, extra=(), tag="run"):
    """Runs the dicta CLI once over all `paths`; returns (texts, segments, stats)."""
    manifest = os.path.join(tmp, f"{tag}.manifest.json")
    out = os.path.join(tmp, f"{tag}.out.json")
    with open(manifest, "w") as f:
        json.dump([{"id": str(i), "audio": p} for i, p in enumerate(paths)], f)
    cmd = [args.dicta, "transcribe", "--manifest", manifest, "--model", args.model,
           "--beam-size", "1", "--temperature", "0", "--no-condition-on-previous-text",
           "--language", "en", "--format", "json", "--batch-size", "8", "--threads", str(args.threads),
           "--quiet", "--output", out, *extra]
    if "--compute-type" not in extra:
        # Parity is with faster-whisper float32: name it, since `default` is int8 on VNNI CPUs.
        cmd += ["--compute-type", "float32"]
    subprocess.run(cmd, check=True)
    with open(out) as f:
        res = json.load(f)
    by_id = {r["id"]: r for r in res["results"]}
    texts, segs = [], []
    for i in range(len(paths)):
        r = by_id[str(i)]
        if r.get("error"):
            texts.append(None)
            segs.append([])
            print(f"dicta error on {paths[i]}: {r['error']}", file=sys.stderr)
        else:
            texts.append(r["text"].strip())
            segs.append([(s["start"], s["end"], s["text"]) for s in r["segments"]])
    return texts, segs, res.get("stats", {})


# ---------------------------------------------------------------- scoring

def score_text(reference):
    """Reference as scored: the Whisper normalizer deletes text in parentheses, but LJ Speech
    references put spoken words there (LJ001-0024), so parentheses become spaces first."""
    return re.sub(r"[()]", " ", reference)


def corpus_wer(refs, hyps):
    pairs = [(NORM(score_text(r)), NORM(h or "")) for r, h in zip(refs, hyps)]
    pairs = [(r, h) for r, h in pairs if r.strip()]
    out = jiwer.process_words([r for r, _ in pairs], [h for _, h in pairs])
    n = out.hits + out.substitutions + out.deletions
    return {"wer": out.wer, "sub": out.substitutions, "del": out.deletions, "ins": out.insertions,
            "ref_words": n}


def corpus_rows(items, fw_texts, dicta_texts):
    return [{"id": it["id"], "kind": it["kind"], "identical": d is not None and d == f,
             "same_normalized": d is not None and NORM(d) == NORM(f),
             "dicta": d, "fw": f, "reference": it["reference"]}
            for it, f, d in zip(items, fw_texts, dicta_texts)]


def corpus_stats(rows):
    """Identical-text rate and corpus WER of both engines over `rows` (recomputed on every report)."""
    same = sum(r["identical"] for r in rows)
    refs = [r["reference"] for r in rows]
    w_d = corpus_wer(refs, [r["dicta"] for r in rows])
    w_f = corpus_wer(refs, [r["fw"] for r in rows])
    return {"n": len(rows), "identical": same, "identical_pct": 100.0 * same / len(rows),
            "same_normalized": sum(r["same_normalized"] for r in rows),
            "wer_dicta": w_d, "wer_fw": w_f, "wer_delta_abs_pct": 100.0 * abs(w_d["wer"] - w_f["wer"])}


def corpus_summaries(rows):
    return {subset: corpus_stats([r for r in rows if pick(r)]) for subset, pick in
            [("all", lambda r: True), ("real", lambda r: r["kind"] == "real"),
             ("espeak", lambda r: r["kind"] == "espeak")]}


# ---------------------------------------------------------------- long-form

def long_pool():
    """Utterances with clean references, in a fixed order: LJ Speech, then the other clean
    English sources (no markup items, no SpeechBrain whose references have homophone errors)."""
    man = load_manifest()
    ok = [r for r in man if r["language"] == "en" and r.get("text") and r["category"] == "short_utterance"
          and not r.get("contains_markup") and not r["id"].startswith("speechbrain/")]
    lj = [r for r in ok if r["id"].startswith("coqui_tts/")]
    rest = [r for r in ok if not r["id"].startswith("coqui_tts/")]
    return lj, rest


def build_long(target_s, pool, path):
    gap = np.zeros(int(0.5 * SR), dtype=np.float32)
    parts, spans, t = [], [], 0.0
    i = 0
    while t < target_s:
        r = pool[i % len(pool)]
        i += 1
        x, sr = sf.read(os.path.join(DATA, r["audio_16k_wav"]), dtype="float32")
        assert sr == SR and x.ndim == 1
        parts += [x, gap]
        spans.append({"id": r["id"], "start": t, "end": t + len(x) / SR, "text": r["text"]})
        t += (len(x) + len(gap)) / SR
    audio = np.concatenate(parts)
    sf.write(path, audio, SR, subtype="PCM_16")
    return spans, len(audio) / SR


def build_espeak_long(target_s, path, source="/usr/share/common-licenses/GPL-3"):
    """Continuous synthetic prose with exact references: the sentences of a licence text (from its
    preamble, without parentheticals and section numbers), spoken one by one by espeak-ng in four
    alternating voices and speeds, joined with short pauses (0.15, 0.4 or 0.65 s)."""
    import io
    from scipy.signal import resample_poly
    text = open(source).read()
    text = text[text.index("Preamble"):] if "Preamble" in text else text
    text = re.sub(r"\([^)]*\)", " ", text)
    text = re.sub(r"^\s*\d+\.\s*", " ", text, flags=re.M)
    text = re.sub(r"[\"`'<>_*]", " ", text)
    text = re.sub(r"\s+", " ", text)
    sents = [x.strip() for x in re.split(r"(?<=[.!?;:])\s+", text)]
    sents = [x for x in sents if 4 <= len(x.split()) <= 45 and re.fullmatch(r"[A-Za-z ,.;:!?-]+", x)]
    voices = [("en-us", 165), ("en-gb", 150), ("en-us+f2", 175), ("en-gb-x-rp+m3", 160)]
    parts, spans, t = [], [], 0.0
    for i, sentence in enumerate(sents):
        voice, speed = voices[i % len(voices)]
        wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", sentence],
                             capture_output=True, check=True).stdout
        x, sr = sf.read(io.BytesIO(wav), dtype="float32")
        x = resample_poly(x, SR // 100, sr // 100).astype(np.float32)
        nz = np.nonzero(np.abs(x) > 1e-3)[0]
        x = x[max(nz[0] - 800, 0):nz[-1] + 800]
        gap = np.zeros(int(SR * (0.15 + 0.25 * (i % 3))), dtype=np.float32)
        spans.append({"id": f"sentence{i}", "start": t, "end": t + len(x) / SR, "text": sentence})
        parts += [x, gap]
        t += (len(x) + len(gap)) / SR
        if t >= target_s:
            break
    audio = np.concatenate(parts) * 0.8
    sf.write(path, audio, SR, subtype="PCM_16")
    return spans, len(audio) / SR


def word_times(spans):
    """Normalized reference words with an approximate time (linear within each utterance)."""
    words, times = [], []
    for s in spans:
        w = NORM(score_text(s["text"])).split()
        for k, word in enumerate(w):
            words.append(word)
            times.append(s["start"] + (k + 0.5) / max(len(w), 1) * (s["end"] - s["start"]))
    return words, times


def boundary_errors(ref_words, ref_times, hyp_text, stride=25.0, overlap=5.0, near=3.0):
    """Deletions/insertions with their approximate time, and which fall within `near` s of a
    batched-mode overlap region [k*stride, k*stride+overlap]."""
    hyp = NORM(hyp_text).split()
    out = jiwer.process_words(" ".join(ref_words), " ".join(hyp))
    errs = []
    for ch in out.alignments[0]:
        if ch.type not in ("delete", "insert", "substitute"):
            continue
        ri = min(ch.ref_start_idx, len(ref_times) - 1)
        t = ref_times[ri]
        k = round((t - overlap / 2) / stride)
        dist = 0.0 if k >= 1 and k * stride <= t <= k * stride + overlap else min(
            abs(t - k * stride), abs(t - (k * stride + overlap))) if k >= 1 else 1e9
        ctx_ref = " ".join(ref_words[max(0, ch.ref_start_idx - 3):ch.ref_end_idx + 3])
        ctx_hyp = " ".join(hyp[max(0, ch.hyp_start_idx - 3):ch.hyp_end_idx + 3])
        doubled = ch.type == "insert" and all(
            w in hyp[max(0, ch.hyp_start_idx - 4):ch.hyp_start_idx] + ref_words[ch.ref_start_idx:ch.ref_start_idx + 4]
            for w in hyp[ch.hyp_start_idx:ch.hyp_end_idx])
        errs.append({"type": ch.type, "time": round(t, 1), "near_overlap": dist <= near, "ref_index": ri,
                     "ref": " ".join(ref_words[ch.ref_start_idx:ch.ref_end_idx]),
                     "hyp": " ".join(hyp[ch.hyp_start_idx:ch.hyp_end_idx]),
                     "looks_doubled": doubled, "ref_context": ctx_ref, "hyp_context": ctx_hyp})
    n = out.hits + out.substitutions + out.deletions
    return {"wer": out.wer, "ref_words": n, "sub": out.substitutions, "del": out.deletions,
            "ins": out.insertions, "errors": errs}


def run_long_form(args, tmp, fw_model):
    lj, rest = long_pool()
    results = {}
    sizes = [("4min", 235.0, lj + rest), ("10min", 600.0, lj + rest + lj[::-1]), ("espeak10min", 600.0, None)]
    for name, target, pool in [s for s in sizes if s[0] in args.long_sizes.split(",")]:
        path = os.path.join(tmp, f"long_{name}.wav")
        spans, dur = build_long(target, pool, path) if pool else build_espeak_long(target, path)
        ref_words, ref_times = word_times(spans)
        entry = {"duration_s": round(dur, 1), "utterances": len(spans), "ref_words": len(ref_words), "runs": {}}
        hyps = {}
        for mode in ["sequential", "batched"]:
            t0 = time.time()
            texts, segs, stats = dicta_transcribe(args, tmp, [path], ["--long-form", mode], tag=f"long_{name}_{mode}")
            hyps[f"dicta_{mode}"] = (texts[0] or "", segs[0], time.time() - t0)
        t0 = time.time()
        text, segs = fw_transcribe(fw_model, path)
        hyps["fw_sequential"] = (text, segs, time.time() - t0)
        for k, (text, segs, wall) in hyps.items():
            be = boundary_errors(ref_words, ref_times, text)
            be["segments"] = len(segs)
            be["wall_s"] = round(wall, 1)
            be["text"] = text
            entry["runs"][k] = be
        # Batched-mode errors near overlaps that the sequential mode does not make at the same
        # place (within 2 reference words): the candidates for errors made by cutting.
        seq_errs = [x for x in entry["runs"]["dicta_sequential"]["errors"] if x["type"] != "substitute"]
        for x in entry["runs"]["dicta_batched"]["errors"]:
            x["not_in_sequential"] = x["type"] != "substitute" and not any(
                y["type"] == x["type"] and abs(y["ref_index"] - x["ref_index"]) <= 2 for y in seq_errs)
        entry["dicta_seq_equals_fw"] = hyps["dicta_sequential"][0] == hyps["fw_sequential"][0]
        entry["dicta_seq_vs_fw_word_diff"] = diff_words(hyps["fw_sequential"][0], hyps["dicta_sequential"][0])
        entry["dicta_batched_vs_seq_word_diff"] = diff_words(hyps["dicta_sequential"][0], hyps["dicta_batched"][0])
        results[name] = entry
        print(f"long {name}: {dur:.0f} s, " + ", ".join(
            f"{k} WER {v['wer']*100:.2f}% (del {v['del']}, ins {v['ins']})" for k, v in entry["runs"].items()),
            file=sys.stderr)
    return results


def diff_words(a, b):
    """Word-level differences between two hypotheses (normalized), as short strings."""
    out = jiwer.process_words(NORM(a) or "<empty>", NORM(b))
    aw, bw = (NORM(a) or "<empty>").split(), NORM(b).split()
    diffs = []
    for ch in out.alignments[0]:
        if ch.type != "equal":
            diffs.append(f"{ch.type} @{ch.ref_start_idx}: '{' '.join(aw[ch.ref_start_idx:ch.ref_end_idx])}' -> "
                         f"'{' '.join(bw[ch.hyp_start_idx:ch.hyp_end_idx])}'")
    return diffs


# ---------------------------------------------------------------- RTFx

def run_rtfx(args, tmp):
    from faster_whisper import WhisperModel
    lj, rest = long_pool()
    src = os.path.join(tmp, "rtfx_src.wav")
    build_long(240.0, lj + rest, src)
    x, _ = sf.read(src, dtype="float32")
    paths = []
    for i in range(8):
        p = os.path.join(tmp, f"rtfx_{i}.wav")
        sf.write(p, x[i * 29 * SR:(i + 1) * 29 * SR], SR, subtype="PCM_16")
        paths.append(p)
    audio_s = 8 * 29.0
    res = {"audio_s": audio_s, "files": 8, "reps": args.rtfx_reps,
           "note": "shared 2-core machine; best of the runs; rough"}
    walls = []
    for rep in range(args.rtfx_reps):
        _, _, stats = dicta_transcribe(args, tmp, paths, tag=f"rtfx_{rep}")
        walls.append(stats.get("wall_seconds", float("nan")))
    res["dicta_fp32_batch8"] = {"wall_s": min(walls), "rtfx": audio_s / min(walls)}
    for ct in ["float32", "int8"]:
        m = WhisperModel(args.model, device="cpu", compute_type=ct, cpu_threads=args.threads)
        walls = []
        for rep in range(args.rtfx_reps):
            t0 = time.time()
            for p in paths:
                fw_transcribe(m, p)
            walls.append(time.time() - t0)
        res[f"fw_{ct}"] = {"wall_s": min(walls), "rtfx": audio_s / min(walls)}
    for k in ["fw_float32", "fw_int8"]:
        res[f"dicta_over_{k}"] = res["dicta_fp32_batch8"]["rtfx"] / res[k]["rtfx"]
    print("rtfx:", json.dumps(res), file=sys.stderr)
    return res


# ---------------------------------------------------------------- report

def md_escape(s):
    return (s or "").replace("|", "\\|")


def write_report(summary, path_md, path_json):
    L = []
    L.append("# Whisper greedy parity: Dicta vs faster-whisper\n")
    L.append(f"Generated by `python3 tools/whisper_parity/compare.py` — model `{summary['model']}`, "
             f"faster-whisper {summary['faster_whisper']}, dicta `{summary['dicta_version']}`. "
             "Settings: fp32, beam_size=1, temperature 0 (no fallback), condition_on_previous_text=False, "
             "no VAD, language en. WER uses the Whisper English normalizer and jiwer (corpus level).\n")
    L.append("## Summary\n")
    L.append("| input | subset | items | identical text | same after normalizer | WER dicta | WER faster-whisper | |ΔWER| |")
    L.append("|---|---|---|---|---|---|---|---|")
    for inp, c in summary.get("corpus", {}).items():
        c["summary"] = corpus_summaries(c["rows"])
        for subset, s in c["summary"].items():
            L.append(f"| {inp} | {subset} | {s['n']} | {s['identical']} ({s['identical_pct']:.1f}%) | "
                     f"{s['same_normalized']} | {100*s['wer_dicta']['wer']:.2f}% | {100*s['wer_fw']['wer']:.2f}% | "
                     f"{s['wer_delta_abs_pct']:.2f} |")
    L.append("\n`original` feeds each engine the source file (Dicta decodes/resamples it itself; faster-whisper "
             "uses PyAV); `16k wav` feeds both the same 16 kHz mono s16 copy. The stereo channel items and the "
             "headerless raw file use the 16 kHz copy in both runs. espeak-ng utterances are 22.05 kHz "
             "originals resampled to 16 kHz with soxr (VHQ) for the `16k wav` run.\n")
    lf = summary.get("long_form")
    if lf:
        L.append("## Long-form\n")
        L.append("4min and 10min: recordings concatenated from utterances with known text (0.5 s silence "
                 "between them); espeak10min: held-out continuous synthetic prose (GPL-3 text, espeak-ng, four "
                 "voices, 0.15–0.65 s pauses). Errors 'near overlap' lie within 3 s of a batched-mode overlap "
                 "region [25k, 25k+5] s (30 s windows, 5 s overlap); reference word times are interpolated "
                 "within each utterance (±1–2 s). 'Not in sequential': the batched run's deletions/insertions "
                 "near overlaps that the sequential run does not make at the same place (±2 words), the "
                 "candidates for words dropped or doubled by cutting; the rest are the model's own errors.\n")
        L.append("| recording | run | WER | sub | del | ins | errors near overlaps (del/ins) | near overlaps, not in sequential (del/ins) | looks doubled | segments |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for name, e in lf.items():
            for run, r in e["runs"].items():
                near = [x for x in r["errors"] if x["near_overlap"]]
                nd = sum(x["type"] == "delete" for x in near)
                ni = sum(x["type"] == "insert" for x in near)
                dbl = sum(x["looks_doubled"] for x in r["errors"])
                new = [x for x in near if x.get("not_in_sequential")]
                new_cell = (f"{len(new)} ({sum(x['type'] == 'delete' for x in new)}/"
                            f"{sum(x['type'] == 'insert' for x in new)})") if run == "dicta_batched" else "–"
                L.append(f"| {name} ({e['duration_s']} s, {e['ref_words']} words) | {run} | {100*r['wer']:.2f}% | "
                         f"{r['sub']} | {r['del']} | {r['ins']} | {len(near)} ({nd}/{ni}) | {new_cell} | {dbl} | "
                         f"{r['segments']} |")
        for name, e in lf.items():
            L.append(f"\n**{name}**: dicta sequential text identical to faster-whisper: "
                     f"{'yes' if e['dicta_seq_equals_fw'] else 'no'}.")
            if e["dicta_seq_vs_fw_word_diff"]:
                L.append("Word differences faster-whisper → dicta sequential: " +
                         "; ".join(md_escape(d) for d in e["dicta_seq_vs_fw_word_diff"][:20]))
            L.append(f"Word differences dicta sequential → dicta batched ({len(e['dicta_batched_vs_seq_word_diff'])}): " +
                     "; ".join(md_escape(d) for d in e["dicta_batched_vs_seq_word_diff"][:30]))
            for run, r in e["runs"].items():
                dels_ins = [x for x in r["errors"] if x["type"] != "substitute" and (x["near_overlap"] or x["looks_doubled"])]
                if dels_ins:
                    L.append(f"\n{name} {run}: deletions/insertions near overlaps or doubled:\n")
                    for x in dels_ins:
                        L.append(f"- {x['type']} at ~{x['time']} s: ref '{md_escape(x['ref'])}' hyp '{md_escape(x['hyp'])}' "
                                 f"(ref …{md_escape(x['ref_context'])}… / hyp …{md_escape(x['hyp_context'])}…)"
                                 + (" **doubled**" if x["looks_doubled"] else "")
                                 + (" (not in sequential)" if x.get("not_in_sequential") else ""))
        L.append("")
    rt = summary.get("rtfx")
    if rt:
        L.append("## Speed (RTFx, rough)\n")
        L.append(f"{rt['files']} × 29 s files ({rt['audio_s']:.0f} s audio), 2 threads, best of {rt.get('reps', 2)} runs, model load excluded. "
                 "The machine is shared with other jobs (noisy): compare ratios, not absolute numbers.\n")
        L.append("| engine | wall s | RTFx |")
        L.append("|---|---|---|")
        for k in ["dicta_fp32_batch8", "fw_float32", "fw_int8"]:
            L.append(f"| {k} | {rt[k]['wall_s']:.2f} | {rt[k]['rtfx']:.1f} |")
        L.append(f"\nDicta / faster-whisper fp32: {rt['dicta_over_fw_float32']:.2f}×; "
                 f"Dicta / faster-whisper int8: {rt['dicta_over_fw_int8']:.2f}×.\n")
    L.append("## Per utterance\n")
    for inp, c in summary.get("corpus", {}).items():
        rows = c["rows"]
        mism = [r for r in rows if not r["identical"]]
        L.append(f"### {inp}: {len(mism)} mismatches of {len(rows)}\n")
        L.append("| id | identical | dicta | faster-whisper |")
        L.append("|---|---|---|---|")
        for r in sorted(rows, key=lambda r: r["identical"]):
            mark = "yes" if r["identical"] else ("**no** (same normalized)" if r["same_normalized"] else "**no**")
            L.append(f"| {r['id']} | {mark} | {md_escape(r['dicta'])} | {md_escape(r['fw'])} |")
        L.append("")
    with open(path_md, "w") as f:
        f.write("\n".join(L) + "\n")
    with open(path_json, "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("DICTA_TEST_MODEL_DIR", "/work/models/tiny.en-ct2"))
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stages", default="corpus,long-form,rtfx",
                    help="comma-separated subset of corpus,long-form,rtfx; stages not run keep their "
                         "entries from an existing results.json in --out")
    ap.add_argument("--long-sizes", default="4min,10min,espeak10min", help="long-form recordings to build")
    ap.add_argument("--rtfx-reps", type=int, default=2, help="timed runs per engine (best is kept)")
    ap.add_argument("--out", default=HERE, help="folder for results.md / results.json")
    args = ap.parse_args()
    stages = set(args.stages.split(","))

    import faster_whisper
    from faster_whisper import WhisperModel

    fw_model = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=args.threads)
    version = subprocess.run([args.dicta, "--version"], capture_output=True, text=True).stdout.strip()
    summary = {}
    os.makedirs(args.out, exist_ok=True)
    prev = os.path.join(args.out, "results.json")
    if os.path.exists(prev):
        with open(prev) as f:
            summary = json.load(f)
    summary.update({"model": os.path.basename(args.model.rstrip("/")),
                    "faster_whisper": faster_whisper.__version__, "dicta_version": version})
    with tempfile.TemporaryDirectory(prefix="whisper_parity_") as tmp:
        if "corpus" in stages:
            run_corpus(args, tmp, fw_model, summary)
        if "long-form" in stages:
            summary["long_form"] = run_long_form(args, tmp, fw_model)
        if "rtfx" in stages:
            summary["rtfx"] = run_rtfx(args, tmp)
    write_report(summary, os.path.join(args.out, "results.md"), os.path.join(args.out, "results.json"))
    print(f"wrote {args.out}/results.md", file=sys.stderr)


def run_corpus(args, tmp, fw_model, summary):
    """Corpus stage: both engines on every item, original files and 16 kHz copies."""
    summary["corpus"] = {}
    items = real_items() + espeak_items(tmp)
    print(f"{len(items)} items", file=sys.stderr)
    for inp, key in [("original", "orig"), ("16k wav", "wav16")]:
        paths = [it[key] for it in items]
        fw_texts = []
        for it, p in zip(items, paths):
            fw_texts.append(fw_transcribe(fw_model, p)[0])
        dicta_texts, _, _ = dicta_transcribe(args, tmp, paths, tag=key)
        rows = corpus_rows(items, fw_texts, dicta_texts)
        summary["corpus"][inp] = {"rows": rows, "summary": corpus_summaries(rows)}
        a = summary["corpus"][inp]["summary"]["all"]
        print(f"{inp}: identical {a['identical']}/{a['n']}, WER dicta {a['wer_dicta']['wer']*100:.2f}% "
              f"fw {a['wer_fw']['wer']*100:.2f}%", file=sys.stderr)


if __name__ == "__main__":
    main()
