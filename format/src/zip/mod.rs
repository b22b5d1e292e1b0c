//! ZIP (PKWARE APPNOTE 6.3): the records packfs writes and reads, each
//! encoded and decoded side by side, with the constants they use.
//!
//! ```text
//! [local header][name][extra][data]   once per member, in archive order
//! [central record][name][extra][comment]   once per member
//! [Zip64 end record][Zip64 locator]   only when a count, size or offset overflows
//! [end of central directory][comment]
//! ```
//!
//! | module | records |
//! |---|---|
//! | [`local`] | [`local::LocalHeader`] |
//! | [`central`] | [`central::CentralHeader`] |
//! | [`entry`] | [`entry::CentralEntry`]: a central record with its extra fields applied |
//! | [`extra`] | extra fields: Zip64, extended timestamp, Info-ZIP Unix, Unicode Path |
//! | [`end`] | end of central directory, Zip64 end record and locator |
//! | [`time`] | DOS date and time |
//! | [`unzip`] | what extraction makes of the records: end records located, names, types, times, member decoders |

pub mod central;
pub mod end;
pub mod entry;
pub mod extra;
pub mod local;
pub mod time;
pub mod unzip;

pub const SIG_LOCAL: u32 = 0x0403_4b50;
pub const SIG_CENTRAL: u32 = 0x0201_4b50;
pub const SIG_EOCD: u32 = 0x0605_4b50;
pub const SIG_EOCD64: u32 = 0x0606_4b50;
pub const SIG_EOCD64_LOCATOR: u32 = 0x0706_4b50;

/// Fixed sizes of the records, without their variable-length tails.
pub const LOCAL_LEN: usize = 30;
pub const CENTRAL_LEN: usize = 46;
pub const EOCD_LEN: usize = 22;
pub const EOCD64_LEN: usize = 56;
pub const EOCD64_LOCATOR_LEN: usize = 20;
/// The EOCD is at most this far from the end: 22 bytes plus a 65535-byte comment.
pub const EOCD_SEARCH: u64 = EOCD_LEN as u64 + 0xFFFF;

/// General-purpose flag bits.
pub const FLAG_ENCRYPTED: u16 = 1 << 0;
/// LZMA members: the stream ends with an end-of-stream marker.
pub const FLAG_LZMA_EOS: u16 = 1 << 1;
/// Sizes and CRC follow the data in a data descriptor.
pub const FLAG_DESCRIPTOR: u16 = 1 << 3;
pub const FLAG_STRONG_ENCRYPTION: u16 = 1 << 6;
/// Name (and comment) are UTF-8.
pub const FLAG_UTF8: u16 = 1 << 11;

/// Host systems (high byte of "version made by").
pub const HOST_UNIX: u8 = 3;
pub const HOST_OSX: u8 = 19;
/// Version made by: Unix (3) in the high byte, APPNOTE 6.3 in the low byte.
pub const VERSION_MADE_BY: u16 = ((HOST_UNIX as u16) << 8) | 63;

/// 32-bit fields at or above this value are stored as 0xFFFFFFFF with the
/// real value in the Zip64 extra (0xFFFFFFFF itself is the sentinel).
pub const MAX32: u64 = 0xFFFF_FFFF;
/// Entry counts at or above this go to the Zip64 end record (0xFFFF is the
/// sentinel that sends readers there).
pub const MAX16: u64 = 0xFFFF;

/// MS-DOS directory attribute (low byte of the external attributes).
pub const DOS_DIR: u32 = 0x10;

/// Compression methods.
pub const METHOD_STORED: u16 = 0;
pub const METHOD_DEFLATE: u16 = 8;
pub const METHOD_DEFLATE64: u16 = 9;
pub const METHOD_BZIP2: u16 = 12;
pub const METHOD_LZMA: u16 = 14;
/// zstd as APPNOTE 6.3.8 numbers it; some writers used 20 before.
pub const METHOD_ZSTD: u16 = 93;
pub const METHOD_ZSTD_OLD: u16 = 20;
pub const METHOD_XZ: u16 = 95;
pub const METHOD_AES: u16 = 99;

pub fn method_name(m: u16) -> &'static str {
    match m {
        METHOD_STORED => "stored",
        1 => "shrink",
        2..=5 => "reduce",
        6 => "implode",
        METHOD_DEFLATE => "deflate",
        METHOD_DEFLATE64 => "deflate64",
        METHOD_BZIP2 => "bzip2",
        METHOD_LZMA => "lzma",
        METHOD_ZSTD | METHOD_ZSTD_OLD => "zstd",
        METHOD_XZ => "xz",
        96 => "jpeg",
        97 => "wavpack",
        98 => "ppmd",
        METHOD_AES => "aes",
        _ => "unknown",
    }
}
