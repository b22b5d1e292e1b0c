//! Keeping a woken caller on its queue's CPU: answers submitted from a
//! `SCHED_IDLE` window, the hops that decide when to, and the watchdog that
//! bounds the windows.
//!
//! A queue thread answers with `COMMIT_AND_FETCH`, and the kernel wakes the
//! caller inside that system call, while the queue thread still runs. The
//! scheduler then places the caller on another CPU if one is idle
//! (`select_idle_sibling`): a one-thread reader hops to the other CPU at
//! every request, each hop wakes a halted CPU (an IPI, and on a VM an exit),
//! and its next request goes to that CPU's queue, whose thread must be woken
//! in turn. A reader pinned to one CPU does not hop, and is served several
//! times faster per request (docs/benchmarks/uring.md).
//!
//! A CPU whose running threads all have the `SCHED_IDLE` policy counts as
//! idle for that choice (`sched_idle_cpu`), so a queue thread that drops to
//! `SCHED_IDLE` for the submission keeps the caller on this CPU, and the
//! caller preempts it at once. The thread returns to `SCHED_OTHER` as soon as
//! it runs again — when this CPU has nothing else to run, which is when its
//! caller waits for the next answer — and only then waits for a request, so
//! it never sleeps in `SCHED_IDLE`.
//!
//! The switch costs two system calls per submission and is wasted when no
//! CPU is idle (several busy readers): callers then stay where they are
//! anyway. So it is used only while callers are seen to change CPU
//! ([`Hops`]): a caller's next request arriving at another queue after an
//! answer submitted without the switch is a hop. Without the switch every
//! answer tells; with it, one submission in [`PROBE_EVERY`] goes without,
//! to see whether callers would still hop. Hops with more callers than
//! queues do not count: no CPU sits idle to take a woken caller, so the
//! hops are the scheduler balancing runnable threads, which the switch
//! cannot prevent and only pays for.
//!
//! A hop costs only where the CPU it lands on was asleep: a vCPU that
//! polls when idle (`/dev/cpu_dma_latency` held at 0, `idle=poll`) takes a
//! woken caller at once, and there the switch's system calls are the whole
//! cost. So the watchdog samples the usage counters of the CPUs' sleeping
//! idle states (cpuidle states above `POLL`) while queues answer, and the
//! switch stays off while they have not moved ([`Hops::set_sleeping`]);
//! without cpuidle counters the CPUs are taken to sleep.
//!
//! The window in between is bounded: a request from another thread on this
//! CPU would otherwise wait for as long as the caller keeps the CPU busy
//! (a `SCHED_IDLE` thread gets almost no share of a busy CPU). A watchdog
//! thread puts a queue thread back in `SCHED_OTHER` once its window has been
//! open for [`WINDOW`]; it ticks only while queues answer, and parks when
//! they have been quiet for [`PARK_AFTER`].
//!
//! Leaving `SCHED_IDLE` needs `CAP_SYS_NICE` or an `RLIMIT_NICE` of 20
//! (`can_nice` in the kernel): without them a thread would stay in
//! `SCHED_IDLE` for good, so [`Windows::new`] tries the round trip on a
//! throwaway thread first, and the queues of a process that may not make it
//! answer without it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest a queue thread stays in `SCHED_IDLE` after an answer: about
/// one scheduler slice, the wait a request would have behind a busy caller
/// anyway.
pub const WINDOW: Duration = Duration::from_millis(3);

/// Quiet time after which the watchdog stops ticking until the next answer.
pub const PARK_AFTER: Duration = Duration::from_millis(200);

/// With the switch on, one submission in this many goes without it.
pub const PROBE_EVERY: u32 = 64;

/// Outcomes of answers without the switch per decision; the switch is on
/// while at least a quarter of them were hops.
const DECIDE_AFTER: u32 = 16;

/// Callers' last queues, by thread id modulo this many slots.
const SLOTS: usize = 1024;

/// Whether callers change CPU between requests (see the module doc).
///
/// Invariant: a slot holds `tid << 32 | queue << 1 | told`, where `told`
/// means the caller's last answer went without the switch, so its next
/// request tells whether it hopped; 0 is an empty slot.
pub struct Hops {
    last: Vec<AtomicU64>,
    told: AtomicU32,
    hopped: AtomicU32,
    /// The callers of the outcomes of the current decision, by position.
    callers: Vec<AtomicU32>,
    /// Queues (CPUs): more distinct callers than this, and none is idle.
    queues: usize,
    on: AtomicBool,
    /// Whether idle CPUs were last seen to sleep (module doc).
    sleeping: AtomicBool,
}

impl Hops {
    fn new(queues: usize) -> Hops {
        Hops {
            last: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            told: AtomicU32::new(0),
            hopped: AtomicU32::new(0),
            callers: (0..DECIDE_AFTER).map(|_| AtomicU32::new(0)).collect(),
            queues,
            on: AtomicBool::new(false),
            sleeping: AtomicBool::new(true),
        }
    }

    /// Whether answers should be submitted with the switch.
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Whether idle CPUs sleep (see the module doc); while they do not,
    /// the switch is off.
    pub fn set_sleeping(&self, sleeping: bool) {
        self.sleeping.store(sleeping, Ordering::Relaxed);
        if !sleeping {
            self.on.store(false, Ordering::Relaxed);
        }
    }

    /// A request from thread `tid` arrived at queue `q`.
    pub fn arrived(&self, q: usize, tid: u32) {
        if tid == 0 {
            return;
        }
        let slot = &self.last[tid as usize % SLOTS];
        let prev = slot.swap(u64::from(tid) << 32 | (q as u64) << 1, Ordering::Relaxed);
        if prev >> 32 == u64::from(tid) && prev & 1 == 1 {
            self.outcome(((prev >> 1) & 0x7fff_ffff) as usize != q, tid);
        }
    }

    /// The answer to `tid` went without the switch: its next request tells.
    pub fn told(&self, tid: u32) {
        if tid == 0 {
            return;
        }
        let slot = &self.last[tid as usize % SLOTS];
        let v = slot.load(Ordering::Relaxed);
        if v >> 32 == u64::from(tid) {
            let _ = slot.compare_exchange(v, v | 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn outcome(&self, hop: bool, tid: u32) {
        let hopped = self.hopped.fetch_add(u32::from(hop), Ordering::Relaxed) + u32::from(hop);
        let n = self.told.fetch_add(1, Ordering::Relaxed);
        self.callers[n as usize % self.callers.len()].store(tid, Ordering::Relaxed);
        if n + 1 >= DECIDE_AFTER {
            // On a request's path: a fixed array, no allocation.
            let mut seen = [0u32; DECIDE_AFTER as usize];
            for (s, c) in seen.iter_mut().zip(&self.callers) {
                *s = c.load(Ordering::Relaxed);
            }
            seen.sort_unstable();
            let distinct = 1 + seen.windows(2).filter(|w| w[0] != w[1]).count();
            let idle_cpu_likely = distinct <= self.queues;
            self.on.store(
                hopped * 4 >= DECIDE_AFTER
                    && idle_cpu_likely
                    && self.sleeping.load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
            self.told.store(0, Ordering::Relaxed);
            self.hopped.store(0, Ordering::Relaxed);
        }
    }
}

/// Switches thread `tid` (0: the calling one) between `SCHED_IDLE` and
/// `SCHED_OTHER`.
fn set_idle(tid: i32, idle: bool) -> io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    // Priority 0, as both policies require. Zeroed rather than built by
    // name: musl's sched_param has fields glibc's lacks.
    // SAFETY: sched_param is plain integers, for which all zeroes is valid.
    let param: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: `param` outlives the call; a stale tid is at worst ESRCH.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process may drop a thread to `SCHED_IDLE` and bring it
/// back, tried on a thread of its own so that a refusal strands nobody.
fn permitted() -> bool {
    std::thread::spawn(|| set_idle(0, true).is_ok() && set_idle(0, false).is_ok())
        .join()
        .unwrap_or(false)
}

/// One queue thread's window: its tid, and when its open window opened
/// (nanoseconds since [`Windows::base`], 0 when closed).
struct Slot {
    tid: AtomicI32,
    opened: AtomicU64,
}

/// The `SCHED_IDLE` windows of a mount's queue threads and the watchdog
/// that closes those left open longer than [`WINDOW`].
///
/// Invariant: a slot's `opened` is non-zero only while its thread is (or is
/// about to be) in `SCHED_IDLE`; the thread clears it after leaving.
pub struct Windows {
    pub hops: Hops,
    base: Instant,
    slots: Vec<Slot>,
    /// Set when an answer was submitted since the watchdog last looked.
    busy: AtomicBool,
    parked: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    /// Usage counters of sleeping idle states, sampled by the watchdog.
    idle_counters: Vec<std::path::PathBuf>,
}

impl Windows {
    /// Windows for `threads` queue threads serving `queues` queues, with
    /// their watchdog running, or `None` when `wanted` is false or the
    /// process may not leave `SCHED_IDLE` again.
    pub fn new(threads: usize, queues: usize, wanted: bool) -> Option<Arc<Windows>> {
        if !wanted || !permitted() {
            return None;
        }
        let w = Arc::new(Windows {
            hops: Hops::new(queues),
            base: Instant::now(),
            slots: (0..threads)
                .map(|_| Slot {
                    tid: AtomicI32::new(0),
                    opened: AtomicU64::new(0),
                })
                .collect(),
            busy: AtomicBool::new(false),
            parked: Mutex::new(false),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            idle_counters: sleeping_idle_counters(),
        });
        let watch = w.clone();
        let spawned = std::thread::Builder::new()
            .name("fuse-uring-stay".into())
            .spawn(move || watch.watch());
        spawned.ok().map(|_| w)
    }

    fn now(&self) -> u64 {
        (self.base.elapsed().as_nanos() as u64).max(1)
    }

    /// Called by queue thread `t` once, from that thread.
    pub fn register(&self, t: usize) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.slots[t].tid.store(tid, Ordering::Relaxed);
    }

    /// Runs `submit` (a submission that wakes callers and does not wait) in
    /// `SCHED_IDLE` for queue thread `t`, then returns to `SCHED_OTHER`.
    pub fn around<T>(&self, t: usize, submit: impl FnOnce() -> T) -> T {
        let slot = &self.slots[t];
        slot.opened.store(self.now(), Ordering::Relaxed);
        if !self.busy.swap(true, Ordering::Relaxed) {
            let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
            if *parked {
                *parked = false;
                self.wake.notify_one();
            }
        }
        if set_idle(0, true).is_err() {
            slot.opened.store(0, Ordering::Relaxed);
            return submit();
        }
        let r = submit();
        // `permitted` showed this works; should it stop working, the window
        // stays open and the watchdog retries, while the thread serves on.
        if set_idle(0, false).is_ok() {
            slot.opened.store(0, Ordering::Relaxed);
        }
        r
    }

    /// Ends the watchdog (the queues have ended).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        *parked = false;
        self.wake.notify_one();
    }

    fn watch(&self) {
        let window = WINDOW.as_nanos() as u64;
        let mut quiet = Duration::ZERO;
        let mut ticks = 0u32;
        let mut slept = None;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(WINDOW);
            ticks = ticks.wrapping_add(1);
            if ticks.is_multiple_of(SAMPLE_EVERY) && !self.idle_counters.is_empty() {
                let now = sum_counters(&self.idle_counters);
                if let (Some(before), Some(now)) = (slept, now) {
                    self.hops.set_sleeping(now > before);
                }
                slept = now;
            }
            let now = self.now();
            for s in &self.slots {
                let opened = s.opened.load(Ordering::Relaxed);
                if opened != 0 && now.saturating_sub(opened) >= window {
                    let tid = s.tid.load(Ordering::Relaxed);
                    if tid != 0 && set_idle(tid, false).is_ok() {
                        // Unless the thread has opened a new window since.
                        let _ = s.opened.compare_exchange(
                            opened,
                            0,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                }
            }
            if self.busy.swap(false, Ordering::Relaxed) {
                quiet = Duration::ZERO;
                continue;
            }
            quiet += WINDOW;
            if quiet >= PARK_AFTER
                && self
                    .slots
                    .iter()
                    .all(|s| s.opened.load(Ordering::Relaxed) == 0)
            {
                let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
                *parked = true;
                while *parked && !self.stop.load(Ordering::Relaxed) {
                    parked = self.wake.wait(parked).unwrap_or_else(|p| p.into_inner());
                }
                quiet = Duration::ZERO;
                // The counters moved while parked: start afresh.
                slept = None;
            }
        }
    }
}

/// Watchdog ticks between two samples of the idle counters.
const SAMPLE_EVERY: u32 = 8;

/// CPUs whose idle counters are sampled (the first ones: an idle CPU
/// polls or sleeps alike on all of them).
const SAMPLED_CPUS: usize = 8;

/// The `usage` counters of the cpuidle states above `POLL` of the first
/// [`SAMPLED_CPUS`] CPUs; empty without cpuidle.
fn sleeping_idle_counters() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for cpu in 0..SAMPLED_CPUS {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
        let Ok(states) = std::fs::read_dir(&dir) else {
            continue;
        };
        for st in states.flatten() {
            let name = std::fs::read_to_string(st.path().join("name")).unwrap_or_default();
            if st.file_name().to_string_lossy().starts_with("state") && name.trim() != "POLL" {
                out.push(st.path().join("usage"));
            }
        }
    }
    out
}

/// The sum of the counters, `None` if one cannot be read.
fn sum_counters(files: &[std::path::PathBuf]) -> Option<u64> {
    files.iter().try_fold(0u64, |sum, f| {
        let n = std::fs::read_to_string(f)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(sum + n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` requests of thread `tid`, each answered without the switch,
    /// arriving at the queues `queue(i)` gives.
    fn requests(h: &Hops, tid: u32, n: usize, queue: impl Fn(usize) -> usize) {
        for i in 0..n {
            h.arrived(queue(i), tid);
            h.told(tid);
        }
    }

    #[test]
    fn the_switch_stays_off_while_idle_cpus_do_not_sleep() {
        let h = Hops::new(2);
        requests(&h, 7, 40, |i| i % 2);
        assert!(h.on(), "a caller alternating between two queues");
        h.set_sleeping(false);
        assert!(!h.on(), "off as soon as idle CPUs are seen to poll");
        requests(&h, 7, 40, |i| i % 2);
        assert!(!h.on(), "hops to polling CPUs cost nothing to avoid");
        h.set_sleeping(true);
        requests(&h, 7, 40, |i| i % 2);
        assert!(h.on(), "on again once idle CPUs sleep");
    }

    #[test]
    fn this_machines_idle_counters_are_read_or_absent() {
        let files = sleeping_idle_counters();
        if !files.is_empty() {
            assert!(sum_counters(&files).is_some(), "{files:?}");
        }
    }

    #[test]
    fn the_switch_is_on_while_callers_hop_and_off_when_they_stay() {
        let h = Hops::new(2);
        assert!(!h.on());
        requests(&h, 7, 40, |i| i % 2);
        assert!(h.on(), "a caller alternating between two queues");
        requests(&h, 7, 40, |_| 1);
        assert!(!h.on(), "a caller that stays on one queue");
        // Requests answered with the switch (not told) decide nothing.
        for i in 0..100 {
            h.arrived(i % 2, 7);
        }
        assert!(!h.on());
        // Other threads' requests in between do not count as hops.
        for i in 0..40 {
            h.arrived(0, 7);
            h.told(7);
            h.arrived(1, 8 + i);
        }
        assert!(!h.on());
        // Requests the kernel makes on its own (pid 0) are left out.
        requests(&h, 0, 40, |i| i % 2);
        assert!(!h.on());
    }

    /// More callers than queues keep every CPU busy: their hops are the
    /// scheduler's balancing, and the switch stays off; as many callers as
    /// queues, hopping, still turn it on.
    #[test]
    fn hops_of_more_callers_than_queues_leave_the_switch_off() {
        let h = Hops::new(2);
        for i in 0..64 {
            for tid in 10..14 {
                h.arrived((i + tid as usize) % 2, tid);
                h.told(tid);
            }
        }
        assert!(!h.on(), "four callers hopping over two queues");
        for i in 0..64 {
            for tid in 10..12 {
                h.arrived((i + tid as usize) % 2, tid);
                h.told(tid);
            }
        }
        assert!(h.on(), "two callers hopping over two queues");
    }

    // The watchdog closes a window its thread cannot close itself: a thread
    // left in SCHED_IDLE is back in SCHED_OTHER within a few windows.
    #[test]
    fn a_window_left_open_is_closed_by_the_watchdog() {
        let Some(w) = Windows::new(1, 1, true) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "leaving SCHED_IDLE needs CAP_SYS_NICE or RLIMIT_NICE 20 (run as root)"
            );
            return;
        };
        let w2 = w.clone();
        let policy = std::thread::spawn(move || {
            w2.register(0);
            w2.slots[0].opened.store(w2.now(), Ordering::Relaxed);
            w2.busy.store(true, Ordering::Relaxed);
            set_idle(0, true).unwrap();
            let end = Instant::now() + WINDOW * 20;
            // SAFETY: pid 0 is this thread.
            while unsafe { libc::sched_getscheduler(0) } == libc::SCHED_IDLE && Instant::now() < end
            {
                std::hint::spin_loop();
            }
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .unwrap();
        w.stop();
        assert_eq!(policy, libc::SCHED_OTHER);
    }
}
