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

# The model kernels on a CPU without AVX-512, for real: QEMU's EPYC-Milan model (Zen 3: AVX2, FMA, F16C; QEMU
# implements no AVX-512, so one such instruction stops the test) runs dicta-models' library tests, every kernel
# at each level that CPU has and the compute-type rules against its CPUID (the only crate with AVX-512 code);
# `cpu_without_avx512.rs` runs a whole transcription there.
if [ "$(uname -m)" = x86_64 ]; then
    if command -v qemu-x86_64 >/dev/null 2>&1; then
        # The features turned off are ones QEMU cannot emulate: it drops each with a warning anyway.
        cpu="EPYC-Milan,-pcid,-invpcid,-rdseed,-sha-ni,-rdpid,-fsrm,-fxsr-opt,-misalignsse,-3dnowprefetch,-osvw"
        cpu="$cpu,-topoext,-perfctr-core,-clzero,-xsaveerptr,-wbnoinvd,-ibpb,-ibrs,-amd-stibp,-amd-ssbd,-nrip-save"
        cpu="$cpu,-xsavec,-xsaves"
        kernels_bin="$(cargo test --workspace --release --lib --no-run --message-format=json 2>/dev/null |
            python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("executable") and m["target"]["name"] == "dicta_models":
        print(m["executable"])')"
        [ -n "$kernels_bin" ] || { echo "no dicta-models test binary" >&2; exit 1; }
        echo "dicta-models' library tests under qemu-x86_64 -cpu EPYC-Milan"
        (cd crates/dicta-models && qemu-x86_64 -cpu "$cpu" "$kernels_bin" -q)
    elif [ -n "${DICTA_REQUIRE_CLIENTS:-}" ]; then
        echo "qemu-x86_64 (Debian qemu-user) is missing: the tests on a CPU without AVX-512 cannot run" >&2
        exit 1
    fi
fi

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
