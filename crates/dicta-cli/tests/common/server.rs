//! A real `dicta serve` process on port 0, and curl, for the binary's server tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub base: String,
    /// `host:port` of the gRPC listener, when started with `--grpc-port`.
    pub grpc: Option<String>,
}

impl Server {
    pub fn start(model: &Path, extra: &[&str]) -> Server {
        Self::spawn(model, extra, Stdio::inherit())
    }

    /// Starts with `--log info` and stderr piped: every log line is echoed and also sent on
    /// the returned channel.
    pub fn start_logged(model: &Path, extra: &[&str]) -> (Server, mpsc::Receiver<String>) {
        let extra: Vec<&str> = extra.iter().copied().chain(["--log", "info"]).collect();
        let mut server = Self::spawn(model, &extra, Stdio::piped());
        let stderr = server.child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                eprintln!("{line}");
                let _ = tx.send(line);
            }
        });
        (server, rx)
    }

    pub fn spawn(model: &Path, extra: &[&str], stderr: Stdio) -> Server {
        Self::spawn_in(
            Command::new(env!("CARGO_BIN_EXE_dicta")),
            model,
            extra,
            stderr,
        )
    }

    /// Starts under an address-space limit (`prlimit --as`), as in a memory-capped container.
    pub fn start_limited(model: &Path, extra: &[&str], address_space_bytes: u64) -> Server {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--as={address_space_bytes}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_dicta"));
        Self::spawn_in(cmd, model, extra, Stdio::inherit())
    }

    /// Runs `cmd serve --port 0 …` (`cmd` is the binary, or a wrapper that execs it).
    fn spawn_in(mut cmd: Command, model: &Path, extra: &[&str], stderr: Stdio) -> Server {
        let mut child = cmd
            .args(["serve", "--port", "0", "--beam-size", "1", "--model"])
            .arg(model)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start dicta serve");
        let stdout = child.stdout.take().unwrap();
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        // The gRPC address comes on the next line (read before the pipe is dropped).
        let grpc = extra.contains(&"--grpc-port").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix("grpc listening on ")
                .unwrap_or_else(|| panic!("unexpected second line {line:?}"))
                .to_string()
        });
        let server = Server { child, base, grpc };
        let deadline = Instant::now() + Duration::from_secs(120);
        while server
            .curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{}/readyz", server.base),
            ])
            .0
            != "200"
        {
            assert!(Instant::now() < deadline, "server never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    /// Runs curl; returns (stdout, success).
    pub fn curl(&self, args: &[&str]) -> (String, bool) {
        let (out, code) = curl(args);
        (out, code == Some(0))
    }

    pub fn transcribe_file(&self, path: &str) -> (u16, serde_json::Value) {
        transcribe_at(&self.base, path)
    }

    /// POSTs `body` to `/transcribe` (through a file: a base64 body is too long for an
    /// argument); returns (status, JSON body).
    pub fn post_transcribe(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "dicta-serve-body-{}-{}.json",
            std::process::id(),
            CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::write(&path, body.to_string()).unwrap();
        let (out, ok) = self.curl(&[
            "-w",
            "\n%{http_code}",
            "-H",
            "content-type: application/json",
            "--data-binary",
            &format!("@{}", path.display()),
            &format!("{}/transcribe", self.base),
        ]);
        let _ = std::fs::remove_file(&path);
        assert!(ok, "{out}");
        let (json, code) = out.trim_end().rsplit_once('\n').unwrap();
        (
            code.parse().unwrap_or(0),
            serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
        )
    }

    /// The value of an unlabelled metric line `name value`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (text, _) = self.curl(&[&format!("{}/metrics", self.base)]);
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    pub fn send_term(&self) {
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A field of /proc/PID/status in KiB (`VmRSS`, `VmHWM`, …).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server process is alive");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Waits for the process to exit; its exit code (-1 when killed by a signal).
    pub fn wait(&mut self) -> i32 {
        self.child.wait().unwrap().code().unwrap_or(-1)
    }

    pub fn terminate(mut self) -> i32 {
        self.send_term();
        self.wait()
    }
}

impl Drop for Server {
    /// A failed test must not leave its server running (it would also hold the test's output
    /// pipe open). A no-op once the process has exited.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `curl -sS args`; returns (stdout, exit code).
pub fn curl(args: &[&str]) -> (String, Option<i32>) {
    let out = Command::new("curl")
        .arg("-sS")
        .args(args)
        .output()
        .expect("curl");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

/// Posts `path` to the OpenAI route of the server at `base`; returns (status, JSON body).
pub fn transcribe_at(base: &str, path: &str) -> (u16, serde_json::Value) {
    let (body, _) = curl(&[
        "-w",
        "\n%{http_code}",
        "-F",
        &format!("file=@{path}"),
        "-F",
        "model=whisper-1",
        &format!("{base}/v1/audio/transcriptions"),
    ]);
    let (json, code) = body.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

/// Posts `file` to the OpenAI route at `base` as `verbose_json` with extra form `fields`
/// (`name=value`); returns (status, JSON body).
pub fn openai_verbose(
    base: &str,
    file: &std::path::Path,
    fields: &[&str],
) -> (u16, serde_json::Value) {
    let mut args: Vec<String> = vec![
        "-w".into(),
        "\n%{http_code}".into(),
        "-F".into(),
        format!("file=@{}", file.display()),
        "-F".into(),
        "response_format=verbose_json".into(),
    ];
    for f in fields {
        args.push("-F".into());
        args.push((*f).into());
    }
    args.push(format!("{base}/v1/audio/transcriptions"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (body, _) = curl(&args);
    let (json, code) = body.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap(),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}
