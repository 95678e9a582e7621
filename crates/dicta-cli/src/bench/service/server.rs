//! The `dicta serve` child of a service benchmark: started on port 0, waited for until
//! `/readyz` answers 200, stopped with SIGTERM.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// A running `dicta serve`.
pub struct Spawned {
    child: Child,
    /// Kept open: the server may print more, and a closed pipe would fail its writes.
    _stdout: BufReader<ChildStdout>,
    /// `http://host:port`.
    pub base: String,
    log: PathBuf,
}

impl Spawned {
    /// Starts `exe serve --port 0 <args>` with its stderr appended to `log`, and reads the bound
    /// address from the first line it prints.
    pub fn start(exe: &Path, args: &[String], log: &Path) -> Result<Self> {
        if let Some(dir) = log.parent() {
            fs::create_dir_all(dir)?;
        }
        let err: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        stop_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {} serve", exe.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let Some(base) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "dicta serve did not start (first line {line:?}); its log {}: {}",
                log.display(),
                log_tail(log)
            );
        };
        Ok(Self {
            base: base.to_string(),
            child,
            _stdout: stdout,
            log: log.to_path_buf(),
        })
    }

    /// The server's process id (for sampling its memory).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the server has exited (with its log tail).
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(anyhow!(
                "dicta serve exited ({status}); its log {}: {}",
                self.log.display(),
                log_tail(&self.log)
            )),
        }
    }

    /// Sends SIGTERM and waits up to `grace` for a clean exit, then kills it.
    pub fn stop(mut self, grace: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        terminate(&self.child);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill()?;
        let status = self.child.wait()?;
        bail!(
            "dicta serve did not stop within {} s of SIGTERM and was killed ({status})",
            grace.as_secs()
        )
    }
}

#[cfg(unix)]
fn terminate(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

#[cfg(not(unix))]
fn terminate(_child: &Child) {}

/// Polls `GET {base}/readyz` until it answers 200, the server dies, or `limit` passes.
pub async fn wait_ready(
    client: &reqwest::Client,
    base: &str,
    api_key: Option<&str>,
    limit: Duration,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        alive()?;
        let mut req = client.get(format!("{base}/readyz"));
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        let last = match req.send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => format!("HTTP {}", r.status().as_u16()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            bail!(
                "{base}/readyz was not 200 within {} s (last: {last})",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join(" | ")
}

/// Linux: the server gets SIGTERM when the thread that spawned it (the benchmark's main
/// thread) ends, so a benchmark killed midway does not leave its server running and holding
/// cores for the next one.
#[cfg(target_os = "linux")]
fn stop_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(2) with PR_SET_PDEATHSIG only sets a flag of the new process; it is
    // async-signal-safe, as the code between fork and exec must be.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn stop_with_parent(_cmd: &mut Command) {}
