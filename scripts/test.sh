#!/usr/bin/env bash
# Runs Dicta's full test suite: builds once in release, fetches the default model (tiny.en), multilingual
# Whisper base, Moonshine tiny and base, Silero VAD and ECAPA into $DICTA_HOME if they are not there yet, runs every test of the workspace,
# then installs the Python package (python/) into a fresh venv and runs its tests, the Ray example's among them.
set -euo pipefail
cd "$(dirname "$0")/.."

export DICTA_HOME="${DICTA_HOME:-$HOME/.cache/dicta}"
cargo build --release --workspace --all-targets
model_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch tiny.en --quiet)"
base_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch base --quiet)"
moonshine_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch moonshine-tiny --quiet)"
moonshine_base_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch moonshine-base --quiet)"
vad_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch silero-vad --quiet)"
speaker_dir="$("${CARGO_TARGET_DIR:-target}/release/dicta" models fetch ecapa-voxceleb --quiet)"
# Model tests fail (rather than skip) when these variables name a folder.
export DICTA_TEST_MODEL_DIR="$model_dir"
export DICTA_TEST_BASE_DIR="$base_dir"
export DICTA_TEST_MOONSHINE_DIR="$moonshine_dir"
export DICTA_TEST_MOONSHINE_BASE_DIR="$moonshine_base_dir"
export DICTA_TEST_VAD_DIR="$vad_dir"
export DICTA_TEST_SPEAKER_DIR="$speaker_dir"
cargo test --workspace --release
# Every fuzz harness (crates/dicta-fuzz) briefly; DICTA_FUZZ_SECONDS=600 for a real run. The seed is fixed here
# (DICTA_FUZZ_SEED=1 unless set) so that this smoke pass is the same on every run and a failure in CI can be
# replayed; the long runs use fresh seeds and are where new inputs are found.
DICTA_FUZZ_SEED="${DICTA_FUZZ_SEED:-1}" DICTA_FUZZ_SECONDS="${DICTA_FUZZ_SECONDS:-10}" \
    cargo test --workspace --release --tests -- --ignored fuzz_

# What CPUs without AVX-512 run (AMD Zen 2-3, older Intel: int8 on the AVX2 tile, every f32 kernel at
# AVX2): int8 Whisper against float32 on real speech, transcripts included (fails past one WER point).
# `--workspace` keeps the workspace's features: `-p dicta-models` alone rebuilt dependencies (2 min).
DICTA_NO_AVX512=1 cargo test --workspace --release --test whisper_int8 -- --include-ignored

# The wheel below reuses this build only while python/Cargo.toml's feature pins hold.
./scripts/feature_pins.sh

# The Python package as a newcomer installs it: `pip install ./python` into a new venv (maturin
# reuses the release build above), then its tests against the binary, Ray Data included.
target_dir="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)"
venv="$target_dir/python-venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check ./python numpy pytest websockets "ray[data]"
DICTA_BIN="$target_dir/release/dicta" DICTA_TEST_RAY=1 "$venv/bin/python" -m pytest -q python/tests
