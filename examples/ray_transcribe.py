#!/usr/bin/env python3
"""Batch transcription across a Ray cluster with Ray Data: one ``dicta.Engine`` per actor.

    python examples/ray_transcribe.py MANIFEST OUT.jsonl [--actors N] [--address ADDR] [--model tiny.en]

MANIFEST is the CLI's manifest (``dicta transcribe --manifest``): a JSON array of
``{"id", "audio"}`` or JSON lines, audio paths relative to the manifest. OUT.jsonl gets one
result per line in the CLI's JSON shape (``{"id","audio","text","language","duration",
"segments","error"}``), in manifest order; an input that fails carries its error and the job
goes on.

Each actor loads the model once and gets ``--cpus-per-actor`` CPUs (default: the cluster's CPUs
divided by the actors), which it uses as the engine's threads. On a cluster (``ray start --head``
on one machine, ``ray start --address HEAD:6379`` on the others), run this on any node with
``--address auto``; every node needs ``pip install ./python`` and the audio at the same paths
(shared storage). A model given by name is fetched on each node on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List


def read_manifest(path: str) -> List[Dict[str, str]]:
    """Entries of a CLI manifest with absolute audio paths (``path``) beside the given ``audio``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        entries = json.loads(text)
    else:
        entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    base = os.path.dirname(os.path.abspath(path))
    out = []
    for n, e in enumerate(entries):
        if not isinstance(e, dict) or "audio" not in e:
            raise SystemExit(f"{path}: entry {n + 1} is not an object with \"audio\"")
        audio = str(e["audio"])
        out.append({"id": str(e.get("id", audio)), "audio": audio, "path": os.path.join(base, audio)})
    return out


class Transcriber:
    """A Ray Data actor holding one loaded engine; transcribes a batch of manifest rows."""

    def __init__(self, model: str, threads: int, batch_size: int, options: Dict[str, Any]) -> None:
        import dicta

        self.engine = dicta.Engine(model, threads=threads, batch_size=batch_size, progress=False)
        self.options = options

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, List[Any]]:
        ids, audios, paths = list(batch["id"]), list(batch["audio"]), list(batch["path"])
        inputs = [{"id": str(i), "audio": str(p)} for i, p in zip(ids, paths)]
        out = self.engine.transcribe(inputs, **self.options)
        lines = []
        for r, audio in zip(out["results"], audios):
            r["audio"] = str(audio)  # as the manifest gave it, like the CLI
            lines.append(json.dumps(r, ensure_ascii=False))
        return {"json": lines}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("out")
    ap.add_argument("--actors", type=int, default=1, help="actors, each holding one engine (default 1)")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    ap.add_argument("--model", default="tiny.en", help="model folder or name (default tiny.en)")
    ap.add_argument("--cpus-per-actor", type=int, default=None, help="CPUs (engine threads) per actor")
    ap.add_argument("--batch-size", type=int, default=8, help="windows per model call")
    ap.add_argument("--rows-per-batch", type=int, default=8, help="manifest rows per actor call")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--language", default=None)
    ap.add_argument("--word-timestamps", action="store_true")
    args = ap.parse_args(argv)
    if args.actors < 1:
        ap.error("--actors must be >= 1")

    import ray

    import dicta

    entries = read_manifest(args.manifest)
    if not entries:
        raise SystemExit(f"{args.manifest}: no entries")
    model = args.model
    if not os.path.isdir(model):
        # Fetch on the driver first: a wrong name fails here, before any actor starts.
        model = dicta.fetch_model(model)

    ray.init(address=args.address, include_dashboard=False, logging_level="WARNING")
    cpus = args.cpus_per_actor or max(1, int(ray.cluster_resources().get("CPU", 1)) // args.actors)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # results in manifest order
    ctx.enable_progress_bars = False

    options: Dict[str, Any] = {"beam_size": args.beam_size, "word_timestamps": args.word_timestamps}
    if args.language:
        options["language"] = args.language
    start = time.monotonic()
    ds = ray.data.from_items(entries).map_batches(
        Transcriber,
        fn_constructor_kwargs={
            "model": model,
            "threads": cpus,
            "batch_size": args.batch_size,
            "options": options,
        },
        concurrency=args.actors,
        num_cpus=cpus,
        batch_size=args.rows_per_batch,
    )
    failed = 0
    n = 0
    audio_s = 0.0
    with open(args.out, "w", encoding="utf-8") as out:
        for row in ds.iter_rows():
            line = row["json"]
            r = json.loads(line)
            failed += r["error"] is not None
            audio_s += r["duration"] or 0.0
            out.write(line + "\n")
            n += 1
    wall = time.monotonic() - start
    print(
        json.dumps(
            {
                "inputs": n,
                "failed": failed,
                "actors": args.actors,
                "cpus_per_actor": cpus,
                "audio_s": round(audio_s, 2),
                "wall_s": round(wall, 2),
                "rtfx": round(audio_s / wall, 2) if wall > 0 else None,
            }
        ),
        file=sys.stderr,
    )
    ray.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
