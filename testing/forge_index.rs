//! `forge-index:PATH` for the fake agent: the git index rewritten by hand, as a hostile agent
//! could, with PATH's entry dropped and everything else kept byte for byte — the untracked
//! cache (`UNTR`) included, which still says PATH's directory holds no untracked file — but the
//! caches that would give the forgery away to git (the tree cache `TREE`, the monitor's `FSMN`,
//! whose bitmap counts entries) left out. Index versions 2 and 3 (git's default is 2).

use std::path::Path;

/// Rewrite `index` without the entry `path`; `Err` says why it could not.
pub(crate) fn forge(index: &Path, path: &[u8]) -> Result<(), String> {
    let data = std::fs::read(index).map_err(|e| format!("read {}: {e}", index.display()))?;
    let body = data
        .get(..data.len().saturating_sub(20))
        .ok_or("too short")?;
    if body.len() < 12 || &body[..4] != b"DIRC" {
        return Err("not an index".into());
    }
    let version = be32(&body[4..8]);
    if version != 2 && version != 3 {
        return Err(format!("index version {version}"));
    }
    let count = be32(&body[8..12]) as usize;
    let mut at = 12;
    let mut kept = Vec::new();
    let mut n = 0u32;
    for _ in 0..count {
        let flags = u16::from_be_bytes([body[at + 60], body[at + 61]]);
        let name_at = at
            + 62
            + if version == 3 && flags & 0x4000 != 0 {
                2
            } else {
                0
            };
        let end = name_at
            + body[name_at..]
                .iter()
                .position(|&b| b == 0)
                .ok_or("unterminated name")?;
        // Entries are padded with NULs to a multiple of 8 bytes (at least one).
        let len = (end - at + 8) & !7;
        if &body[name_at..end] != path {
            kept.extend_from_slice(&body[at..at + len]);
            n += 1;
        }
        at += len;
    }
    if n as usize == count {
        return Err("no such entry".into());
    }
    let mut out = Vec::with_capacity(data.len());
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&kept);
    while at + 8 <= body.len() {
        let size = be32(&body[at + 4..at + 8]) as usize;
        let ext = &body[at..at + 8 + size];
        if !matches!(&ext[..4], b"TREE" | b"FSMN") {
            out.extend_from_slice(ext);
        }
        at += 8 + size;
    }
    let digest = sha1(&out);
    out.extend_from_slice(&digest);
    let tmp = index.with_extension("forged");
    std::fs::write(&tmp, &out).map_err(|e| format!("write: {e}"))?;
    std::fs::rename(&tmp, index).map_err(|e| format!("rename: {e}"))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// SHA-1 (FIPS 180-4): the index's trailer.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = be32(word);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}
