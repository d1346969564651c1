//! Background work that must not take a core from the request path.
//!
//! Compaction and checkpoints (nice 10) and the value packer (nice 19) are CPU-heavy for a moment (freeing a minute's history,
//! encoding a prefix) and run beside the writers on the same few cores. At the default
//! nice they took a core from the request path for that moment: the soak's once-a-minute
//! maximum latency (docs/design.md §8, docs/bench/soak/). At nice 10 the scheduler gives the request
//! path's threads the CPU first. Their locks are held briefly (a step of keys; frees and
//! file work after the lock), so a preempted background thread holds writers for at most
//! one step.

/// The nice value of background threads.
pub const NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to `NICE` (Linux: nice is per thread).
pub fn lower_this_thread() {
    lower_this_thread_to(NICE)
}

/// Lowers the calling thread's CPU priority to `nice`, never raising it. A failure is
/// ignored: the work then runs at the priority it had.
pub fn lower_this_thread_to(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: getpriority/setpriority on the calling thread's own id; no memory is passed.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        if libc::getpriority(libc::PRIO_PROCESS, tid) < nice {
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn lowers_only_the_calling_thread() {
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let before = nice();
        let inside = std::thread::spawn(move || {
            super::lower_this_thread();
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(inside, before.max(super::NICE));
        assert_eq!(nice(), before, "the caller's thread keeps its priority");
    }
}
