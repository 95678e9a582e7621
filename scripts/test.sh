#!/usr/bin/env bash
# Runs Dicta's full test suite: builds once in release, fetches the default model (tiny.en) into
# $DICTA_HOME if it is not there yet, then runs every test of the workspace against it.
set -euo pipefail
cd "$(dirname "$0")/.."

export DICTA_HOME="${DICTA_HOME:-$HOME/.cache/dicta}"
cargo build --release --workspace --all-targets
model_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch tiny.en --quiet)"
# Model tests fail (rather than skip) when this variable names a folder.
export DICTA_TEST_MODEL_DIR="$model_dir"
cargo test --workspace --release
