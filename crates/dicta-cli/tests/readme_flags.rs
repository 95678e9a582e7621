//! README.md's usage block and `dicta <command> --help` agree: every flag the README shows for
//! `transcribe`, `vad`, `decode`, `serve` and each `models` subcommand exists, and every flag the help
//! lists is in the README (the global `--home`, `--log` and `--help` aside).

use std::collections::BTreeSet;
use std::process::Command;

const README: &str = include_str!("../../../README.md");

/// The README's ```text usage block, as (command, the lines that belong to it).
fn usage_flags(command: &str) -> BTreeSet<String> {
    let block = README
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README has a ```text usage block");
    let mut flags = BTreeSet::new();
    let mut current = false;
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("dicta ") {
            current = rest.starts_with(&format!("{command} ")) || rest == command;
        }
        if current {
            flags.extend(flags_in(line.split('#').next().unwrap_or("")));
        }
    }
    flags
}

fn flags_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i + 2 < b.len() {
        if b[i] == b'-' && b[i + 1] == b'-' && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let mut j = i + 2;
            while j < b.len()
                && (b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-')
            {
                j += 1;
            }
            if j > i + 2 {
                out.insert(text[i..j].to_string());
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn help_flags(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_dicta"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run dicta --help");
    assert!(out.status.success(), "{args:?} --help failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeSet::new();
    for line in text.lines() {
        let t = line.trim_start();
        // A short alias first: `-o, --output`.
        let b = t.as_bytes();
        let t = if b.len() > 4 && b[0] == b'-' && b[1].is_ascii_alphabetic() && &b[2..4] == b", " {
            &t[4..]
        } else {
            t
        };
        if t.starts_with("--") {
            if let Some(f) = flags_in(t).into_iter().next() {
                flags.insert(f);
            }
        }
    }
    for global in ["--help", "--home", "--log", "--version"] {
        flags.remove(global);
    }
    flags
}

#[test]
fn readme_usage_lists_exactly_the_flags_of_help() {
    for (readme_key, args) in [
        ("transcribe", vec!["transcribe"]),
        ("decode", vec!["decode"]),
        ("vad", vec!["vad"]),
        ("diarize", vec!["diarize"]),
        ("serve", vec!["serve"]),
        ("models fetch", vec!["models", "fetch"]),
        ("models list", vec!["models", "list"]),
        ("models path", vec!["models", "path"]),
        ("models convert", vec!["models", "convert"]),
    ] {
        let readme = usage_flags(readme_key);
        let help = help_flags(&args);
        let missing: Vec<_> = help.difference(&readme).collect();
        let unknown: Vec<_> = readme.difference(&help).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "dicta {readme_key}: flags in --help but not in README {missing:?}; in README but not in --help {unknown:?}"
        );
    }
}

#[test]
fn the_flag_scanner_finds_long_flags_only() {
    let f = flags_in("[--beam-size 5] -x --a1 [--output out.json | --output-dir DIR] x--no");
    let want: BTreeSet<String> = ["--beam-size", "--a1", "--output", "--output-dir"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(f, want);
}
