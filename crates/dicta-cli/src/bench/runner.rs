//! The benchmark driver: builds workloads, starts the arms, runs the configuration sweep with
//! interleaved runs, and writes the results.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::arm::{Arm, ArmSpec};
use super::protocol::{Mode, RunReply, RunRequest};
use super::report::{build_row, compare, to_csv, to_markdown, Row};
use super::workload::{materialise, read_items, WorkloadInfo};
use super::{LongForm, Peer, RunArgs, WorkloadArgs};
use crate::{fetch, Globals};

/// `dicta bench workloads`: builds each workload and prints its description as a JSON line.
pub fn workloads(args: &WorkloadArgs, g: &Globals) -> Result<u8> {
    for info in build_workloads(args, g)? {
        println!("{}", serde_json::to_string(&info)?);
    }
    Ok(0)
}

pub(super) fn build_workloads(args: &WorkloadArgs, g: &Globals) -> Result<Vec<WorkloadInfo>> {
    let cache = g.home.join("bench");
    super::workload::expand_names(&args.workload)
        .iter()
        .map(|name| {
            eprintln!("dicta bench: preparing workload {name}");
            materialise(name, &args.data, args.seed, &cache)
                .with_context(|| format!("workload {name} (data manifest {})", args.data.display()))
        })
        .collect()
}

/// `dicta bench engine|accuracy`.
pub fn run(args: &RunArgs, harness: &str, g: &Globals) -> Result<u8> {
    let accuracy = harness == "accuracy";
    let runs = args.runs.unwrap_or(if accuracy { 1 } else { 3 });
    let mode = args
        .mode
        .unwrap_or(if accuracy { Mode::PerItem } else { Mode::Batch });
    if runs == 0
        || args.batch_sizes.contains(&0)
        || args.beam_sizes.contains(&0)
        || args.temperature.is_empty()
    {
        eprintln!("dicta bench: --runs, --batch-sizes and --beam-sizes must be >= 1, --temperature non-empty");
        return Ok(2);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-results/{}", unix_now())));
    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let model = fetch::resolve_model(&args.model, &g.home, &g.python, true)?;
    let model = fs::canonicalize(&model).unwrap_or(model);
    if args.vs.contains(&Peer::FasterWhisper) && !model.join("model.bin").is_file() {
        bail!(
            "--vs faster-whisper needs a CTranslate2 model folder (with model.bin); {} is not one",
            model.display()
        );
    }
    let infos = build_workloads(&args.workloads, g)?;
    let vs_models: Vec<(String, PathBuf)> = args
        .vs_model
        .iter()
        .map(|m| {
            let dir = fetch::resolve_model(m, &g.home, &g.python, true)?;
            let name = Path::new(m)
                .file_name()
                .map_or_else(|| m.clone(), |n| n.to_string_lossy().into_owned());
            Ok((name, dir))
        })
        .collect::<Result<_>>()?;
    let threads: Vec<Option<usize>> = if args.threads.is_empty() {
        vec![None]
    } else {
        args.threads.iter().map(|&t| Some(t)).collect()
    };

    let meta = meta(&model, runs, args.warmup);
    let mut rows: Vec<Row> = Vec::new();
    for &t in &threads {
        let tag = t.map_or("all".to_string(), |n| n.to_string());
        let mut arms = Vec::new();
        for ct in &args.compute_types {
            let log = out.join(format!("logs/dicta-{ct}-t{tag}.log"));
            arms.push(Arm::start(ArmSpec::dicta(&model, t, ct, log)?)?);
        }
        for (name, dir) in &vs_models {
            let log = out.join(format!("logs/dicta-{name}-t{tag}.log"));
            let mut spec = ArmSpec::dicta(dir, t, "default", log)?;
            spec.label = format!("dicta-{name}");
            arms.push(Arm::start(spec)?);
        }
        for peer in &args.vs {
            match peer {
                Peer::FasterWhisper => {
                    for ct in &args.vs_compute_types {
                        let log = out.join(format!("logs/faster-whisper-{ct}-t{tag}.log"));
                        let spec = ArmSpec::faster_whisper(
                            &g.python,
                            &args.peers_dir,
                            &model,
                            t,
                            ct,
                            log,
                        )?;
                        arms.push(Arm::start(spec)?);
                    }
                }
            }
        }
        for a in &arms {
            eprintln!(
                "dicta bench: {} {} ({}, {} threads) loaded in {:.2} s",
                a.spec.label,
                a.ready.version,
                a.ready.compute_type,
                a.ready.threads,
                a.ready.load_seconds
            );
        }
        for info in &infos {
            let items = read_items(&info.manifest)?;
            for &batch_size in &args.batch_sizes {
                for &beam_size in &args.beam_sizes {
                    let req = request(args, info, mode, batch_size, beam_size);
                    let new_rows =
                        run_config(&mut arms, &req, harness, info, &items, runs, args, &out)?;
                    rows.extend(new_rows);
                    // Written after every configuration so an interrupted sweep keeps its results.
                    write_outputs(&out, &meta, &infos, &rows)?;
                }
            }
        }
        arms.into_iter().for_each(Arm::stop);
    }
    let md = to_markdown(&rows);
    print!("{md}");
    eprintln!("dicta bench: results in {}", out.display());
    Ok(if rows.iter().all(|r| r.status == "ok") {
        0
    } else {
        1
    })
}

fn request(
    args: &RunArgs,
    info: &WorkloadInfo,
    mode: Mode,
    batch_size: usize,
    beam_size: usize,
) -> RunRequest {
    RunRequest {
        manifest: info.manifest.clone(),
        mode,
        batch_size,
        beam_size,
        temperatures: args.temperature.clone(),
        condition_on_previous_text: args.condition_on_previous_text,
        without_timestamps: args.without_timestamps,
        long_form: match args.long_form {
            LongForm::Sequential => "sequential".into(),
            LongForm::Batched => "batched".into(),
            LongForm::Auto => "auto".into(),
        },
        overlap_seconds: args.overlap_seconds,
    }
}

/// Warm-up, then `runs` rounds of one run per arm in arm order (A B A B …), so slow drifts of
/// the machine's load hit every arm alike. An arm that fails stops for this configuration.
#[allow(clippy::too_many_arguments)]
fn run_config(
    arms: &mut [Arm],
    req: &RunRequest,
    harness: &str,
    info: &WorkloadInfo,
    items: &[super::workload::WorkloadItem],
    runs: usize,
    args: &RunArgs,
    out: &Path,
) -> Result<Vec<Row>> {
    let config = format!(
        "{} batch={} beam={}",
        info.name, req.batch_size, req.beam_size
    );
    let mut replies: Vec<Vec<RunReply>> = vec![Vec::new(); arms.len()];
    let mut failed = vec![false; arms.len()];
    for w in 0..args.warmup {
        for (k, arm) in arms.iter_mut().enumerate() {
            let r = arm.run(req);
            eprintln!(
                "dicta bench: {config} {} warm-up {}: {}",
                arm.spec.label,
                w + 1,
                describe(&r)
            );
            if !r.ok {
                failed[k] = true;
                replies[k].push(r);
            }
        }
    }
    for i in 0..runs {
        for (k, arm) in arms.iter_mut().enumerate() {
            if failed[k] {
                continue;
            }
            let r = arm.run(req);
            eprintln!(
                "dicta bench: {config} {} run {}/{runs}: {}",
                arm.spec.label,
                i + 1,
                describe(&r)
            );
            failed[k] = !r.ok;
            replies[k].push(r);
        }
    }
    let mut rows = Vec::new();
    for (k, arm) in arms.iter().enumerate() {
        let (row, hyps) = build_row(
            harness,
            &info.name,
            &arm.ready,
            &arm.spec.label,
            req,
            &replies[k],
            items,
        );
        if args.save_transcripts && !hyps.is_empty() {
            let dir = out.join("transcripts");
            fs::create_dir_all(&dir)?;
            let name = format!(
                "{}__{}__t{}_b{}_beam{}.jsonl",
                info.name, arm.spec.label, arm.ready.threads, req.batch_size, req.beam_size
            );
            let body: String = hyps
                .iter()
                .map(|h| serde_json::to_string(h).unwrap_or_default() + "\n")
                .collect();
            fs::write(dir.join(name), body)?;
        }
        rows.push(row);
    }
    // Each other arm is compared with the Dicta arm of its compute type (a peer's int8 with
    // Dicta's int8), or with the first Dicta arm when there is none.
    let dicta_arms = args.compute_types.len().min(rows.len());
    for k in dicta_arms..rows.len() {
        let reference = (0..dicta_arms)
            .find(|&d| d != k && rows[d].compute_type == rows[k].compute_type)
            .unwrap_or(0);
        if reference != k {
            let dicta = rows[reference].clone();
            compare(&mut rows[k], &dicta);
        }
    }
    Ok(rows)
}

fn describe(r: &RunReply) -> String {
    if r.ok {
        let rtfx = if r.wall_seconds > 0.0 {
            r.audio_seconds / r.wall_seconds
        } else {
            0.0
        };
        format!("{:.2} s, RTFx {rtfx:.1}", r.wall_seconds)
    } else {
        format!(
            "FAILED ({}): {}",
            r.error_kind.as_deref().unwrap_or("error"),
            r.error.as_deref().unwrap_or("")
        )
    }
}

fn write_outputs(
    out: &Path,
    meta: &serde_json::Value,
    infos: &[WorkloadInfo],
    rows: &[Row],
) -> Result<()> {
    let doc = json!({"meta": meta, "workloads": infos, "rows": rows});
    fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&doc)? + "\n",
    )?;
    fs::write(out.join("results.csv"), to_csv(rows))?;
    fs::write(out.join("results.md"), to_markdown(rows))?;
    Ok(())
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where and how the results were measured.
pub(super) fn meta(model: &Path, runs: usize, warmup: usize) -> serde_json::Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string());
    let mem_gib = crate::mem_total_kib().map(|kb| (kb as f64 / 1048576.0 * 10.0).round() / 10.0);
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    json!({
        "date_unix": unix_now(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "commit": git(&["rev-parse", "HEAD"]),
        "dirty": git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty()),
        "dicta_version": env!("CARGO_PKG_VERSION"),
        "model": model,
        "runs": runs,
        "warmup": warmup,
        "machine": {
            "cpu": cpu,
            "logical_cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "memory_gib": mem_gib,
            "kernel": fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        },
    })
}
