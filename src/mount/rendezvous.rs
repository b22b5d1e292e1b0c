//! How `packfs umount` waits for the daemon it unmounts to end.
//!
//! A daemon writes `--stats` and `--record-access` after its mount goes
//! away, then exits; a script that reads them as soon as `packfs umount`
//! returns would race it. So once its mount is usable the daemon listens on
//! an abstract Unix socket named for the mount's device (`MAJ:MIN` in the
//! mount table, unique among live mounts) and keeps every connection it
//! accepts, never writing to one: `packfs umount` connects before it
//! unmounts, and the connection reaches its end when the daemon's process
//! ends, which is what it waits for. Accepting keeps the backlog empty for
//! a script that retries `umount` on a busy mount many times.
//! A mount without a listener (another FUSE server) is unmounted without
//! waiting. Abstract names have no permissions: a process squatting the
//! name can only make `umount` wait its bound, and a connect is
//! non-blocking, so a full backlog does not hold it either.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// The socket's name: the user's, for the mount at device `dev`.
fn name(dev: &str) -> Vec<u8> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("packfs-mount-{uid}-{dev}").into_bytes()
}

/// A Unix stream socket and the abstract address `name`, or `None`.
fn socket_for(name: &[u8]) -> Option<(OwnedFd, libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: a zeroed sockaddr_un is valid; the name fits (checked), after
    // the leading NUL that makes it abstract.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() + 1 > addr.sun_path.len() {
        return None;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: plain socket(2); the descriptor is owned from here.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    // SAFETY: a descriptor socket(2) just returned, owned by nothing else.
    (fd >= 0).then(|| (unsafe { OwnedFd::from_raw_fd(fd) }, addr, len))
}

/// In the daemon, once its mount at `dev` is usable: listens for the rest
/// of the process's life, on a thread of its own. The name may still be
/// held for a moment by the daemon of an earlier mount that had this
/// device number and is ending (writing its `--stats`): binding is retried
/// for 10 s. Failing is not an error (`umount` then does not wait), said
/// in the log.
pub fn listen(dev: &str) {
    let Some((fd, addr, len)) = socket_for(&name(dev)) else {
        return;
    };
    let raw = fd.as_raw_fd();
    // SAFETY: bind and listen on our socket (alive as long as `fd`, which
    // the thread below keeps) with a valid address; the listener blocks in
    // accept once listening.
    let open = move || {
        let ok = unsafe {
            libc::bind(raw, (&raw const addr).cast(), len) == 0
                && libc::listen(raw, 64) == 0
                && libc::fcntl(raw, libc::F_SETFL, 0) == 0
        };
        // errno is the calling thread's: read here.
        ok.then_some(()).ok_or_else(std::io::Error::last_os_error)
    };
    // Listening before the mount is said to be ready whenever the name is
    // free, so that an `umount` right after finds it.
    let mut listening = open();
    let keep = std::thread::Builder::new()
        .name("packfs-umount-wait".into())
        .spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while let Err(e) = listening {
                if e.raw_os_error() != Some(libc::EADDRINUSE)
                    || std::time::Instant::now() > deadline
                {
                    log::warn!("packfs umount of this mount will not wait for its daemon: {e}");
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
                listening = open();
            }
            // Held until the process ends: their closing is the signal.
            let mut held: Vec<OwnedFd> = Vec::new();
            loop {
                // SAFETY: accept on our listener; the result is owned.
                let c = unsafe {
                    libc::accept4(
                        fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                if c < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return;
                }
                // Connections whose `umount` gave up (a busy mount) go.
                held.retain(|h| !peer_gone(h));
                // SAFETY: a descriptor accept4 just returned.
                held.push(unsafe { OwnedFd::from_raw_fd(c) });
            }
        });
    if let Err(e) = keep {
        log::warn!("packfs umount of this mount will not wait for its daemon: {e}");
    }
}

/// Whether the other end of a connection has closed it.
fn peer_gone(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll one valid pollfd without waiting.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0 }
}

/// A connection to the daemon of the mount at `dev`, made before the
/// unmount; `None` when no daemon listens.
pub struct Daemon(OwnedFd);

pub fn connect(dev: &str) -> Option<Daemon> {
    let (fd, addr, len) = socket_for(&name(dev))?;
    // SAFETY: connect our socket to a valid address.
    let r = unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) };
    (r == 0).then_some(Daemon(fd))
}

impl Daemon {
    /// Waits up to `limit` for the daemon to end; whether it did.
    pub fn wait_for_exit(self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut p = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(60_000) as i32) };
            if n > 0 {
                // The daemon never writes: readable means reset or closed.
                return p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            }
            let interrupted =
                n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if !interrupted || left.is_zero() {
                return false;
            }
        }
    }
}
