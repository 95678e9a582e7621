#!/usr/bin/env python3
"""Checks a `dicta serve --model base` with the official `openai` Python SDK, unmodified:
language detection on /v1/audio/transcriptions and translation on /v1/audio/translations.

    python3 crates/dicta-cli/tests/serve_multilingual_check.py --base-url http://127.0.0.1:PORT/v1 \
        --audio clip.wav --language sv --transcript "…" --translation "…"

--transcript / --translation are faster-whisper's answers on the same weights (greedy): the
server (started with --beam-size 1) must give exactly those. Exits non-zero on the first failed
check.
"""

import argparse

import openai
from openai import OpenAI
from checks import check

NAMES = {"sv": "swedish", "de": "german", "es": "spanish", "fr": "french", "ru": "russian",
         "pl": "polish"}



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", default="whisper-1")
    ap.add_argument("--audio", required=True)
    ap.add_argument("--language", required=True, help="the code faster-whisper detects")
    ap.add_argument("--transcript", required=True)
    ap.add_argument("--translation", required=True)
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused", max_retries=0)

    def audio():
        return open(args.audio, "rb")

    with audio() as f:
        r = client.audio.transcriptions.create(model=args.model, file=f, response_format="verbose_json")
    check(r.text == args.transcript, f"transcription: {r.text!r} == {args.transcript!r}")
    check(r.task == "transcribe", "transcription verbose_json: task")
    check(r.language == NAMES[args.language], f"transcription verbose_json: language {r.language!r}")
    p = getattr(r, "language_probability", None)
    check(isinstance(p, float) and 0.0 < p <= 1.0, f"transcription verbose_json: language_probability {p!r}")

    # OpenAI's translations route: file, model, prompt, response_format, temperature.
    with audio() as f:
        r = client.audio.translations.create(model=args.model, file=f)
    check(r.text == args.translation, f"translation json: {r.text!r} == {args.translation!r}")
    with audio() as f:
        r = client.audio.translations.create(model=args.model, file=f, response_format="text")
    check(isinstance(r, str) and r.strip() == args.translation.strip(), f"translation text: {r!r}")
    with audio() as f:
        r = client.audio.translations.create(model=args.model, file=f, response_format="verbose_json",
                                             temperature=0.0, prompt="")
    check(r.text == args.translation, "translation verbose_json: text")
    check(r.language == "english", f"translation verbose_json: language {r.language!r} (the output's)")
    check(getattr(r, "task", None) == "translate", "translation verbose_json: task")
    check(getattr(r, "source_language", None) == NAMES[args.language],
          f"translation verbose_json: source_language {getattr(r, 'source_language', None)!r}")
    check(r.segments and all(s.start <= s.end for s in r.segments), "translation verbose_json: segments")
    with audio() as f:
        r = client.audio.translations.create(model=args.model, file=f, response_format="srt")
    check(isinstance(r, str) and r.startswith("1\n") and " --> " in r, "translation srt")

    # A language forced: used as is; an unknown code: 400 listing the valid ones.
    with audio() as f:
        r = client.audio.transcriptions.create(model=args.model, file=f, language="de",
                                               response_format="verbose_json")
    check(r.language == "german" and getattr(r, "language_probability", None) is None,
          "transcription with language=de: german, no probability")
    try:
        with audio() as f:
            client.audio.transcriptions.create(model=args.model, file=f, language="xx")
        check(False, "language=xx raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "xx" in str(e) and "sv" in str(e),
              "language=xx: 400 naming the valid codes")
    print("all multilingual openai SDK checks passed")


if __name__ == "__main__":
    main()
