#!/usr/bin/env bash
# Runs Dicta's full test suite: builds once in release, fetches the default model (tiny.en) and
# Moonshine tiny, Silero VAD and ECAPA into $DICTA_HOME if they are not there yet, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

export DICTA_HOME="${DICTA_HOME:-$HOME/.cache/dicta}"
cargo build --release --workspace --all-targets
model_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch tiny.en --quiet)"
moonshine_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch moonshine-tiny --quiet)"
vad_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch silero-vad --quiet)"
speaker_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch ecapa-voxceleb --quiet)"
# Model tests fail (rather than skip) when these variables name a folder.
export DICTA_TEST_MODEL_DIR="$model_dir"
export DICTA_TEST_MOONSHINE_DIR="$moonshine_dir"
export DICTA_TEST_VAD_DIR="$vad_dir"
export DICTA_TEST_SPEAKER_DIR="$speaker_dir"
cargo test --workspace --release
