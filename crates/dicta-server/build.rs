//! Compiles Riva's ASR protos (recovered into proto/ by proto/recover_riva_protos.py) into the
//! tonic service and prost messages of `src/grpc`. protox parses them, so no protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["riva/proto/riva_asr.proto"];
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    for p in [
        "proto/riva/proto/riva_asr.proto",
        "proto/riva/proto/riva_audio.proto",
        "proto/riva/proto/riva_common.proto",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}
