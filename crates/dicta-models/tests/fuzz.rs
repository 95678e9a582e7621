//! Fuzz harnesses for the model readers (see the `dicta-fuzz` crate): a CTranslate2 Whisper
//! folder's `model.bin`, and ONNX / ONNX Runtime (`.ort`) files as the Silero VAD loader reads
//! them. A model file is something users download and point Dicta at, so a damaged or hostile one
//! must give a `ModelLoad` error, never a panic, a hang or a huge allocation.
//!
//! Ignored by default; run `cargo test --release -p dicta-models --test fuzz -- --ignored`.
//! Seeds need the fetched models (`DICTA_TEST_MODEL_DIR`, `DICTA_TEST_VAD_DIR`, as
//! scripts/test.sh sets them): a harness without them says so and passes.
//!
//! The Whisper seed is a *valid* miniature of tiny.en made here from its variable table (every
//! name, dtype, head count and alias kept; widths 384/768/1152/1536 cut to 12/24/36/48, random
//! weights), so mutants reach the loader's shape and config checks, not only the header parser.
//! A plain (not ignored) test checks that this miniature loads and runs.

mod whisper_support;

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use dicta_models::ort::OrtModel;
use dicta_models::vad::silero::SileroVad;
use dicta_models::whisper::Whisper;

/// One CTranslate2 variable: name, shape, dtype code, little-endian data.
struct Var {
    name: String,
    shape: Vec<u32>,
    dtype: u8,
    data: Vec<u8>,
}

/// A CTranslate2 `model.bin` (format version 6).
struct Ct2File {
    spec: String,
    revision: u32,
    vars: Vec<Var>,
    aliases: Vec<(String, String)>,
}

/// A little reader of the format (the loader's own is private): enough to take tiny.en apart.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u16() as usize;
        let b = self.take(n);
        String::from_utf8(b.strip_suffix(&[0]).unwrap_or(b).to_vec()).unwrap()
    }
}

impl Ct2File {
    fn read(bytes: &[u8]) -> Self {
        let mut r = Reader { b: bytes, pos: 0 };
        assert_eq!(r.u32(), 6, "CTranslate2 format version");
        let spec = r.string();
        let revision = r.u32();
        let n = r.u32();
        let vars = (0..n)
            .map(|_| {
                let name = r.string();
                let rank = r.u8() as usize;
                let shape = (0..rank).map(|_| r.u32()).collect();
                let dtype = r.u8();
                let len = r.u32() as usize;
                let data = r.take(len).to_vec();
                Var {
                    name,
                    shape,
                    dtype,
                    data,
                }
            })
            .collect();
        let n = r.u32();
        let aliases = (0..n).map(|_| (r.string(), r.string())).collect();
        Self {
            spec,
            revision,
            vars,
            aliases,
        }
    }

    fn write(&self) -> Vec<u8> {
        fn put_str(b: &mut Vec<u8>, s: &str) {
            b.extend(((s.len() + 1) as u16).to_le_bytes());
            b.extend(s.as_bytes());
            b.push(0);
        }
        let mut b = Vec::new();
        b.extend(6u32.to_le_bytes());
        put_str(&mut b, &self.spec);
        b.extend(self.revision.to_le_bytes());
        b.extend((self.vars.len() as u32).to_le_bytes());
        for v in &self.vars {
            put_str(&mut b, &v.name);
            b.push(v.shape.len() as u8);
            for d in &v.shape {
                b.extend(d.to_le_bytes());
            }
            b.push(v.dtype);
            b.extend((v.data.len() as u32).to_le_bytes());
            b.extend(&v.data);
        }
        b.extend((self.aliases.len() as u32).to_le_bytes());
        for (a, t) in &self.aliases {
            put_str(&mut b, a);
            put_str(&mut b, t);
        }
        b
    }
}

/// Bytes per element of a CTranslate2 dtype code (f32, i8, i16, i32, f16, bf16).
fn elem_size(dtype: u8) -> usize {
    match dtype {
        0 | 3 => 4,
        1 => 1,
        _ => 2,
    }
}

/// tiny.en cut down to a valid miniature (see the module docs), from the real `model.bin`.
fn miniature(real: &Path) -> Vec<u8> {
    let bytes = std::fs::read(real).unwrap();
    let mut file = Ct2File::read(&bytes);
    let width = |d: u32| match d {
        384 => 12,
        768 => 24,
        1152 => 36,
        1536 => 48,
        d => d,
    };
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for v in &mut file.vars {
        if v.shape.is_empty() {
            continue;
        }
        v.shape = v.shape.iter().map(|&d| width(d)).collect();
        let n: usize = v.shape.iter().map(|&d| d as usize).product();
        v.data = (0..n)
            .flat_map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let x = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2;
                match v.dtype {
                    4 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                    0 => x.to_le_bytes().to_vec(),
                    dt => vec![0u8; elem_size(dt)],
                }
            })
            .collect();
    }
    file.write()
}

/// A folder holding the real model's config and tokenizer beside `model_bin`.
fn folder_with(dir: &Path, real: &Path, model_bin: &[u8]) -> PathBuf {
    for f in ["config.json", "tokenizer.json", "vocabulary.txt"] {
        let from = real.join(f);
        if from.is_file() && !dir.join(f).is_file() {
            std::fs::copy(&from, dir.join(f)).unwrap();
        }
    }
    std::fs::write(dir.join("model.bin"), model_bin).unwrap();
    dir.to_path_buf()
}

#[test]
fn the_miniature_whisper_seed_loads_and_runs() {
    let Some(real) = whisper_support::model_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder_with(tmp.path(), &real, &miniature(&real.join("model.bin")));
    let m = Whisper::load(&dir, &Device::Cpu).expect("the miniature loads");
    assert_eq!((m.config.n_audio_state, m.config.n_text_head), (12, 6));
    let mel = Tensor::zeros((1, 80, 3000), candle_core::DType::F32, &Device::Cpu).unwrap();
    let out = m.encode(&mel).expect("the encoder runs");
    assert_eq!(out.dims(), &[1, 1500, 12]);
}

#[test]
#[ignore = "fuzzing: run with --ignored"]
fn fuzz_whisper_ct2_model_bin() {
    let Some(real) = whisper_support::model_dir() else {
        eprintln!("fuzz_whisper_ct2_model_bin: no tiny.en to make seeds from; nothing run");
        return;
    };
    let real_bin = std::fs::read(real.join("model.bin")).unwrap();
    let mut seeds = vec![
        miniature(&real.join("model.bin")),
        // The real file's head: the header and the first variables, then a cut.
        real_bin[..256 << 10].to_vec(),
    ];
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus/ct2");
    if corpus.is_dir() {
        seeds.extend(dicta_fuzz::seeds_from(corpus));
    }
    drop(real_bin);
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder_with(tmp.path(), &real, &seeds[0]);
    let report = dicta_fuzz::fuzz("whisper_ct2", &seeds, |bytes| {
        std::fs::write(dir.join("model.bin"), bytes).unwrap();
        if let Err(e) = Whisper::load(&dir, &Device::Cpu) {
            assert_eq!(e.kind, dicta_core::ErrorKind::ModelLoad, "{e}");
        }
    });
    eprintln!("{report:?}");
}

#[test]
#[ignore = "fuzzing: run with --ignored"]
fn fuzz_onnx_and_ort_model_files() {
    let vad = std::env::var_os("DICTA_TEST_VAD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(".cache/dicta/models/silero-vad")
        })
        .join("silero_vad_v6.onnx");
    let Ok(onnx) = std::fs::read(&vad) else {
        eprintln!(
            "fuzz_onnx_and_ort_model_files: no {} to seed from; nothing run",
            vad.display()
        );
        return;
    };
    let mut seeds = vec![onnx.clone(), onnx[..onnx.len() / 3].to_vec()];
    // An ONNX Runtime flatbuffer's head, and a whole encoder (its weights mapped as Moonshine's),
    // when Moonshine tiny is fetched.
    if let Some(dir) = std::env::var_os("DICTA_TEST_MOONSHINE_DIR").map(PathBuf::from) {
        if let Ok(ort) = std::fs::read(dir.join("encoder_model.ort")) {
            seeds.push(ort[..ort.len().min(512 << 10)].to_vec());
            seeds.push(ort);
        }
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus/onnx");
    if corpus.is_dir() {
        seeds.extend(dicta_fuzz::seeds_from(corpus));
    }
    // The real network loads, so mutants start from a file the loader accepts.
    SileroVad::from_model(&OrtModel::parse_onnx(&onnx).unwrap()).unwrap();
    let report = dicta_fuzz::fuzz("onnx_ort", &seeds, |bytes| {
        // As `OrtModel::read` picks the parser: the ORT identifier, else ONNX protobuf.
        let parsed = if bytes.len() >= 8 && &bytes[4..8] == b"ORTM" {
            OrtModel::parse(bytes)
        } else {
            OrtModel::parse_onnx(bytes)
        };
        if let Ok(m) = parsed {
            if let Err(e) = SileroVad::from_model(&m) {
                assert_eq!(e.kind, dicta_core::ErrorKind::ModelLoad, "{e}");
            }
            // Moonshine's weight mapping (constant folding included) on whatever parsed.
            for keep_float in [false, true] {
                if let Err(e) = dicta_models::moonshine::weights::encoder_tensors(&m, keep_float) {
                    assert_eq!(e.kind, dicta_core::ErrorKind::ModelLoad, "{e}");
                }
                if let Err(e) = dicta_models::moonshine::weights::decoder_tensors(&m, keep_float) {
                    assert_eq!(e.kind, dicta_core::ErrorKind::ModelLoad, "{e}");
                }
            }
        }
    });
    eprintln!("{report:?}");
}
