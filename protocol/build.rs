//! Compiles `proto/protocol.proto` with protox (a pure-Rust protobuf compiler), so that no
//! system `protoc` is needed to build Courant's own messages.

fn main() {
    // protox does not emit rerun-if-changed lines itself.
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["proto/protocol.proto"], ["proto"]).expect("compile protocol.proto");
    prost_build::Config::new()
        // Content fields become `bytes::Bytes`, sliced from the received frame without a copy.
        .bytes(["."])
        .compile_fds(fds)
        .expect("generate protocol messages");
}
