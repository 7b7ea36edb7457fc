//! MD5 (RFC 1321), which the Blob service computes for what it is sent: a
//! request's `Content-MD5` is checked against its body, and a blob put in one
//! request keeps the hash of its bytes. Not a security measure (MD5 is
//! broken as one): an integrity check, as the service uses it.

const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// `floor(abs(sin(i + 1)) * 2^32)`, as RFC 1321 tabulates it.
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

fn block(state: &mut [u32; 4], chunk: &[u8]) {
    let mut m = [0u32; 16];
    for (w, bytes) in m.iter_mut().zip(chunk.chunks_exact(4)) {
        *w = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    // The 64 steps unrolled, each one's function, constants and word index
    // fixed: twice as fast in a debug build, where tests hash 256 MiB.
    macro_rules! step {
        ($f:expr, $i:expr, $g:expr) => {{
            let rotated = a
                .wrapping_add($f)
                .wrapping_add(K[$i])
                .wrapping_add(m[$g])
                .rotate_left(S[$i]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(rotated);
        }};
    }
    #[inline(always)]
    fn f1(b: u32, c: u32, d: u32) -> u32 {
        (b & c) | (!b & d)
    }
    #[inline(always)]
    fn f2(b: u32, c: u32, d: u32) -> u32 {
        (d & b) | (!d & c)
    }
    #[inline(always)]
    fn f3(b: u32, c: u32, d: u32) -> u32 {
        b ^ c ^ d
    }
    #[inline(always)]
    fn f4(b: u32, c: u32, d: u32) -> u32 {
        c ^ (b | !d)
    }
    step!(f1(b, c, d), 0, 0);
    step!(f1(b, c, d), 1, 1);
    step!(f1(b, c, d), 2, 2);
    step!(f1(b, c, d), 3, 3);
    step!(f1(b, c, d), 4, 4);
    step!(f1(b, c, d), 5, 5);
    step!(f1(b, c, d), 6, 6);
    step!(f1(b, c, d), 7, 7);
    step!(f1(b, c, d), 8, 8);
    step!(f1(b, c, d), 9, 9);
    step!(f1(b, c, d), 10, 10);
    step!(f1(b, c, d), 11, 11);
    step!(f1(b, c, d), 12, 12);
    step!(f1(b, c, d), 13, 13);
    step!(f1(b, c, d), 14, 14);
    step!(f1(b, c, d), 15, 15);
    step!(f2(b, c, d), 16, 1);
    step!(f2(b, c, d), 17, 6);
    step!(f2(b, c, d), 18, 11);
    step!(f2(b, c, d), 19, 0);
    step!(f2(b, c, d), 20, 5);
    step!(f2(b, c, d), 21, 10);
    step!(f2(b, c, d), 22, 15);
    step!(f2(b, c, d), 23, 4);
    step!(f2(b, c, d), 24, 9);
    step!(f2(b, c, d), 25, 14);
    step!(f2(b, c, d), 26, 3);
    step!(f2(b, c, d), 27, 8);
    step!(f2(b, c, d), 28, 13);
    step!(f2(b, c, d), 29, 2);
    step!(f2(b, c, d), 30, 7);
    step!(f2(b, c, d), 31, 12);
    step!(f3(b, c, d), 32, 5);
    step!(f3(b, c, d), 33, 8);
    step!(f3(b, c, d), 34, 11);
    step!(f3(b, c, d), 35, 14);
    step!(f3(b, c, d), 36, 1);
    step!(f3(b, c, d), 37, 4);
    step!(f3(b, c, d), 38, 7);
    step!(f3(b, c, d), 39, 10);
    step!(f3(b, c, d), 40, 13);
    step!(f3(b, c, d), 41, 0);
    step!(f3(b, c, d), 42, 3);
    step!(f3(b, c, d), 43, 6);
    step!(f3(b, c, d), 44, 9);
    step!(f3(b, c, d), 45, 12);
    step!(f3(b, c, d), 46, 15);
    step!(f3(b, c, d), 47, 2);
    step!(f4(b, c, d), 48, 0);
    step!(f4(b, c, d), 49, 7);
    step!(f4(b, c, d), 50, 14);
    step!(f4(b, c, d), 51, 5);
    step!(f4(b, c, d), 52, 12);
    step!(f4(b, c, d), 53, 3);
    step!(f4(b, c, d), 54, 10);
    step!(f4(b, c, d), 55, 1);
    step!(f4(b, c, d), 56, 8);
    step!(f4(b, c, d), 57, 15);
    step!(f4(b, c, d), 58, 6);
    step!(f4(b, c, d), 59, 13);
    step!(f4(b, c, d), 60, 4);
    step!(f4(b, c, d), 61, 11);
    step!(f4(b, c, d), 62, 2);
    step!(f4(b, c, d), 63, 9);
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The MD5 hash of `data`.
pub(crate) fn md5(data: &[u8]) -> [u8; 16] {
    let mut state: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut chunks = data.chunks_exact(64);
    for chunk in chunks.by_ref() {
        block(&mut state, chunk);
    }
    // The tail, a 1 bit, zeros, and the length in bits: one or two blocks.
    let rest = chunks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let len = if rest.len() < 56 { 64 } else { 128 };
    let bits = (data.len() as u64).wrapping_mul(8);
    tail[len - 8..len].copy_from_slice(&bits.to_le_bytes());
    for chunk in tail[..len].chunks_exact(64) {
        block(&mut state, chunk);
    }
    let mut out = [0u8; 16];
    for (i, word) in state.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::md5;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_rfc_1321_test_suite() {
        for (input, want) in [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ] {
            assert_eq!(hex(md5(input.as_bytes())), want, "{input:?}");
        }
    }

    #[test]
    fn tails_of_every_length_around_a_block_hash_as_a_whole() {
        // 55, 56 and 64 bytes: the padding takes one block, two, one more.
        assert_eq!(hex(md5(&[b'a'; 55])), "ef1772b6dff9a122358552954ad0df65");
        assert_eq!(hex(md5(&[b'a'; 56])), "3b0c8ac703f828b04c6c197006d17218");
        assert_eq!(hex(md5(&[b'a'; 64])), "014842d480b571495a4a0363793f7367");
    }
}
