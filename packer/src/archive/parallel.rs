//! Decoding a compressed stream's independent frames on several threads,
//! for the formats whose frames can be found without decompressing them
//! (zstd frames, BGZF blocks: see `decompress`).
//!
//! # Design note
//!
//! The archive is read by one thread, which also parses the tar: a
//! sequential decoder there caps the pack at one core's decoding speed.
//! Here that thread only cuts the stream: it reads whole frames (their
//! headers tell their lengths) into jobs of about [`Limits::job_bytes`]
//! compressed bytes, hands each job to a thread of its own, and gives the
//! jobs' output back in stream order. Workers see bytes in memory only:
//! every read of the input stays on the reading thread, so an I/O error
//! of the archive surfaces as itself (and sets `Counted::failed`), after
//! the output of the frames before it.
//!
//! Memory: at most `threads` jobs are decoding or decoded and waiting,
//! plus the one whose output is being read: `threads + 1` jobs, each at
//! most `job_bytes + frame_bytes` compressed and [`Limits::job_out`]
//! decoded (workers decode into the output: no window buffer besides).
//! With the defaults and [`super::decompress::MAX_DECODE_THREADS`], at
//! most 9 × 50 MiB; typically (`pzstd`'s frames of 8 MiB, 2-3 MiB
//! compressed) 9 × 11 MiB. A frame that
//! would break the bound is not buffered: one longer than `frame_bytes`,
//! or declaring (or needing a window of) more than `job_out`, ends the
//! cutting, and it and the rest of the stream go to the sequential
//! decoder. A stream of one large frame (`zstd -T0`) thus costs its first
//! header.
//!
//! Fallback: the cutter reads only lengths; each worker decodes its job
//! with the sequential decoder's library and keeps its output only if
//! that parsed the job as whole frames. So a job given back (damaged, or
//! decoding to more than `job_out` when its frames do not declare their
//! size), and anything the cutter does not understand (another format,
//! a dictionary's frame, a truncation), end the cutting too: the
//! sequential decoder reads the stream from the first byte of that job
//! or frame (the jobs after it are still in memory), and its output and
//! errors are the ones reading the whole stream with it gives.

use std::collections::VecDeque;
use std::io::{self, BufRead, Cursor, Read};
use std::sync::Arc;
use std::thread::JoinHandle;

/// What bounds a job.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// A job is closed once it holds this many compressed bytes.
    pub job_bytes: usize,
    /// The longest frame, compressed, that is buffered whole.
    pub frame_bytes: usize,
    /// The most a job may decode to (and a frame's window).
    pub job_out: u64,
}

impl Limits {
    /// A few MiB per job: large enough that a thread per job costs
    /// nothing next to its decoding, small enough to keep several out.
    /// `job_out` admits `pzstd`'s frames up to level 19 (32 MiB of output;
    /// 2 MiB at level 1, 8 MiB at 3) and their windows.
    pub const DEFAULT: Limits = Limits {
        job_bytes: 2 << 20,
        frame_bytes: 16 << 20,
        job_out: 32 << 20,
    };
}

/// What a cutter reading one frame found.
pub(crate) enum Frame {
    /// A whole frame, appended to the job; its output size if declared.
    Whole { out: Option<u64> },
    /// A frame without output (zstd's skippable frames), not appended.
    Skipped,
    /// The stream's clean end: no byte of another frame.
    End,
    /// A frame whose declared output does not fit what the job has left:
    /// it starts the next job.
    Later,
    /// A frame not to be cut (see the design note): it and the rest of
    /// the stream go to the sequential decoder.
    Rest,
}

/// Room a job has left for the frame being read.
#[derive(Clone, Copy)]
pub(crate) struct Room {
    /// Output not yet declared by the job's frames.
    pub out: u64,
    pub limits: Limits,
}

/// Reads one frame from `src`, appending its bytes to `job`.
pub(crate) type FrameReader = for<'s> fn(&mut Src<'s>, &mut Vec<u8>, Room) -> io::Result<Frame>;

/// The stream being cut: bytes put back first, then the input.
pub(crate) struct Src<'a> {
    input: Box<dyn BufRead + Send + 'a>,
    /// Bytes read but not used yet (a frame left for the next job, or for
    /// the sequential decoder).
    back: Vec<u8>,
    pos: usize,
}

impl<'a> Src<'a> {
    fn new(input: Box<dyn BufRead + Send + 'a>) -> Self {
        Src {
            input,
            back: Vec::new(),
            pos: 0,
        }
    }

    /// Appends the next `n` bytes to `into`; how many there were (fewer
    /// only at the end of the stream).
    pub fn take(&mut self, n: usize, into: &mut Vec<u8>) -> io::Result<usize> {
        let from_back = n.min(self.back.len() - self.pos);
        into.extend_from_slice(&self.back[self.pos..self.pos + from_back]);
        self.pos += from_back;
        if self.pos == self.back.len() {
            self.back = Vec::new();
            self.pos = 0;
        }
        let want = n - from_back;
        into.reserve(want);
        // read_to_end retries interrupted reads.
        let got = (&mut self.input).take(want as u64).read_to_end(into)?;
        Ok(from_back + got)
    }

    /// Appends a frame's first `n` bytes, or says why there are none:
    /// the stream's clean end, or one within them.
    pub fn head(&mut self, n: usize, into: &mut Vec<u8>) -> io::Result<Option<Frame>> {
        Ok(match self.take(n, into)? {
            0 => Some(Frame::End),
            got if got < n => Some(Frame::Rest),
            _ => None,
        })
    }

    /// Drops the next `n` bytes; how many there were.
    pub fn skip(&mut self, n: u64) -> io::Result<u64> {
        let from_back = n.min((self.back.len() - self.pos) as u64);
        self.pos += from_back as usize;
        let got = io::copy(&mut (&mut self.input).take(n - from_back), &mut io::sink())?;
        Ok(from_back + got)
    }

    /// Puts `bytes`, the ones last taken, back in front of the stream.
    fn unread(&mut self, mut bytes: Vec<u8>) {
        bytes.extend_from_slice(&self.back[self.pos..]);
        self.back = bytes;
        self.pos = 0;
    }

    /// The rest of the stream.
    fn rest(self) -> Box<dyn BufRead + Send + 'a> {
        let mut back = Cursor::new(self.back);
        back.set_position(self.pos as u64);
        Box::new(back.chain(self.input))
    }
}

/// Frames of the input as they were cut.
pub(crate) struct Job {
    pub data: Vec<u8>,
    pub frames: usize,
    /// The output's size, if every frame declared its own.
    pub out: Option<u64>,
}

/// Why the cutting stopped.
enum Stop {
    End,
    Rest,
    Err(io::Error),
}

/// Cuts a stream into jobs of whole frames.
pub(crate) struct Cutter<'a> {
    src: Src<'a>,
    frame: FrameReader,
    limits: Limits,
    /// Set when the last job was closed by the end of the cutting.
    stop: Option<Stop>,
}

impl<'a> Cutter<'a> {
    pub fn new(input: Box<dyn BufRead + Send + 'a>, frame: FrameReader, limits: Limits) -> Self {
        Cutter {
            src: Src::new(input),
            frame,
            limits,
            stop: None,
        }
    }

    /// The next job; `None` once the cutting has stopped (see
    /// [`Cutter::tail`]).
    fn next(&mut self) -> Option<Job> {
        if self.stop.is_some() {
            return None;
        }
        let mut job = Job {
            data: Vec::new(),
            frames: 0,
            out: Some(0),
        };
        let mut declared = 0u64;
        let stop = loop {
            let start = job.data.len();
            let room = Room {
                out: self.limits.job_out - declared,
                limits: self.limits,
            };
            match (self.frame)(&mut self.src, &mut job.data, room) {
                Ok(Frame::Whole { out }) => {
                    job.frames += 1;
                    declared += out.unwrap_or(0);
                    job.out = job.out.zip(out).map(|(a, b)| a + b);
                    if job.data.len() >= self.limits.job_bytes {
                        return Some(job);
                    }
                }
                Ok(Frame::Skipped) => {}
                Ok(Frame::Later) if job.frames > 0 => {
                    self.src.unread(job.data.split_off(start));
                    return Some(job);
                }
                // A frame that fits no job: the frame readers never say
                // so, but the sequential decoder takes it if they did.
                Ok(Frame::Later | Frame::Rest) => {
                    self.src.unread(job.data.split_off(start));
                    break Stop::Rest;
                }
                Ok(Frame::End) => break Stop::End,
                // Whole frames before the input's error are decoded.
                Err(e) => {
                    job.data.truncate(start);
                    break Stop::Err(e);
                }
            }
        };
        self.stop = Some(stop);
        (job.frames > 0).then_some(job)
    }

    /// What follows the last job.
    fn tail(self) -> Tail<'a> {
        match self.stop {
            Some(Stop::End) => Tail::End,
            Some(Stop::Err(e)) => Tail::Err(e),
            Some(Stop::Rest) | None => Tail::Rest(self.src.rest()),
        }
    }
}

enum Tail<'a> {
    End,
    Err(io::Error),
    Rest(Box<dyn BufRead + Send + 'a>),
}

/// Decodes a job's bytes, given their output size if declared: `None`
/// if they are not whole frames, or decode to more than a job may hold.
pub(crate) type DecodeJob = Arc<dyn Fn(&[u8], Option<u64>) -> Option<Vec<u8>> + Send + Sync>;

/// The sequential decoder over some of the stream's bytes.
pub(crate) type Sequential<'a> =
    Box<dyn Fn(Box<dyn BufRead + Send + 'a>) -> io::Result<Box<dyn Read + Send + 'a>> + Send + 'a>;

/// How a format's jobs are decoded.
pub(crate) struct Codec<'a> {
    /// The workers' name.
    pub name: &'static str,
    pub decode: DecodeJob,
    pub sequential: Sequential<'a>,
}

/// A job's bytes, shared with its worker: kept until its output is taken,
/// for the sequential decoder to read again if the worker gives it back.
#[derive(Clone)]
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

enum Pending {
    Thread(JoinHandle<Option<Vec<u8>>>),
    /// Decoded on the reading thread (no thread could be started).
    Ready(Option<Vec<u8>>),
}

/// A job handed out.
struct InFlight {
    data: Shared,
    pending: Pending,
}

enum Out<'a> {
    None,
    Bytes(Vec<u8>, usize),
    Stream(Box<dyn Read + Send + 'a>),
}

/// What follows the last job.
enum After<'a> {
    /// The rest of the stream, for the sequential decoder.
    Rest(Box<dyn BufRead + Send + 'a>),
    /// The input's error.
    Err(io::Error),
    /// The error already returned, for later reads (io::Error is not
    /// Clone).
    Failed(io::ErrorKind, String),
}

/// What a decoder did, for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Jobs handed to workers.
    pub jobs: usize,
    /// The most jobs handed out and not yet taken back at once.
    pub most_in_flight: usize,
    /// Whether the sequential decoder read the stream's end: from a job
    /// given back, or a frame not cut.
    pub sequential: bool,
}

/// The decoded stream, read in order.
pub(crate) struct Parallel<'a> {
    cutter: Option<Cutter<'a>>,
    codec: Codec<'a>,
    threads: usize,
    queue: VecDeque<InFlight>,
    out: Out<'a>,
    after: Option<After<'a>>,
    stats: Stats,
}

impl<'a> Parallel<'a> {
    /// Decodes what `cutter` cuts with `codec`, on `threads` (at least 1)
    /// workers.
    pub fn new(cutter: Cutter<'a>, codec: Codec<'a>, threads: usize) -> Self {
        Parallel {
            cutter: Some(cutter),
            codec,
            threads: threads.max(1),
            queue: VecDeque::new(),
            out: Out::None,
            after: None,
            stats: Stats::default(),
        }
    }

    #[cfg(test)]
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Hands out jobs until `threads` are out or the cutting stops.
    fn dispatch(&mut self) {
        while self.queue.len() < self.threads {
            let Some(cutter) = &mut self.cutter else {
                return;
            };
            match cutter.next() {
                Some(job) => self.spawn(job),
                None => self.stop_cutting(),
            }
        }
    }

    /// Ends the cutting: what is left of the stream follows the jobs out.
    fn stop_cutting(&mut self) {
        if let Some(cutter) = self.cutter.take() {
            self.after = match cutter.tail() {
                Tail::End => None,
                Tail::Err(e) => Some(After::Err(e)),
                Tail::Rest(r) => Some(After::Rest(r)),
            };
        }
    }

    fn spawn(&mut self, job: Job) {
        let data = Shared(Arc::new(job.data));
        let (theirs, decode, out) = (data.clone(), self.codec.decode.clone(), job.out);
        let pending = match std::thread::Builder::new()
            .name(self.codec.name.into())
            .spawn(move || decode(theirs.as_ref(), out))
        {
            Ok(h) => Pending::Thread(h),
            // Out of threads: decoded here, in order, as sequentially.
            Err(_) => Pending::Ready((self.codec.decode)(data.as_ref(), out)),
        };
        self.queue.push_back(InFlight { data, pending });
        self.stats.jobs += 1;
        self.stats.most_in_flight = self.stats.most_in_flight.max(self.queue.len());
    }

    /// The sequential decoder from the first byte of `first`, a job given
    /// back, to the stream's end (the jobs after it are not waited for).
    fn fall_back(&mut self, first: Shared) -> io::Result<()> {
        self.stop_cutting();
        let mut raw: Box<dyn BufRead + Send + 'a> = Box::new(Cursor::new(first));
        for job in self.queue.drain(..) {
            raw = Box::new(raw.chain(Cursor::new(job.data)));
        }
        match self.after.take() {
            Some(After::Rest(r)) => raw = Box::new(raw.chain(r)),
            Some(After::Err(e)) => raw = Box::new(raw.chain(FailWith(Some(e)))),
            Some(After::Failed(..)) | None => {}
        }
        self.stats.sequential = true;
        self.out = Out::Stream((self.codec.sequential)(raw)?);
        Ok(())
    }

    /// Makes the next output current; `false` at the stream's end.
    fn next_out(&mut self) -> io::Result<bool> {
        self.dispatch();
        if let Some(InFlight { data, pending }) = self.queue.pop_front() {
            let decoded = match pending {
                Pending::Thread(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Pending::Ready(d) => d,
            };
            match decoded {
                Some(v) => {
                    self.out = Out::Bytes(v, 0);
                    // The workers go on while this output is read.
                    self.dispatch();
                }
                None => self.fall_back(data)?,
            }
            return Ok(true);
        }
        match self.after.take() {
            Some(After::Rest(r)) => {
                self.stats.sequential = true;
                self.out = Out::Stream((self.codec.sequential)(r)?);
                Ok(true)
            }
            Some(After::Err(e)) => {
                self.after = Some(After::Failed(e.kind(), e.to_string()));
                Err(e)
            }
            Some(After::Failed(kind, message)) => {
                let e = io::Error::new(kind, message.clone());
                self.after = Some(After::Failed(kind, message));
                Err(e)
            }
            None => Ok(false),
        }
    }
}

impl Read for Parallel<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match &mut self.out {
                Out::Bytes(v, pos) if *pos < v.len() => {
                    let n = buf.len().min(v.len() - *pos);
                    buf[..n].copy_from_slice(&v[*pos..*pos + n]);
                    *pos += n;
                    return Ok(n);
                }
                Out::Stream(r) => {
                    let n = r.read(buf)?;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                _ => {}
            }
            self.out = Out::None;
            if !self.next_out()? {
                return Ok(0);
            }
        }
    }
}

/// The input's error, where the sequential decoder reaches it.
struct FailWith(Option<io::Error>);

impl Read for FailWith {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        self.fill_buf().map(|_| 0)
    }
}

impl BufRead for FailWith {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Err(self
            .0
            .take()
            .unwrap_or_else(|| io::Error::other("the archive's read failed")))
    }

    fn consume(&mut self, _: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// A frame of the test format: a 4-byte length, then as many bytes,
    /// which decode to themselves.
    fn toy_frame(src: &mut Src, job: &mut Vec<u8>, _: Room) -> io::Result<Frame> {
        let start = job.len();
        if let Some(f) = src.head(4, job)? {
            return Ok(f);
        }
        let n = u32::from_le_bytes(job[start..].try_into().unwrap()) as usize;
        if src.take(n, job)? < n {
            return Ok(Frame::Rest);
        }
        Ok(Frame::Whole { out: None })
    }

    /// The payloads of the test format's frames in `data`.
    fn payloads(mut data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while data.len() >= 4 {
            let n = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
            if data.len() < 4 + n {
                break;
            }
            out.extend_from_slice(&data[4..4 + n]);
            data = &data[4 + n..];
        }
        out
    }

    fn toy_stream(parts: &[&[u8]]) -> Vec<u8> {
        parts
            .iter()
            .flat_map(|p| [&(p.len() as u32).to_le_bytes()[..], p].concat())
            .collect()
    }

    /// The test format over `data`, a job per frame, each decoded by
    /// `decode` on its own thread.
    fn toy<'a>(data: &'a [u8], threads: usize, decode: DecodeJob) -> Parallel<'a> {
        let limits = Limits {
            job_bytes: 1,
            ..Limits::DEFAULT
        };
        let codec = Codec {
            name: "packfs-test",
            decode,
            sequential: Box::new(|mut r| {
                let mut all = Vec::new();
                r.read_to_end(&mut all)?;
                Ok(Box::new(Cursor::new(payloads(&all))))
            }),
        };
        Parallel::new(
            Cutter::new(Box::new(data), toy_frame, limits),
            codec,
            threads,
        )
    }

    /// What the workers saw: `running` now, the most at once, the order
    /// jobs finished in (by first byte), the threads they ran on.
    #[derive(Default)]
    struct Seen {
        running: usize,
        most: usize,
        finished: Vec<u8>,
        threads: std::collections::HashSet<std::thread::ThreadId>,
    }

    /// Waits (a minute at most, so that a broken decoder fails instead of
    /// hanging) until `done` holds of what was seen.
    fn wait_until(at: &(Mutex<Seen>, Condvar), done: impl Fn(&Seen) -> bool) {
        let (m, cv) = at;
        let seen = m.lock().unwrap();
        let _ = cv
            .wait_timeout_while(seen, Duration::from_secs(60), |s| !done(s))
            .unwrap();
    }

    #[test]
    fn the_output_keeps_the_streams_order_when_jobs_finish_out_of_order() {
        let parts: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 1000 + usize::from(i)]).collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let data = toy_stream(&refs);
        let at = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let seen = at.clone();
        // Of each three jobs out at once, the first waits for the two
        // after it.
        let decode: DecodeJob = Arc::new(move |job: &[u8], _| {
            let first = job[4];
            if first.is_multiple_of(3) {
                wait_until(&seen, |s| {
                    s.finished.contains(&(first + 1)) && s.finished.contains(&(first + 2))
                });
            }
            let (m, cv) = &*seen;
            m.lock().unwrap().finished.push(first);
            cv.notify_all();
            Some(payloads(job))
        });
        let mut d = toy(&data, 3, decode);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert!(out == parts.concat());
        let finished = at.0.lock().unwrap().finished.clone();
        let pos = |i| finished.iter().position(|&f| f == i).unwrap();
        assert!(pos(0) > pos(1) && pos(0) > pos(2), "{finished:?}");
        assert!(pos(3) > pos(4) && pos(3) > pos(5), "{finished:?}");
        let s = d.stats();
        assert_eq!((s.jobs, s.most_in_flight, s.sequential), (6, 3, false));
    }

    #[test]
    fn jobs_are_decoded_on_several_threads_at_once_and_no_more() {
        let parts: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 5000]).collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let data = toy_stream(&refs);
        let threads = 4;
        let at = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let seen = at.clone();
        // Each of the first jobs waits until `threads` run at once.
        let decode: DecodeJob = Arc::new(move |job: &[u8], _| {
            let (m, cv) = &*seen;
            {
                let mut s = m.lock().unwrap();
                s.running += 1;
                s.most = s.most.max(s.running);
                s.threads.insert(std::thread::current().id());
                cv.notify_all();
            }
            wait_until(&seen, |s| s.most >= threads);
            m.lock().unwrap().running -= 1;
            Some(payloads(job))
        });
        let mut d = toy(&data, threads, decode);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert!(out == parts.concat());
        let s = at.0.lock().unwrap();
        // As many at once as there are threads; never more: the reading
        // thread holds one job's output besides.
        assert_eq!(s.most, threads);
        assert!(s.threads.len() >= threads && !s.threads.contains(&std::thread::current().id()));
        let st = d.stats();
        assert_eq!(
            (st.jobs, st.most_in_flight, st.sequential),
            (12, threads, false)
        );
    }

    #[test]
    fn a_job_given_back_is_read_again_with_the_rest_of_the_stream() {
        let parts: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 700]).collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let data = toy_stream(&refs);
        // The third job is refused: the sequential decoder reads from its
        // first byte, through the jobs already out, to the end.
        let decode: DecodeJob = Arc::new(|job: &[u8], _| (job[4] != 2).then(|| payloads(job)));
        let mut d = toy(&data, 3, decode);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert!(out == parts.concat());
        let s = d.stats();
        assert!(s.sequential && s.jobs < 8, "{s:?}");
        // A truncated frame: the jobs before it, then the sequential
        // decoder on what is left.
        let cut = &data[..data.len() - 100];
        let mut d = toy(cut, 3, Arc::new(|job: &[u8], _| Some(payloads(job))));
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert!(out == payloads(&data[..data.len() - 704]));
        assert_eq!((d.stats().jobs, d.stats().sequential), (7, true));
    }
}
