//! Archives in object storage (`s3://BUCKET/KEY`) or on a web server
//! (`http(s)://HOST/PATH`), read where they are: no copy on local disk.
//!
//! A tar (compressed or not) is read front to back as a stream
//! ([`packfs_objstore::ObjectReader`]: ranged GETs of the version pinned
//! at open, the next chunks fetched while the current one is decoded). A
//! ZIP, whose table of contents is at its end, is read by ranges
//! ([`RemoteZip`]): its members are read in archive order, so the aligned
//! chunk it keeps serves most reads and each byte is fetched about once.

use super::zip::RandomAccess;
use crate::PackError;
use bytes::Bytes;
use packfs_objstore::{ClientOptions, ObjectReader, ReaderOptions, Remote, Target, Version};
use std::io;
use std::sync::{Arc, Mutex};

/// Bytes fetched per range of a ZIP (aligned to this size).
const ZIP_CHUNK: u64 = 8 << 20;

/// An archive in object storage, its version pinned and its first bytes
/// read (to tell a ZIP from a tar).
pub struct RemoteArchive {
    remote: Remote,
    version: Version,
    head: Vec<u8>,
}

impl RemoteArchive {
    /// Connects, pins the object (a HEAD: a wrong URL, bucket or
    /// credentials fail here, before anything is packed) and reads its
    /// first bytes.
    pub fn open(url: &str, client: &ClientOptions) -> Result<RemoteArchive, PackError> {
        let remote = Remote::connect(&Target::parse(url)?, client)?;
        let version = remote.head()?;
        let n = version.len.min(4);
        let head = match n {
            0 => Vec::new(),
            n => get(&remote, &version, 0, n)?.to_vec(),
        };
        Ok(RemoteArchive {
            remote,
            version,
            head,
        })
    }

    /// The object's size in bytes.
    pub fn size(&self) -> u64 {
        self.version.len
    }

    /// The object's first bytes (up to 4).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The object as a stream, from its first byte.
    pub fn into_stream(self) -> Result<ObjectReader, PackError> {
        Ok(ObjectReader::new(self.remote, ReaderOptions::default())?)
    }

    /// The object read by ranges, for a ZIP.
    pub fn into_zip(self) -> RemoteZip {
        RemoteZip {
            remote: self.remote,
            version: self.version,
            chunk: Mutex::new(None),
        }
    }
}

fn get(remote: &Remote, version: &Version, start: u64, end: u64) -> Result<Bytes, PackError> {
    let limit = remote.opts.timeout;
    Ok(remote.block_on("", remote.get_range(version, start..end, limit))?)
}

/// A ZIP in object storage, read by aligned chunks of [`ZIP_CHUNK`] bytes;
/// the last one fetched is kept.
pub struct RemoteZip {
    remote: Remote,
    version: Version,
    chunk: Mutex<Option<(u64, Arc<Bytes>)>>,
}

impl RemoteZip {
    /// The chunk starting at `start` (aligned), fetched unless it is the
    /// one kept.
    fn chunk(&self, start: u64) -> io::Result<Arc<Bytes>> {
        let mut kept = self.chunk.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, b)) = kept.as_ref() {
            if *at == start {
                return Ok(b.clone());
            }
        }
        let end = (start + ZIP_CHUNK).min(self.version.len);
        let b = Arc::new(
            get(&self.remote, &self.version, start, end)
                .map_err(|e| io::Error::other(e.to_string()))?,
        );
        *kept = Some((start, b.clone()));
        Ok(b)
    }
}

impl RandomAccess for RemoteZip {
    fn size(&self) -> u64 {
        self.version.len
    }

    fn read_exact_at(&self, mut buf: &mut [u8], mut at: u64) -> io::Result<()> {
        if at
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.version.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} bytes at {at}: past the end of the object", buf.len()),
            ));
        }
        while !buf.is_empty() {
            let start = at / ZIP_CHUNK * ZIP_CHUNK;
            let c = self.chunk(start)?;
            let from = (at - start) as usize;
            let n = buf.len().min(c.len() - from);
            buf[..n].copy_from_slice(&c[from..from + n]);
            buf = &mut buf[n..];
            at += n as u64;
        }
        Ok(())
    }
}
