//! An arm of a benchmark: a child process (Dicta's worker or a Python peer) that loads one model
//! and answers run requests over the line protocol. A dead child is reported as an
//! out-of-memory or a crash, and restarted for the next request.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use super::protocol::{Ready, RunReply, RunRequest};

/// How to start an arm.
#[derive(Debug, Clone)]
pub struct ArmSpec {
    /// Short label used in reports and log names (`dicta`, `faster-whisper-int8`).
    pub label: String,
    /// Program and arguments.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// File the child's stderr is appended to.
    pub log: PathBuf,
}

impl ArmSpec {
    /// Dicta's in-process engine, in a `dicta bench worker` child of this very binary.
    /// The arm is labelled `dicta` for float32 (the reference) and `dicta-<type>` otherwise.
    pub fn dicta(
        model: &Path,
        threads: Option<usize>,
        compute_type: &str,
        log: PathBuf,
    ) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find the dicta executable")?;
        let mut args = vec![
            "bench".into(),
            "worker".into(),
            "--model".into(),
            model.display().to_string(),
        ];
        if let Some(n) = threads {
            args.extend(["--threads".into(), n.to_string()]);
        }
        args.extend(["--compute-type".into(), compute_type.to_string()]);
        let label = if compute_type == "float32" {
            "dicta".to_string()
        } else {
            format!("dicta-{compute_type}")
        };
        Ok(Self {
            label,
            program: exe,
            args,
            env: Vec::new(),
            log,
        })
    }

    /// The faster-whisper peer script with one compute type.
    pub fn faster_whisper(
        python: &str,
        peers_dir: &Path,
        model: &Path,
        threads: Option<usize>,
        compute_type: &str,
        log: PathBuf,
    ) -> Result<Self> {
        let script = peers_dir.join("faster_whisper_peer.py");
        if !script.is_file() {
            bail!(
                "peer script {} not found (run from the repository root or pass --peers-dir)",
                script.display()
            );
        }
        Ok(Self {
            label: format!("faster-whisper-{compute_type}"),
            program: PathBuf::from(python),
            args: vec![
                script.display().to_string(),
                "--model".into(),
                model.display().to_string(),
                "--threads".into(),
                threads.unwrap_or(0).to_string(),
                "--compute-type".into(),
                compute_type.into(),
            ],
            // CTranslate2 reads OMP_NUM_THREADS only as a fallback; cpu_threads is passed.
            env: vec![("PYTHONUNBUFFERED".into(), "1".into())],
            log,
        })
    }
}

/// A running arm.
pub struct Arm {
    /// How it was started (used to restart it).
    pub spec: ArmSpec,
    /// Its ready line.
    pub ready: Ready,
    proc: Option<Running>,
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Arm {
    /// Starts the arm and waits until its model is loaded.
    pub fn start(spec: ArmSpec) -> Result<Self> {
        let (proc, ready) = spawn(&spec)?;
        Ok(Self {
            spec,
            ready,
            proc: Some(proc),
        })
    }

    /// Runs one request; a dead process yields a failed reply (`oom` or `crash`) and is restarted
    /// on the next call.
    pub fn run(&mut self, req: &RunRequest) -> RunReply {
        if self.proc.is_none() {
            match spawn(&self.spec) {
                Ok((p, ready)) => {
                    self.proc = Some(p);
                    self.ready = ready;
                }
                Err(e) => return RunReply::failed("crash", format!("cannot restart: {e:#}")),
            }
        }
        let p = self.proc.as_mut().expect("started above");
        let line = match serde_json::to_string(req) {
            Ok(l) => l,
            Err(e) => return RunReply::failed("error", e.to_string()),
        };
        let sent = writeln!(p.stdin, "{line}").and_then(|_| p.stdin.flush());
        let mut answer = String::new();
        let got = sent.is_ok() && matches!(p.stdout.read_line(&mut answer), Ok(n) if n > 0);
        if got {
            return serde_json::from_str(&answer).unwrap_or_else(|e| {
                RunReply::failed("error", format!("unreadable reply ({e}): {answer}"))
            });
        }
        let mut p = self.proc.take().expect("running");
        drop(p.stdin);
        let status = p.child.wait();
        let tail = log_tail(&self.spec.log);
        let (kind, what) = match status {
            Ok(s) => death_kind(&s, &tail),
            Err(e) => ("crash", format!("cannot wait for the process: {e}")),
        };
        RunReply::failed(
            kind,
            format!("{} {what}; stderr tail: {tail}", self.spec.label),
        )
    }

    /// Closes stdin and waits for the arm to exit.
    pub fn stop(mut self) {
        if let Some(p) = self.proc.take() {
            drop(p.stdin);
            let mut child = p.child;
            let _ = child.wait();
        }
    }
}

fn spawn(spec: &ArmSpec) -> Result<(Running, Ready)> {
    if let Some(dir) = spec.log.parent() {
        fs::create_dir_all(dir)?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("cannot open {}", spec.log.display()))?;
    let mut child = Command::new(&spec.program)
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("cannot start {} ({})", spec.label, spec.program.display()))?;
    let stdin = child.stdin.take().expect("piped");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    if line.trim().is_empty() {
        let _ = child.wait();
        return Err(anyhow!(
            "{} exited before loading its model: {}",
            spec.label,
            log_tail(&spec.log)
        ));
    }
    let ready: Ready = serde_json::from_str(&line)
        .with_context(|| format!("{}: unexpected first line {line:?}", spec.label))?;
    Ok((
        Running {
            child,
            stdin,
            stdout,
        },
        ready,
    ))
}

/// Classifies a dead process: killed by SIGKILL (what the kernel's OOM killer sends) or aborted
/// after a refused allocation is an out-of-memory.
fn death_kind(status: &std::process::ExitStatus, stderr_tail: &str) -> (&'static str, String) {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(9) {
            return (
                "oom",
                "was killed by SIGKILL (likely the kernel's out-of-memory killer)".into(),
            );
        }
    }
    if stderr_tail.contains("memory allocation of") || stderr_tail.contains("MemoryError") {
        return ("oom", format!("ran out of memory ({status})"));
    }
    ("crash", format!("died ({status})"))
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(600);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].trim().replace('\n', " | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn sigkill_and_refused_allocation_are_oom() {
        use std::os::unix::process::ExitStatusExt;
        let killed = std::process::ExitStatus::from_raw(9);
        assert_eq!(death_kind(&killed, "").0, "oom");
        let aborted = std::process::ExitStatus::from_raw(6);
        assert_eq!(
            death_kind(&aborted, "memory allocation of 123 bytes failed").0,
            "oom"
        );
        assert_eq!(death_kind(&aborted, "panicked at foo").0, "crash");
    }

    #[test]
    fn a_dead_peer_is_reported_not_fatal() {
        // A real child that prints a valid ready line and then dies on the first request.
        let dir = std::env::temp_dir().join(format!("dicta-arm-test-{}", std::process::id()));
        let spec = ArmSpec {
            label: "sh".into(),
            program: "sh".into(),
            args: vec![
                "-c".into(),
                r#"echo '{"arm":"sh","load_seconds":0}'; read x; kill -9 $$"#.into(),
            ],
            env: Vec::new(),
            log: dir.join("sh.log"),
        };
        let mut arm = Arm::start(spec).unwrap();
        assert_eq!(arm.ready.arm, "sh");
        let req = RunRequest {
            manifest: "/nonexistent".into(),
            mode: super::super::protocol::Mode::Batch,
            batch_size: 1,
            beam_size: 1,
            temperatures: vec![0.0],
            condition_on_previous_text: false,
            without_timestamps: false,
            long_form: "sequential".into(),
            overlap_seconds: 5.0,
        };
        let r = arm.run(&req);
        assert!(!r.ok);
        assert_eq!(r.error_kind.as_deref(), Some("oom"), "{:?}", r.error);
        // Restarted on the next request, which dies the same way.
        assert_eq!(arm.run(&req).error_kind.as_deref(), Some("oom"));
        arm.stop();
        fs::remove_dir_all(&dir).ok();
    }
}
