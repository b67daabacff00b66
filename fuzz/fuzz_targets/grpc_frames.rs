//! gRPC message framing (`protocol::grpc::FrameDecoder`) over arbitrary DATA chunking: the
//! first byte picks the chunk size, the rest is the stream. Nothing may panic, and frames
//! returned must respect the size limit and account for every byte.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::grpc::FrameDecoder;

const MAX: usize = 1 << 12;

fuzz_target!(|data: &[u8]| {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split).max(1);
    let mut decoder = FrameDecoder::new(MAX);
    let mut consumed = 0usize;
    for piece in stream.chunks(chunk) {
        decoder.push(Bytes::copy_from_slice(piece));
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    assert!(frame.len() <= MAX);
                    consumed += 5 + frame.len();
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    assert_eq!(consumed + decoder.buffered(), stream.len());
});
