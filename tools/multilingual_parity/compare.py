#!/usr/bin/env python3
"""Multilingual Whisper parity of Dicta with faster-whisper: language detection, transcripts and
translations on the same CTranslate2 weights (Whisper base, `dicta models fetch base`).

Run from the repository root (after `cargo build --release -p dicta-cli`):

    python3 tools/multilingual_parity/compare.py --model "$(target/release/dicta models fetch base)"
        [--dicta target/release/dicta] [--threads 2] [--make-fixture]

What it does (deterministic; needs faster-whisper, jiwer, whisper-normalizer, espeak-ng, ffmpeg):
  1. Corpus: the development set's non-English items (../shared/data/manifest.jsonl: sv, es, fr,
     and en+de, the English-then-German faster_whisper/multilingual) and espeak-ng renderings of
     ESPEAK sentences in 12 languages (regenerated into a temp dir each run). Every item is
     converted once with ffmpeg to a 16 kHz mono s16 WAV, and both engines read that same file.
  2. Both engines, fp32, beam_size=1, temperature 0 only, condition_on_previous_text=False, no
     VAD, timestamps on: (a) language=None (detected from the first window) and task
     "transcribe"; (b) language=None and task "translate".
  3. Reported: detected language agreement, identical transcript rate, identical translation
     rate, language_probability difference, and WER of both engines against the references
     (espeak-ng sentences, and dev-set items with a text) under Whisper's basic normalizer.
With --make-fixture it also writes the CI test's fixture (crates/dicta-engine/tests/fixtures/
whisper_base/): a few short clips (16 kHz WAV) and faster-whisper's language, probability,
transcript and translation for each (reference.json).

Outputs: tools/multilingual_parity/results.md and results.json (next to this script).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import jiwer
from whisper_normalizer.basic import BasicTextNormalizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
DATA = os.path.normpath(os.path.join(ROOT, "../shared/data"))
FIXTURE = os.path.join(ROOT, "crates/dicta-engine/tests/fixtures/whisper_base")
NORM = BasicTextNormalizer()

# espeak-ng voice -> (Whisper code, sentences with known text).
ESPEAK = {
    "de": ("de", ["Guten Morgen, wie geht es Ihnen heute?",
                  "Der Zug nach Berlin fährt um neun Uhr ab.",
                  "Ich möchte gerne einen Kaffee mit Milch bestellen."]),
    "fr-fr": ("fr", ["Bonjour, je voudrais réserver une table pour deux personnes.",
                     "Le musée est fermé le lundi.",
                     "Il fait très beau aujourd'hui à Paris."]),
    "es": ("es", ["Buenos días, ¿dónde está la estación de tren?",
                  "Mi hermana vive en Madrid desde hace tres años.",
                  "Me gustaría comprar dos billetes para mañana."]),
    "it": ("it", ["Buongiorno, vorrei un caffè per favore.",
                  "La biblioteca apre alle otto di mattina.",
                  "Domani andiamo al mare con gli amici."]),
    "pt": ("pt", ["Bom dia, onde fica a farmácia mais próxima?",
                  "O meu irmão trabalha num hospital em Lisboa.",
                  "Gostaria de uma mesa perto da janela."]),
    "nl": ("nl", ["Goedemorgen, hoe gaat het met u?",
                  "De trein naar Amsterdam vertrekt om tien uur.",
                  "Ik wil graag een kopje thee met suiker."]),
    "sv": ("sv", ["God morgon, hur mår du idag?",
                  "Tåget till Stockholm går klockan nio.",
                  "Jag skulle vilja ha en kopp kaffe."]),
    "pl": ("pl", ["Dzień dobry, gdzie jest dworzec kolejowy?",
                  "Moja siostra mieszka w Krakowie.",
                  "Poproszę jedną kawę z mlekiem."]),
    "ru": ("ru", ["Доброе утро, как у вас дела?",
                  "Поезд в Москву отправляется в девять часов.",
                  "Я хотел бы заказать чашку чая."]),
    "fi": ("fi", ["Hyvää huomenta, mitä kuuluu?",
                  "Juna Helsinkiin lähtee kello yhdeksän.",
                  "Haluaisin kupin kahvia, kiitos."]),
    "tr": ("tr", ["Günaydın, nasılsınız?",
                  "İstanbul treni saat dokuzda kalkıyor.",
                  "Bir fincan çay istiyorum, lütfen."]),
    "cs": ("cs", ["Dobré ráno, jak se máte?",
                  "Vlak do Prahy odjíždí v devět hodin.",
                  "Chtěl bych šálek kávy, prosím."]),
}

# The CI test's clips (short, several languages): espeak ids and dev-set ids.
FIXTURE_ITEMS = ["espeak/de/0", "espeak/fr-fr/2", "espeak/ru/0", "espeak/pl/2",
                 "mfa/se10x016-08071999-1334_u0016002", "mfa/13697_11991_000000"]


def to_wav16(src, dst):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", src, "-ac", "1",
                    "-ar", "16000", "-c:a", "pcm_s16le", dst], check=True)


def dev_items(tmp):
    items = []
    with open(os.path.join(DATA, "manifest.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["language"] == "en" or not r["language"]:
                continue
            wav = os.path.join(tmp, r["id"].replace("/", "__") + ".16k.wav")
            if r.get("audio_16k_wav"):
                shutil.copy(os.path.join(DATA, r["audio_16k_wav"]), wav)
            else:
                to_wav16(os.path.join(DATA, r["audio"]), wav)
            items.append({"id": r["id"], "kind": "dev", "language": r["language"],
                          "wav": wav, "reference": r.get("text"), "duration": r["duration_s"]})
    return items


def espeak_items(tmp):
    items = []
    for voice, (code, sentences) in ESPEAK.items():
        for i, text in enumerate(sentences):
            raw = os.path.join(tmp, f"espeak_{voice}_{i}.wav")
            subprocess.run(["espeak-ng", "-v", voice, "-w", raw, text], check=True)
            wav = os.path.join(tmp, f"espeak_{voice}_{i}.16k.wav")
            to_wav16(raw, wav)
            items.append({"id": f"espeak/{voice}/{i}", "kind": "espeak", "language": code,
                          "wav": wav, "reference": text,
                          "duration": os.path.getsize(wav) / 32000.0})
    return items


def fw_run(model, path, task):
    segs, info = model.transcribe(path, language=None, task=task, beam_size=1, temperature=0.0,
                                  condition_on_previous_text=False, vad_filter=False,
                                  word_timestamps=False)
    segs = list(segs)
    return {"language": info.language, "language_probability": info.language_probability,
            "text": "".join(s.text for s in segs).strip(),
            "segments": [[s.start, s.end, s.text] for s in segs]}


def dicta_run(args, tmp, items, task):
    manifest = os.path.join(tmp, f"{task}.manifest.json")
    out = os.path.join(tmp, f"{task}.out.json")
    with open(manifest, "w") as f:
        json.dump([{"id": str(i), "audio": it["wav"]} for i, it in enumerate(items)], f)
    cmd = [args.dicta, "transcribe", "--manifest", manifest, "--model", args.model,
           "--beam-size", "1", "--temperature", "0", "--no-condition-on-previous-text",
           "--task", task, "--format", "json", "--batch-size", "8", "--threads", str(args.threads),
           "--quiet", "--output", out]
    t0 = time.time()
    subprocess.run(cmd, check=False)
    wall = time.time() - t0
    with open(out) as f:
        res = json.load(f)
    by_id = {r["id"]: r for r in res["results"]}
    runs = []
    for i, it in enumerate(items):
        r = by_id[str(i)]
        if r.get("error"):
            print(f"dicta error on {it['id']}: {r['error']}", file=sys.stderr)
            runs.append({"language": None, "language_probability": None, "text": None,
                         "segments": []})
        else:
            runs.append({"language": r["language"],
                         "language_probability": r.get("language_probability"),
                         "text": r["text"].strip(),
                         "segments": [[s["start"], s["end"], s["text"]] for s in r["segments"]]})
    return runs, wall


def wer(refs, hyps):
    pairs = [(NORM(r), NORM(h or "")) for r, h in zip(refs, hyps) if r and NORM(r).strip()]
    if not pairs:
        return None
    return jiwer.wer([r for r, _ in pairs], [h for _, h in pairs])


def summarize(rows, subset):
    n = len(rows)
    lang = sum(r["transcribe"]["fw"]["language"] == r["transcribe"]["dicta"]["language"]
               for r in rows)
    same_t = sum(r["transcribe"]["identical"] for r in rows)
    same_x = sum(r["translate"]["identical"] for r in rows)
    dp = [abs(r["transcribe"]["fw"]["language_probability"]
              - (r["transcribe"]["dicta"]["language_probability"] or 0)) for r in rows]
    refs = [r["reference"] for r in rows]
    return {"subset": subset, "n": n, "language_same": lang, "transcript_identical": same_t,
            "translation_identical": same_x, "max_language_probability_diff": max(dp) if dp else 0,
            "wer_dicta": wer(refs, [r["transcribe"]["dicta"]["text"] for r in rows]),
            "wer_fw": wer(refs, [r["transcribe"]["fw"]["text"] for r in rows])}


def pct(a, n):
    return f"{a}/{n} ({100.0 * a / n:.1f}%)" if n else "–"


def write_report(res):
    lines = [
        "# Multilingual Whisper parity: Dicta vs faster-whisper",
        "",
        f"Generated by `python3 tools/multilingual_parity/compare.py --model <base>` — model "
        f"`base` (`dicta models fetch base`: CTranslate2 fp16 weights, run in float32 by both), "
        f"faster-whisper {res['fw_version']}, `{res['dicta_version']}`. Settings: beam_size=1, "
        "temperature 0 (no fallback), condition_on_previous_text=False, no VAD, language=None "
        "(detected from the first 30 s window), task transcribe and translate. Both engines read "
        "the same 16 kHz mono s16 WAV of every item. WER: Whisper's basic normalizer "
        "(whisper-normalizer 0.1.15), jiwer, corpus level, items with a reference only.",
        "",
        "| subset | items | same language | identical transcript | identical translation | "
        "max Δ language_probability | WER dicta | WER faster-whisper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        w = lambda x: "–" if x is None else f"{100 * x:.2f}%"
        lines.append(f"| {s['subset']} | {s['n']} | {pct(s['language_same'], s['n'])} | "
                     f"{pct(s['transcript_identical'], s['n'])} | "
                     f"{pct(s['translation_identical'], s['n'])} | "
                     f"{s['max_language_probability_diff']:.1e} | {w(s['wer_dicta'])} | "
                     f"{w(s['wer_fw'])} |")
    lines += ["", f"Languages rendered by espeak-ng: {', '.join(sorted({c for c, _ in ESPEAK.values()}))} "
              f"({sum(len(s) for _, s in ESPEAK.values())} sentences).", "",
              f"Wall time on this machine ({res['threads']} threads): Dicta transcribe "
              f"{res['dicta_wall']['transcribe']:.1f} s, translate {res['dicta_wall']['translate']:.1f} s "
              f"(including model load); faster-whisper both tasks {res['fw_wall']:.1f} s.", "",
              "## Items", "",
              "| item | expected | language fw / dicta (p fw) | transcript same | translation same | "
              "faster-whisper transcript | faster-whisper translation |",
              "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        t, x = r["transcribe"], r["translate"]
        cut = lambda s: (s or "").replace("|", "\\|")[:120]
        lines.append(f"| {r['id']} | {r['language']} | {t['fw']['language']} / "
                     f"{t['dicta']['language']} ({t['fw']['language_probability']:.3f}) | "
                     f"{'yes' if t['identical'] else '**no**'} | {'yes' if x['identical'] else '**no**'} | "
                     f"{cut(t['fw']['text'])} | {cut(x['fw']['text'])} |")
    diffs = [r for r in res["rows"] if not (r["transcribe"]["identical"] and r["translate"]["identical"])]
    if diffs:
        lines += ["", "## Differences", ""]
        for r in diffs:
            for task in ("transcribe", "translate"):
                if not r[task]["identical"]:
                    lines += [f"- {r['id']} ({task})", f"  - faster-whisper: {r[task]['fw']['text']!r}",
                              f"  - dicta: {r[task]['dicta']['text']!r}"]
    with open(os.path.join(HERE, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def make_fixture(rows, items):
    os.makedirs(FIXTURE, exist_ok=True)
    by_id = {it["id"]: it for it in items}
    out = []
    for r in rows:
        if r["id"] not in FIXTURE_ITEMS:
            continue
        name = r["id"].replace("/", "_") + ".wav"
        shutil.copy(by_id[r["id"]]["wav"], os.path.join(FIXTURE, name))
        t, x = r["transcribe"]["fw"], r["translate"]["fw"]
        out.append({"id": r["id"], "wav": name, "language": t["language"],
                    "language_probability": t["language_probability"],
                    "transcript": t["text"], "translation": x["text"]})
    with open(os.path.join(FIXTURE, "reference.json"), "w") as f:
        json.dump({"note": "faster-whisper 1.2.1 on `dicta models fetch base` (float32, beam_size=1, "
                           "temperature 0, condition_on_previous_text=False, language=None); made by "
                           "tools/multilingual_parity/compare.py --make-fixture",
                   "items": out}, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the base folder (dicta models fetch base)")
    ap.add_argument("--dicta", default=os.path.join(ROOT, "target/release/dicta"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--make-fixture", action="store_true")
    args = ap.parse_args()

    import faster_whisper
    from faster_whisper import WhisperModel

    tmp = tempfile.mkdtemp(prefix="dicta-multilingual-")
    items = dev_items(tmp) + espeak_items(tmp)
    print(f"{len(items)} items", file=sys.stderr)
    dicta = {}
    wall = {}
    for task in ("transcribe", "translate"):
        dicta[task], wall[task] = dicta_run(args, tmp, items, task)
    model = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=args.threads)
    t0 = time.time()
    fw = {task: [fw_run(model, it["wav"], task) for it in items] for task in ("transcribe", "translate")}
    fw_wall = time.time() - t0
    rows = []
    for i, it in enumerate(items):
        row = {"id": it["id"], "kind": it["kind"], "language": it["language"],
               "reference": it["reference"]}
        for task in ("transcribe", "translate"):
            f, d = fw[task][i], dicta[task][i]
            row[task] = {"fw": f, "dicta": d,
                         "identical": d["text"] is not None and d["text"] == f["text"]}
        rows.append(row)
    summary = [summarize(rows, "all"),
               summarize([r for r in rows if r["kind"] == "dev"], "dev set (sv, es, fr, en+de)"),
               summarize([r for r in rows if r["kind"] == "espeak"], "espeak-ng (12 languages)")]
    version = subprocess.run([args.dicta, "--version"], capture_output=True, text=True).stdout.strip()
    res = {"fw_version": faster_whisper.__version__, "dicta_version": version, "threads": args.threads,
           "dicta_wall": wall, "fw_wall": fw_wall, "summary": summary, "rows": rows}
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    write_report(res)
    if args.make_fixture:
        make_fixture(rows, items)
    for s in summary:
        print(json.dumps(s), file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
