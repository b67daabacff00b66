//! Every request message of `protocol.Journal` through protobuf decoding and Gazette's
//! validation, as the broker does with a client's first message. The first byte picks the
//! message type. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use protocol::validate::Validate;

fn check<M: Message + Default + Validate>(body: &[u8]) {
    if let Ok(msg) = M::decode(body) {
        let _ = msg.validate();
        // Re-encoding what decoded must decode again.
        let again = M::decode(msg.encode_to_vec().as_slice()).expect("re-decode");
        let _ = again.validate();
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 8 {
        0 => check::<protocol::AppendRequest>(body),
        1 => check::<protocol::ReadRequest>(body),
        2 => check::<protocol::ListRequest>(body),
        3 => check::<protocol::ApplyRequest>(body),
        4 => check::<protocol::FragmentsRequest>(body),
        5 => check::<protocol::ReplicateRequest>(body),
        6 => check::<protocol::FragmentStoreHealthRequest>(body),
        _ => check::<protocol::JournalSpec>(body),
    }
});
