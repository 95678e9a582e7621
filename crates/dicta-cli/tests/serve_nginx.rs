//! Scale-out without a cluster: three `dicta serve` processes behind Debian's nginx on loopback,
//! with the committed deploy/nginx/dicta.conf (its ports rewritten). Requests spread over every
//! server; one server gets SIGTERM mid-run (it drains its in-flight requests and exits 0),
//! another is killed mid-run (nginx retries its requests on the next server); every request is
//! answered 200 with the right text throughout. `.ci/run` installs nginx and sets
//! DICTA_REQUIRE_CLIENTS, so there a missing nginx fails instead of skipping.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::server::{transcribe_at, Server};
use common::{client_available, model_dir, DATA};

const CONF: &str = include_str!("../../../deploy/nginx/dicta.conf");
const ROUTE: &str = r#"dicta_http_requests_total{route="/v1/audio/transcriptions",status="200"}"#;

fn nginx() -> Option<PathBuf> {
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    client_available("nginx", found.is_some());
    found
}

fn port_of(base: &str) -> u16 {
    base.rsplit(':').next().unwrap().parse().unwrap()
}

/// nginx running the committed config, its upstreams pointed at `ports`.
struct Nginx {
    child: Child,
    base: String,
    _dir: PathBuf,
}

impl Nginx {
    fn start(bin: &Path, ports: &[u16]) -> Nginx {
        let listen = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listen.local_addr().unwrap().port();
        drop(listen);
        let mut conf = CONF.replace(
            "listen 127.0.0.1:8000;",
            &format!("listen 127.0.0.1:{port};"),
        );
        for (i, p) in ports.iter().enumerate() {
            let from = format!("server 127.0.0.1:{} ", 8001 + i);
            assert!(conf.contains(&from), "the config lists {from}");
            conf = conf.replace(&from, &format!("server 127.0.0.1:{p} "));
        }
        let dir = std::env::temp_dir().join(format!("dicta-nginx-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("dicta.conf"), conf).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("dicta.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start nginx");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while common::server::curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{base}/health"),
        ])
        .0 != "200"
        {
            assert!(Instant::now() < deadline, "nginx never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        Nginx {
            child,
            base,
            _dir: dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers, then exits. A SIGKILL orphaned the workers,
        // which held the test's standard error open (a runner reading it waited forever).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

/// `n` transcriptions of `wav` through `base` from `clients` threads; `during` runs once the
/// first answer is back (while the others are in flight). Returns every (status, text).
fn run(
    base: &str,
    wav: &str,
    n: usize,
    clients: usize,
    during: impl FnOnce(),
) -> Vec<(u16, String)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (base, wav, tx, next) =
                (base.to_string(), wav.to_string(), tx.clone(), next.clone());
            std::thread::spawn(move || {
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                    let (code, json) = transcribe_at(&base, &wav);
                    let text = json["text"].as_str().unwrap_or_default().trim().to_string();
                    tx.send((code, text)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut out = vec![rx.recv().unwrap()];
    during();
    out.extend(rx.iter());
    for w in workers {
        w.join().unwrap();
    }
    out
}

#[test]
fn three_servers_behind_nginx_answer_everything_while_one_drains_and_one_dies() {
    let Some(model) = model_dir() else { return };
    let Some(bin) = nginx() else { return };
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&model, &[])).collect();
    let ports: Vec<u16> = servers.iter().map(|s| port_of(&s.base)).collect();
    let proxy = Nginx::start(&bin, &ports);
    let wav = format!("{DATA}/openai_whisper/jfk.16k.wav");
    let (code, json) = servers[0].transcribe_file(&wav);
    assert_eq!(code, 200, "{json}");
    let expected = json["text"].as_str().unwrap().trim().to_string();

    // Spread: round-robin reaches every server.
    let answers = run(&proxy.base, &wav, 9, 3, || {});
    assert!(
        answers.iter().all(|(c, t)| *c == 200 && *t == expected),
        "{answers:?}"
    );
    let served: Vec<f64> = servers
        .iter()
        .map(|s| s.metric(ROUTE).unwrap_or(0.0))
        .collect();
    assert!(
        served.iter().all(|&n| n >= 1.0),
        "requests per server: {served:?}"
    );

    // SIGTERM on one mid-run: its in-flight requests finish, new ones go to the others.
    let mut servers = servers;
    let draining = servers.pop().unwrap();
    let answers = run(&proxy.base, &wav, 12, 4, || draining.send_term());
    assert!(
        answers.iter().all(|(c, t)| *c == 200 && *t == expected),
        "{answers:?}"
    );
    let mut draining = draining;
    assert_eq!(draining.wait(), 0, "the drained server exits 0");

    // SIGKILL on another mid-run: nginx resends its requests to the last one.
    let mut killed = servers.pop().unwrap();
    let answers = run(&proxy.base, &wav, 12, 4, || {
        let _ = killed.child.kill();
    });
    assert!(
        answers.iter().all(|(c, t)| *c == 200 && *t == expected),
        "{answers:?}"
    );
    let _ = killed.wait();
    assert!(servers[0].metric(ROUTE).unwrap() > served[0]);
}
