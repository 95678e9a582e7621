//! A CPU without AVX-512, for real: a whole `dicta transcribe` process under QEMU's user-mode
//! emulator with its EPYC-Milan model (AMD Zen 3: AVX2, FMA and F16C; no AVX-512, no VNNI).
//! There `default` must resolve to int8 on the AVX2 tile, no code may execute an AVX-512
//! instruction (QEMU would stop the process: illegal instruction), and the transcript must be the
//! native run's with `DICTA_NO_AVX512=1`, which picks the same kernel levels: segments, times
//! included.
//!
//! The model is Moonshine tiny on a two-second clip, because emulation is about a thousand times
//! slower than the host (QEMU computes every lane of every float FMA in a helper call): Whisper's
//! 30 s encoder window alone took 9.5 minutes. Every kernel Whisper uses is run on the emulated
//! CPU too, at every level it has: `scripts/test.sh` runs dicta-models' library test binary under
//! QEMU; the transcript of int8 Whisper at those levels is checked natively by `whisper_int8` with
//! `DICTA_NO_AVX512=1`.
//!
//! Needs `qemu-x86_64` (Debian `qemu-user`; `.ci/run` installs it, and `DICTA_REQUIRE_CLIENTS`
//! makes its absence a failure) and Moonshine tiny. About a minute under emulation.
#![cfg(target_arch = "x86_64")]

mod common;

use common::{client_available, fetched_model, DATA};
use std::process::Command;

#[test]
fn an_avx2_cpu_runs_int8_and_matches_the_no_avx512_switch() {
    let Some(model) = fetched_model(
        "moonshine-tiny",
        "DICTA_TEST_MOONSHINE_DIR",
        "encoder_model.ort",
    ) else {
        return;
    };
    let qemu = Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !client_available("qemu-x86_64 (Debian qemu-user)", qemu) {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_dicta");
    let wav = format!("{DATA}/coqui_tts/LJ001-0008.wav");
    let model = model.to_string_lossy().into_owned();
    let args = [
        "transcribe",
        "--quiet",
        "--format",
        "json",
        "--model",
        &model,
        &wav,
    ];
    let run = |cmd: &mut Command| -> serde_json::Value {
        let out = cmd.args(args).output().expect("run dicta");
        assert!(
            out.status.success(),
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let emulated = run(Command::new("qemu-x86_64").args(["-cpu", "EPYC-Milan", bin]));
    let native = run(Command::new(bin).env("DICTA_NO_AVX512", "1"));
    assert_eq!(emulated["stats"]["compute_type"], "int8");
    let segments = |v: &serde_json::Value| v["results"][0]["segments"].clone();
    assert!(
        emulated["results"][0]["text"]
            .as_str()
            .is_some_and(|t| t.to_lowercase().contains("never been surpassed")),
        "{emulated}"
    );
    assert_eq!(segments(&emulated), segments(&native));
}
