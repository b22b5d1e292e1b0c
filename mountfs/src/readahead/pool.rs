//! A plain blocking worker pool for prefetch jobs.
//!
//! Not rayon: rayon's idle workers spin and `sched_yield` before sleeping,
//! which is right for data-parallel loops but wrong for a server whose
//! workers mostly wait for the next request: on few cores the spinning
//! takes CPU time from the decoding it waits for. Workers here block on a
//! condition variable and cost nothing when idle.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

pub struct Pool {
    q: Arc<Queue>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    pub fn new(threads: usize, name: &str) -> std::io::Result<Pool> {
        let q = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        });
        let workers = (0..threads.max(1))
            .map(|i| {
                let q = q.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || worker(&q))
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Pool { q, workers })
    }

    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let mut g = self.q.jobs.lock().unwrap_or_else(|p| p.into_inner());
        g.0.push_back(Box::new(job));
        drop(g);
        self.q.ready.notify_one();
    }
}

fn worker(q: &Queue) {
    loop {
        let job = {
            let mut g = q.jobs.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(j) = g.0.pop_front() {
                    break j;
                }
                if g.1 {
                    return;
                }
                g = q.ready.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A panicking job must not take its worker (and eventually the
        // daemon's capacity) with it; the FUSE reply it owned is dropped,
        // which fuser answers with EIO.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.q.jobs.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.q.ready.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn runs_every_job_and_survives_panics() {
        let n = Arc::new(AtomicUsize::new(0));
        {
            let p = Pool::new(3, "t").unwrap();
            for i in 0..100 {
                let n = n.clone();
                p.spawn(move || {
                    if i == 50 {
                        panic!("job panics");
                    }
                    n.fetch_add(1, Ordering::SeqCst);
                });
            }
        } // drop waits for the queue to drain
        assert_eq!(n.load(Ordering::SeqCst), 99);
    }
}
