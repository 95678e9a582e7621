//! No container runtime or cluster is reachable here, so the deployment files are checked
//! against the real binary: the Kubernetes manifests parse and are consistent (selectors,
//! ports, the HPA's target, a grace period longer than the drain); every flag their args and
//! the Dockerfile's ENTRYPOINT pass is a flag `dicta serve` has; the models the Dockerfile
//! fetches are ones `dicta models` knows; and the Dockerfile's ENTRYPOINT itself, run here (ports
//! 0, a model folder added as `docker run IMAGE --model …` would), serves the routes its
//! HEALTHCHECK and the probes name, and the gRPC port.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use yaml_rust2::{Yaml, YamlLoader};

const DOCKERFILE: &str = include_str!("../../../Dockerfile");
const DEPLOYMENT: &str = include_str!("../../../deploy/k8s/deployment.yaml");
const SERVICE: &str = include_str!("../../../deploy/k8s/service.yaml");
const HPA: &str = include_str!("../../../deploy/k8s/hpa.yaml");

fn yaml(text: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(text).expect("valid YAML");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

/// The long flags `dicta <args> --help` lists.
fn help_flags(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .split('=')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn flags(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap().to_string())
        .collect()
}

/// The Dockerfile's `ENTRYPOINT [...]` as words.
fn entrypoint() -> Vec<String> {
    let line = DOCKERFILE
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .expect("an ENTRYPOINT");
    let json = line.trim_start_matches("ENTRYPOINT").trim();
    serde_json::from_str(json).expect("ENTRYPOINT in exec (JSON) form")
}

fn value_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .map(|i| args[i + 1].clone())
}

#[test]
fn kubernetes_manifests_are_consistent_with_the_server() {
    let serve = help_flags(&["serve"]);
    let d = yaml(DEPLOYMENT);
    assert_eq!(d["kind"].as_str(), Some("Deployment"));
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    assert_eq!(d["spec"]["selector"]["matchLabels"], *labels);
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<String> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for f in flags(&args) {
        assert!(
            serve.contains(&f),
            "deployment args use {f}, which dicta serve lacks"
        );
    }
    // Container ports are the ENTRYPOINT's.
    let ep = entrypoint();
    let port_of = |name: &str| -> i64 {
        c["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no container port {name}"))
    };
    assert_eq!(
        port_of("http").to_string(),
        value_after(&ep, "--port").unwrap()
    );
    assert_eq!(
        port_of("grpc").to_string(),
        value_after(&ep, "--grpc-port").unwrap()
    );
    // Probes name routes the server has (checked live in the Dockerfile test) on the http port.
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["port"].as_str(), Some("http"), "{probe}");
        assert!(
            matches!(get["path"].as_str(), Some("/health") | Some("/readyz")),
            "{probe}"
        );
    }
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/health")
    );
    // The grace period outlasts the drain: the request timeout (dicta's default, unless the
    // args set one) plus the preStop pause.
    let timeout: i64 =
        value_after(&args, "--request-timeout-s").map_or(600, |v| v.parse::<f64>().unwrap() as i64);
    let pause: i64 = c["lifecycle"]["preStop"]["exec"]["command"][1]
        .as_str()
        .map_or(0, |s| s.parse().unwrap());
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(
        grace > timeout + pause,
        "grace {grace} vs drain {timeout} + {pause}"
    );
    // Non-root, as the image's user.
    assert_eq!(pod["securityContext"]["runAsUser"].as_i64(), Some(10001));
    assert!(DOCKERFILE.contains("USER 10001"));

    let s = yaml(SERVICE);
    assert_eq!(s["spec"]["selector"], *labels);
    for p in s["spec"]["ports"].as_vec().unwrap() {
        let target = p["targetPort"].as_str().unwrap();
        port_of(target);
    }
    let h = yaml(HPA);
    assert_eq!(
        h["spec"]["scaleTargetRef"]["kind"].as_str(),
        Some("Deployment")
    );
    assert_eq!(h["spec"]["scaleTargetRef"]["name"], d["metadata"]["name"]);
    assert!(h["spec"]["minReplicas"].as_i64() <= h["spec"]["maxReplicas"].as_i64());
}

#[test]
fn the_dockerfile_fetches_known_models_and_its_entrypoint_serves() {
    // The build stage's commands: the binary CI builds, and model names `dicta models` knows.
    assert!(DOCKERFILE.contains("RUN cargo build --release -p dicta-cli"));
    let models = DOCKERFILE
        .lines()
        .find_map(|l| l.strip_prefix("ARG DICTA_MODELS="))
        .expect("ARG DICTA_MODELS")
        .trim_matches('"')
        .to_string();
    let list = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(["models", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    for m in models.split_whitespace() {
        assert!(
            list.lines().any(|l| l.split_whitespace().next() == Some(m)),
            "{m} is not a model `dicta models list` knows:\n{list}"
        );
    }
    let ep = entrypoint();
    assert_eq!(ep[..2], ["dicta".to_string(), "serve".to_string()]);
    let serve = help_flags(&["serve"]);
    for f in flags(&ep) {
        assert!(
            serve.contains(&f),
            "ENTRYPOINT uses {f}, which dicta serve lacks"
        );
    }
    let Some(model) = common::model_dir() else {
        return;
    };
    // Run it as `docker run IMAGE --model DIR` would, with free ports.
    let mut args: Vec<String> = ep[1..].to_vec();
    for flag in ["--port", "--grpc-port"] {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1] = "0".into();
    }
    let i = args.iter().position(|a| a == "--host").unwrap();
    args[i + 1] = "127.0.0.1".into();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(&args)
        .args(["--beam-size", "1", "--no-vad", "--model"])
        .arg(&model)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut http, mut grpc) = (String::new(), String::new());
    out.read_line(&mut http).unwrap();
    out.read_line(&mut grpc).unwrap();
    let base = http
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    assert!(grpc.starts_with("grpc listening on "), "{grpc}");
    // The HEALTHCHECK's route, then readiness, as the probes ask.
    let health = DOCKERFILE
        .lines()
        .find_map(|l| l.trim().strip_prefix("CMD curl -fsS http://127.0.0.1:8000"))
        .expect("a HEALTHCHECK curl on port 8000")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    for path in [health.as_str(), "/readyz"] {
        loop {
            let (code, _) = common::server::curl(&[
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}{path}"),
            ]);
            if code == "200" {
                break;
            }
            assert!(Instant::now() < deadline, "{path} never answered 200");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "SIGTERM (STOPSIGNAL) exits 0"
    );
}
