//! A test-only server: the real HTTP stack with the echo test backend (no model), for
//! checking clients such as `tests/openai_sdk_check.py --echo`.
//!
//! ```text
//! cargo run --release -p dicta-server --example echo_server -- [PORT] [API_KEY]
//! ```
//! Prints `listening on http://ADDR` once bound; stops on Ctrl-C / SIGTERM.

#[path = "../tests/common/echo_backend.rs"]
mod echo_backend;

use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let port = args.next().map(|p| p.parse()).transpose()?.unwrap_or(0);
    let api_key = args.next();
    let cfg = dicta_server::ServerConfig {
        port,
        api_key,
        ..Default::default()
    };
    let bound = dicta_server::bind(cfg).await?;
    println!("listening on http://{}", bound.local_addr());
    let backend = Arc::new(echo_backend::EchoBackend::multilingual());
    bound.run(backend, dicta_server::shutdown_signal()).await?;
    Ok(())
}
