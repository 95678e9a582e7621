//! `dicta models`: fetch, list and locate models.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use crate::fetch;
use crate::Globals;

/// `dicta models …`
#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    command: ModelsCommand,
}

#[derive(Debug, Subcommand)]
enum ModelsCommand {
    /// Download a known model into the cache (a no-op when it is already there) and print its folder.
    Fetch {
        /// Model name (see `dicta models list`).
        name: String,
        /// Hide progress output.
        #[arg(long)]
        quiet: bool,
    },
    /// List known models and whether they are fetched.
    List,
    /// Write a Hugging Face–layout Whisper folder (config.json, model.safetensors, tokenizer.json,
    /// preprocessor_config.json, generation_config.json) from a CTranslate2 one.
    Convert {
        /// CTranslate2 Whisper folder, or a known model name (fetched if needed).
        src: String,
        /// Destination folder (created).
        dst: std::path::PathBuf,
    },
    /// Print the folder of a fetched model (exit 1 if it is not fetched).
    Path {
        /// Model name.
        name: String,
    },
}

/// Runs `dicta models …`; returns the exit code.
pub fn run(args: &ModelsArgs, g: &Globals) -> Result<u8> {
    match &args.command {
        ModelsCommand::Fetch { name, quiet } => {
            let Some(a) = fetch::artifact(name) else {
                bail!("unknown model {name:?}; known: {}", known_names());
            };
            let already = fetch::is_fetched(&g.home, a);
            let dir = fetch::fetch(a, &g.home, &g.python, !quiet)?;
            if already {
                eprintln!("dicta: {name} is already fetched");
            } else {
                eprintln!("dicta: fetched {name}");
            }
            println!("{}", dir.display());
            Ok(0)
        }
        ModelsCommand::List => {
            for a in fetch::ARTIFACTS {
                let state = if fetch::is_fetched(&g.home, a) {
                    format!(
                        "fetched: {}",
                        fetch::artifact_dir(&g.home, a.name).display()
                    )
                } else {
                    "not fetched".to_string()
                };
                let default = if a.name == fetch::DEFAULT_MODEL {
                    " (default)"
                } else {
                    ""
                };
                println!("{}{default}\t{}\t[{state}]", a.name, a.description);
            }
            Ok(0)
        }
        ModelsCommand::Convert { src, dst } => {
            let src = fetch::resolve_model(src, &g.home, &g.python, true)?;
            dicta_models::whisper::convert_ct2_to_hf(&src, dst)?;
            eprintln!("dicta: converted {} → {}", src.display(), dst.display());
            println!("{}", dst.display());
            Ok(0)
        }
        ModelsCommand::Path { name } => {
            let Some(a) = fetch::artifact(name) else {
                bail!("unknown model {name:?}; known: {}", known_names());
            };
            if !fetch::is_fetched(&g.home, a) {
                bail!("{name} is not fetched; run `dicta models fetch {name}`");
            }
            println!("{}", fetch::artifact_dir(&g.home, a.name).display());
            Ok(0)
        }
    }
}

fn known_names() -> String {
    fetch::ARTIFACTS
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}
