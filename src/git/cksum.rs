//! POSIX `cksum` (the CRC the shell loop's `git status --porcelain | cksum` prints).

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC_TABLE: [u32; 256] = crc_table();

fn crc_update(crc: u32, byte: u8) -> u32 {
    (crc << 8) ^ CRC_TABLE[(((crc >> 24) as u8) ^ byte) as usize]
}

/// What POSIX `cksum` prints for `bytes`, without the trailing newline: `"{crc} {len}"`.
pub(crate) fn cksum(bytes: &[u8]) -> String {
    let mut crc = bytes.iter().fold(0u32, |crc, &b| crc_update(crc, b));
    let mut len = bytes.len() as u64;
    while len != 0 {
        crc = crc_update(crc, (len & 0xff) as u8);
        len >>= 8;
    }
    format!("{} {}", !crc, bytes.len())
}
