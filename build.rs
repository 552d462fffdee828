//! Generates the Rust types of `proto/symbfile.proto` (the symbfile uploads' messages).
//! `protox` parses the .proto, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/symbfile.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
