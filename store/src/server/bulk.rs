//! Bulk reads decoded at a background priority.
//!
//! A page of a list (500 pods: ≈1.6 MB of values, most of them packed) costs 1–2.5 ms of
//! CPU to decode and copy; an unpaginated list of a prefix, seconds. On a runtime worker
//! at the default priority that CPU competes on equal terms with the point requests
//! (a kubelet's lease renewal, a pod's update) queued behind it on the same few cores:
//! during kube-apiserver's start-up lists the point writes' p99 rose 3–5× (issue 14's
//! `bench state`). Reads whose answers are large are read under their shard locks on
//! the worker (refcounts only: `RangeRead`), and decoded here, on threads at nice 19,
//! where the kernel gives the point requests the CPU first. No lock is held on these
//! threads, so a decode the kernel preempts holds back no writer.
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use etcd_client::proto::PbRangeResponse;

use crate::mvcc::kvstore_range::RangeRead;

/// Answers carrying at least this many bytes of keys and values, or this many keys,
/// are decoded on the bulk threads; smaller ones on the worker, where the hop
/// (two wake-ups, ≈10–20 µs) would cost more than it saves.
pub const BULK_BYTES: usize = 128 << 10;
pub const BULK_KEYS: usize = 4096;

/// The nice value of the bulk threads: the packer's, the lowest.
pub const NICE: i32 = 19;

type Job = Box<dyn FnOnce() + Send>;

fn pool() -> &'static Mutex<mpsc::Sender<Job>> {
    static POOL: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(Mutex::new(rx));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..n {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("bulk-read-{i}"))
                .spawn(move || {
                    crate::background::lower_this_thread_to(NICE);
                    loop {
                        let job = match rx.lock().map(|r| r.recv()) {
                            Ok(Ok(job)) => job,
                            _ => return,
                        };
                        job();
                    }
                })
                .expect("bulk-read thread");
        }
        Mutex::new(tx)
    })
}

/// Runs `f` on a bulk thread and returns what it returned; None if it panicked.
pub async fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    if pool().lock().ok()?.send(job).is_err() {
        return None;
    }
    rx.await.ok()
}

/// Whether decoding `read` belongs on the bulk threads.
pub fn is_bulk(read: &RangeRead) -> bool {
    read.len() >= BULK_KEYS || read.payload_bytes() >= BULK_BYTES
}

/// The answer of a range read: decoded here when small, on a bulk thread when large.
pub async fn decode(read: RangeRead) -> Result<PbRangeResponse, tonic::Status> {
    if !is_bulk(&read) {
        return Ok(read.into_response());
    }
    run(move || read.into_response()).await.ok_or_else(|| tonic::Status::internal("bulk read failed"))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn runs_on_a_lowered_thread_and_returns_the_result() {
        let (name, nice) = super::run(|| {
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            (std::thread::current().name().map(str::to_string), nice)
        })
        .await
        .unwrap();
        assert!(name.unwrap().starts_with("bulk-read-"));
        assert_eq!(nice, super::NICE);
        assert_eq!(super::run(|| 41 + 1).await, Some(42));
    }
}
