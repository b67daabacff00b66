//! Running SHA-1 sums, with two sums over the same bytes computed in one pass.
//!
//! Gazette's wire format puts two SHA-1 sums over every appended byte on the primary: the
//! client's sum of its append (`AppendResponse.commit.sum`) and the spool's running sum of the
//! fragment (`Fragment.sum`). They start at different offsets, so neither can be derived from
//! the other. SHA-1 is a chain of dependent rounds; on a core with SHA-NI one stream is bound
//! by the latency of `sha1rnds4`, not by the SHA unit's throughput. [`Summer::update_pair`]
//! therefore hashes the two streams block for block with their rounds interleaved, which
//! costs little more than one stream (measured on this project's AMD EPYC VM: 0.61 ns/B for
//! both sums against 1.05 ns/B for two passes of the `sha1` crate).
//!
//! Without SHA-NI (checked once at run time) a portable implementation is used.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;
use std::sync::OnceLock;

/// SHA-1's initial state.
const INIT: [u32; 5] = [
    0x6745_2301,
    0xEFCD_AB89,
    0x98BA_DCFE,
    0x1032_5476,
    0xC3D2_E1F0,
];

type Block = [u8; 64];

/// A running SHA-1 sum. Cloning it is cheap (92 bytes), which is how a spool keeps its
/// committed and pending sums.
#[derive(Clone)]
pub struct Summer {
    state: [u32; 5],
    /// A partial block not yet compressed.
    buf: Block,
    buf_len: usize,
    /// Bytes consumed in all.
    len: u64,
}

impl Default for Summer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Summer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summer").field("len", &self.len).finish()
    }
}

impl Summer {
    pub fn new() -> Self {
        Summer {
            state: INIT,
            buf: [0; 64],
            buf_len: 0,
            len: 0,
        }
    }

    /// Bytes summed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `data` to the sum.
    pub fn update(&mut self, data: &[u8]) {
        self.len += data.len() as u64;
        let taken = self.fill(data);
        let (blocks, tail) = data[taken..].as_chunks::<64>();
        compress(&mut self.state, blocks);
        self.keep(tail);
    }

    /// Adds `data` to both `a` and `b`: the same result as `a.update(data); b.update(data)`,
    /// in about the time of one.
    pub fn update_pair(a: &mut Summer, b: &mut Summer, data: &[u8]) {
        // On the stack: every small write on a primary comes through here.
        let ((blocks_a, tail_a), (blocks_b, tail_b)) = (a.begin(data), b.begin(data));
        let mut work = [(a.state, blocks_a), (b.state, blocks_b)];
        compress_many(&mut work);
        a.end(work[0].0, tail_a);
        b.end(work[1].0, tail_b);
    }

    /// Adds each lane's bytes to its summer: the same result as `summer.update(bytes)` for
    /// every lane, with up to [`lanes_per_group`] streams' rounds interleaved (a summer
    /// appears in one lane at most). Four lanes cost about 40% of four separate streams on
    /// an AMD EPYC's SHA-NI; on an Intel Xeon two lanes cost about 80% of two streams.
    pub fn update_lanes(lanes: &mut [(&mut Summer, &[u8])]) {
        Self::update_lanes_in_groups(lanes, lanes_per_group());
    }

    /// [`Summer::update_lanes`] with at most `max` streams interleaved.
    fn update_lanes_in_groups(lanes: &mut [(&mut Summer, &[u8])], max: usize) {
        let (mut work, mut tails) = (Vec::with_capacity(lanes.len()), Vec::new());
        for (summer, data) in lanes.iter_mut() {
            let (blocks, tail) = summer.begin(data);
            work.push((summer.state, blocks));
            tails.push(tail);
        }
        compress_in_groups(&mut work, max);
        for (((summer, _), (state, _)), tail) in lanes.iter_mut().zip(work).zip(tails) {
            summer.end(state, tail);
        }
    }

    /// Counts `data` and completes the partial block from its head; returns the whole
    /// blocks left to compress and the bytes after them.
    fn begin<'d>(&mut self, data: &'d [u8]) -> (&'d [Block], &'d [u8]) {
        self.len += data.len() as u64;
        let taken = self.fill(data);
        data[taken..].as_chunks::<64>()
    }

    /// Adopts the state after `begin`'s blocks and keeps the bytes after them.
    fn end(&mut self, state: [u32; 5], tail: &[u8]) {
        self.state = state;
        self.keep(tail);
    }

    /// The wire `SHA1Sum` of everything summed so far; the summer goes on unchanged.
    pub fn sum(&self) -> protocol::Sha1Sum {
        protocol::sum::sum_from_bytes(&self.digest())
    }

    /// The 20-byte digest of everything summed so far; the summer goes on unchanged.
    pub fn digest(&self) -> [u8; 20] {
        let mut last = self.clone();
        let mut pad = [0u8; 72];
        pad[0] = 0x80;
        let zeros = if self.buf_len < 56 {
            56 - self.buf_len
        } else {
            120 - self.buf_len
        };
        pad[zeros..zeros + 8].copy_from_slice(&self.len.wrapping_mul(8).to_be_bytes());
        last.update(&pad[..zeros + 8]);
        debug_assert_eq!(last.buf_len, 0);
        let mut out = [0u8; 20];
        for (word, bytes) in last.state.iter().zip(out.chunks_exact_mut(4)) {
            bytes.copy_from_slice(&word.to_be_bytes());
        }
        out
    }

    /// Completes a partial block from the head of `data`; returns how many bytes it took.
    fn fill(&mut self, data: &[u8]) -> usize {
        if self.buf_len == 0 {
            return 0;
        }
        let take = (64 - self.buf_len).min(data.len());
        self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&data[..take]);
        self.buf_len += take;
        if self.buf_len == 64 {
            compress(&mut self.state, &[self.buf]);
            self.buf_len = 0;
        }
        take
    }

    /// Keeps the bytes after the last whole block (there are none when `fill` could not
    /// complete its block).
    fn keep(&mut self, tail: &[u8]) {
        if self.buf_len == 0 {
            self.buf[..tail.len()].copy_from_slice(tail);
            self.buf_len = tail.len();
        }
    }
}

/// Whether this CPU has the SHA extensions (and SSE4.1, which the SHA-NI code also uses).
fn shani() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("sha")
                && std::arch::is_x86_feature_detected!("sse4.1")
                && std::arch::is_x86_feature_detected!("ssse3")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

fn compress(state: &mut [u32; 5], blocks: &[Block]) {
    if blocks.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if shani() {
        // SAFETY: the CPU has the features `lanes` is compiled for (checked by `shani`).
        unsafe { lanes::<1>([state], [blocks]) };
        return;
    }
    portable(state, blocks);
}

/// The most streams [`Summer::update_lanes`] can interleave. How many pay depends on the
/// CPU, so [`lanes_per_group`] measures it: on this project's AMD EPYC VM four lanes hashed
/// at 0.208 ns per byte each against 0.535 for one (0.317 with two, 0.197 with six), while
/// on its Intel Xeon VM (December 2026) two lanes were best (0.50-0.55 ns per byte each,
/// 0.61-0.68 for one, 0.57-0.85 for four): SHA-NI's instructions reach only 16 vector
/// registers, four lanes' state needs more, and there the spills cost more than the
/// interleaving gains.
pub const MAX_LANES: usize = 4;

/// How many streams [`compress_many`] interleaves on this CPU: the count of 1 to
/// [`MAX_LANES`] that hashed fastest per stream, measured once per process (about 1 ms of
/// hashing at first use, which the broker makes at start-up so that no append waits for
/// it). 1 without SHA-NI.
pub fn lanes_per_group() -> usize {
    static LANES: OnceLock<usize> = OnceLock::new();
    *LANES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if shani() {
            return fastest_lanes();
        }
        1
    })
}

/// Times 1 to [`MAX_LANES`] interleaved streams of 16 KiB, best of five rounds each, and
/// returns the count with the least time per stream.
#[cfg(target_arch = "x86_64")]
fn fastest_lanes() -> usize {
    const BLOCKS: usize = 256;
    let data: Vec<Block> = (0..BLOCKS)
        .map(|i| std::array::from_fn(|j| (i * 64 + j) as u8))
        .collect();
    let mut best = [f64::INFINITY; MAX_LANES];
    for _ in 0..5 {
        for (n, best) in best.iter_mut().enumerate() {
            let mut states = [INIT; MAX_LANES];
            let start = std::time::Instant::now();
            // SAFETY: only called where `shani` holds; every stream has `BLOCKS` blocks.
            unsafe { lanes_of(n + 1, &mut states, [&data[..]; MAX_LANES]) };
            std::hint::black_box(&states);
            *best = best.min(start.elapsed().as_secs_f64() / (n + 1) as f64);
        }
    }
    let fastest = (0..MAX_LANES).min_by(|&a, &b| best[a].total_cmp(&best[b]));
    fastest.map_or(1, |n| n + 1)
}

/// Compresses every stream's blocks into its state, up to [`lanes_per_group`] streams at a
/// time: the longest remaining streams go together, for as many blocks as the shortest.
fn compress_many(work: &mut [([u32; 5], &[Block])]) {
    compress_in_groups(work, lanes_per_group());
}

/// [`compress_many`] with groups of at most `max` (1 to [`MAX_LANES`]) streams.
fn compress_in_groups(work: &mut [([u32; 5], &[Block])], max: usize) {
    let max = max.clamp(1, MAX_LANES);
    #[cfg(target_arch = "x86_64")]
    if shani() {
        loop {
            // The (at most `max`) longest streams with blocks left, longest first.
            let mut group = [usize::MAX; MAX_LANES];
            let mut len = 0;
            for (i, (_, blocks)) in work.iter().enumerate() {
                if blocks.is_empty() {
                    continue;
                }
                let mut at = len.min(max - 1);
                if len == max && work[group[at]].1.len() >= blocks.len() {
                    continue;
                }
                while at > 0 && work[group[at - 1]].1.len() < blocks.len() {
                    group[at] = group[at - 1];
                    at -= 1;
                }
                group[at] = i;
                len = (len + 1).min(max);
            }
            let group = &group[..len];
            let Some(n) = group.iter().map(|&i| work[i].1.len()).min() else {
                return;
            };
            let mut states: [[u32; 5]; MAX_LANES] = [INIT; MAX_LANES];
            let mut blocks: [&[Block]; MAX_LANES] = [&[]; MAX_LANES];
            for (k, &i) in group.iter().enumerate() {
                states[k] = work[i].0;
                blocks[k] = &work[i].1[..n];
            }
            // SAFETY: the CPU has the features `lanes` is compiled for (checked by `shani`),
            // and every stream passed holds `n` blocks.
            unsafe { lanes_of(group.len(), &mut states, blocks) };
            for (k, &i) in group.iter().enumerate() {
                work[i].0 = states[k];
                work[i].1 = &work[i].1[n..];
            }
        }
    }
    for (state, blocks) in work.iter_mut() {
        portable(state, blocks);
        *blocks = &[];
    }
}

/// [`lanes`] over the first `count` (1 to [`MAX_LANES`]) of `states` and `blocks`.
///
/// # Safety
/// As for [`lanes`]: the CPU must support SHA, SSSE3 and SSE4.1, and the first `count`
/// streams of `blocks` must be equally long.
#[cfg(target_arch = "x86_64")]
unsafe fn lanes_of(
    count: usize,
    states: &mut [[u32; 5]; MAX_LANES],
    blocks: [&[Block]; MAX_LANES],
) {
    let [s0, s1, s2, s3] = states;
    let [b0, b1, b2, b3] = blocks;
    // SAFETY: the caller's guarantees, passed on.
    unsafe {
        match count {
            1 => lanes::<1>([s0], [b0]),
            2 => lanes::<2>([s0, s1], [b0, b1]),
            3 => lanes::<3>([s0, s1, s2], [b0, b1, b2]),
            _ => lanes::<4>([s0, s1, s2, s3], [b0, b1, b2, b3]),
        }
    }
}

/// SHA-1 compression of `N` independent streams of equally many blocks with SHA-NI, their
/// rounds interleaved so that one stream's `sha1rnds4` latency is hidden behind the other's.
/// (The round structure is Intel's published SHA-NI sequence: 20 groups of four rounds, the
/// message schedule kept in five registers.)
///
/// # Safety
/// The CPU must support SHA, SSSE3 and SSE4.1; every `blocks[l]` must have the length of
/// `blocks[0]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[allow(clippy::needless_range_loop)] // `l` and `i` index several arrays in lockstep
unsafe fn lanes<const N: usize>(states: [&mut [u32; 5]; N], blocks: [&[Block]; N]) {
    // Reverses the bytes of each 32-bit word: SHA-1 reads its message big-endian.
    let swap = _mm_set_epi64x(0x0001_0203_0405_0607, 0x0809_0A0B_0C0D_0E0F);
    let mut abcd = [_mm_setzero_si128(); N];
    let mut e = [_mm_setzero_si128(); N];
    for l in 0..N {
        // SAFETY: a [u32; 5] holds at least 16 bytes; the load is unaligned.
        let words = unsafe { _mm_loadu_si128(states[l].as_ptr().cast()) };
        abcd[l] = _mm_shuffle_epi32(words, 0b0001_1011);
        e[l] = _mm_set_epi32(states[l][4] as i32, 0, 0, 0);
    }
    for i in 0..blocks[0].len() {
        let mut w = [[_mm_setzero_si128(); 5]; N];
        let mut h0 = abcd;
        let mut h1 = [_mm_setzero_si128(); N];
        for l in 0..N {
            let block: *const __m128i = blocks[l][i].as_ptr().cast();
            for (j, word) in w[l].iter_mut().take(4).enumerate() {
                // SAFETY: a block is 64 bytes: four unaligned 16-byte loads.
                *word = _mm_shuffle_epi8(unsafe { _mm_loadu_si128(block.add(j)) }, swap);
            }
            h1[l] = _mm_sha1rnds4_epu32::<0>(h0[l], _mm_add_epi32(e[l], w[l][0]));
        }
        // Group `k` of four rounds (1..20) with round function `f`; from group 4 on, the next
        // message words are scheduled into the slot of the oldest.
        macro_rules! group {
            ($k:literal, $f:literal) => {
                for l in 0..N {
                    if $k >= 4 {
                        w[l][$k % 5] = _mm_sha1msg2_epu32(
                            _mm_xor_si128(
                                _mm_sha1msg1_epu32(w[l][($k + 1) % 5], w[l][($k + 2) % 5]),
                                w[l][($k + 3) % 5],
                            ),
                            w[l][($k + 4) % 5],
                        );
                    }
                    if $k % 2 == 1 {
                        let x = _mm_sha1nexte_epu32(h0[l], w[l][$k % 5]);
                        h0[l] = _mm_sha1rnds4_epu32::<$f>(h1[l], x);
                    } else {
                        let x = _mm_sha1nexte_epu32(h1[l], w[l][$k % 5]);
                        h1[l] = _mm_sha1rnds4_epu32::<$f>(h0[l], x);
                    }
                }
            };
        }
        group!(1, 0);
        group!(2, 0);
        group!(3, 0);
        group!(4, 0);
        group!(5, 1);
        group!(6, 1);
        group!(7, 1);
        group!(8, 1);
        group!(9, 1);
        group!(10, 2);
        group!(11, 2);
        group!(12, 2);
        group!(13, 2);
        group!(14, 2);
        group!(15, 3);
        group!(16, 3);
        group!(17, 3);
        group!(18, 3);
        group!(19, 3);
        for l in 0..N {
            abcd[l] = _mm_add_epi32(abcd[l], h0[l]);
            e[l] = _mm_sha1nexte_epu32(h1[l], e[l]);
        }
    }
    for l in 0..N {
        let words = _mm_shuffle_epi32(abcd[l], 0b0001_1011);
        // SAFETY: as for the load above.
        unsafe { _mm_storeu_si128(states[l].as_mut_ptr().cast(), words) };
        states[l][4] = _mm_extract_epi32::<3>(e[l]) as u32;
    }
}

/// The textbook SHA-1 compression (FIPS 180-4, 6.1.2), for CPUs without SHA-NI.
fn portable(state: &mut [u32; 5], blocks: &[Block]) {
    for block in blocks {
        let mut w = [0u32; 80];
        for (t, word) in block.chunks_exact(4).enumerate() {
            w[t] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for t in 16..80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = *state;
        for (t, wt) in w.iter().enumerate() {
            let (f, k) = match t {
                0..20 => ((b & c) | (!b & d), 0x5A82_7999),
                20..40 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..60 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wt);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = temp;
        }
        for (s, v) in state.iter_mut().zip([a, b, c, d, e]) {
            *s = s.wrapping_add(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::{Digest, Sha1};

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_mul(131) ^ (i >> 7)) as u8)
            .collect()
    }

    #[test]
    fn known_digests() {
        assert_eq!(
            hex::encode(Summer::new().digest()),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        let mut s = Summer::new();
        s.update(b"foo");
        s.update(b"bar");
        assert_eq!(
            hex::encode(s.digest()),
            "8843d7f92416211de9ebb963ff4ce28125932878"
        );
        // The digest leaves the summer as it was.
        s.update(b"!");
        assert_eq!(s.digest(), <[u8; 20]>::from(Sha1::digest(b"foobar!")));
    }

    /// Every split of lengths around block and padding boundaries, against the `sha1` crate,
    /// for one stream and for pairs out of phase by every amount.
    #[test]
    fn matches_sha1_crate() {
        let d = data(4096 + 300);
        let lens = [
            0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096,
        ];
        for &pre in &[0usize, 1, 13, 55, 63, 64, 65, 100] {
            for &len in &lens {
                let (head, body) = (&d[..pre], &d[pre..pre + len]);
                let mut one = Summer::new();
                one.update(head);
                one.update(body);
                let whole: [u8; 20] = Sha1::digest(&d[..pre + len]).into();
                assert_eq!(one.digest(), whole, "update pre {pre} len {len}");

                let mut a = Summer::new();
                a.update(head);
                let mut b = Summer::new();
                Summer::update_pair(&mut a, &mut b, body);
                assert_eq!(a.digest(), whole, "pair a pre {pre} len {len}");
                let only: [u8; 20] = Sha1::digest(body).into();
                assert_eq!(b.digest(), only, "pair b pre {pre} len {len}");
                assert_eq!((a.len(), b.len()), ((pre + len) as u64, len as u64));
            }
        }
    }

    /// A long run of pairs in uneven pieces, as appends arrive in chunks.
    #[test]
    fn pairs_in_pieces() {
        let d = data(200_000);
        let (mut a, mut b) = (Summer::new(), Summer::new());
        a.update(&d[..37]);
        let mut pos = 37;
        let mut step = 1;
        while pos < d.len() {
            let end = (pos + step).min(d.len());
            Summer::update_pair(&mut a, &mut b, &d[pos..end]);
            pos = end;
            step = step * 7 % 9973 + 1;
        }
        assert_eq!(a.digest(), <[u8; 20]>::from(Sha1::digest(&d)));
        assert_eq!(b.digest(), <[u8; 20]>::from(Sha1::digest(&d[37..])));
    }

    /// Up to six lanes of different lengths and phases at once (more than `MAX_LANES`, so
    /// groups form and re-form as lanes run out), in groups of every size, against the
    /// `sha1` crate.
    #[test]
    fn lanes_of_every_shape() {
        let d = data(70_000);
        let shapes: [&[(usize, usize)]; 5] = [
            &[(0, 0)],
            &[(3, 64), (0, 1000)],
            &[(1, 65), (63, 5000), (0, 0), (64, 128)],
            &[
                (0, 70_000 - 7),
                (5, 640),
                (17, 4096),
                (64, 63),
                (100, 30_000),
            ],
            &[
                (9, 129),
                (10, 129),
                (11, 129),
                (12, 129),
                (13, 129),
                (14, 65_000),
            ],
        ];
        for (n, shape) in shapes.iter().enumerate() {
            for max in 1..=MAX_LANES {
                let mut summers: Vec<Summer> = shape
                    .iter()
                    .map(|&(pre, _)| {
                        let mut s = Summer::new();
                        s.update(&d[..pre]);
                        s
                    })
                    .collect();
                {
                    let mut lanes: Vec<(&mut Summer, &[u8])> = summers
                        .iter_mut()
                        .zip(shape.iter())
                        .map(|(s, &(pre, len))| (s, &d[pre..pre + len]))
                        .collect();
                    Summer::update_lanes_in_groups(&mut lanes, max);
                }
                for (s, &(pre, len)) in summers.iter().zip(shape.iter()) {
                    let want: [u8; 20] = Sha1::digest(&d[..pre + len]).into();
                    assert_eq!(
                        s.digest(),
                        want,
                        "shape {n}, {max} lanes, lane ({pre}, {len})"
                    );
                    assert_eq!(s.len(), (pre + len) as u64);
                }
            }
        }
        assert!((1..=MAX_LANES).contains(&lanes_per_group()));
    }

    /// The portable compression agrees with the SHA-NI one (which the other tests use on
    /// machines that have it).
    #[test]
    fn portable_matches() {
        let d = data(64 * 9);
        let (blocks, _) = d.as_chunks::<64>();
        let mut x = INIT;
        portable(&mut x, blocks);
        let mut y = INIT;
        compress(&mut y, blocks);
        assert_eq!(x, y);
        let mut s = Summer::new();
        s.update(&d);
        let mut p = INIT;
        portable(&mut p, blocks);
        assert_eq!(s.state, p);
    }
}
