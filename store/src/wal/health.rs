//! The disk's health as the logs see it. A write, sync or open of a log that
//! fails (ENOSPC, EIO, anything) does not stop the store: the log keeps the
//! bytes, the store stops taking writes to durable prefixes (the NOSPACE
//! alarm), the `wal-fsync` thread retries with back-off, and the first retry
//! that gets every failed log written (and synced) ends it (docs/design.md,
//! "When a write fails").
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::logfile::LogFile;

/// Called with true when the disk fails (and again at each failed retry, so
/// an alarm disarmed meanwhile comes back), false when it works again.
pub type AlarmHook = Box<dyn Fn(bool) + Send + Sync>;

/// First retry after this, doubling up to `BACKOFF_MAX`.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// At most this between retries: a disk with room again is noticed within it.
pub const BACKOFF_MAX: Duration = Duration::from_millis(500);

#[derive(Default)]
struct State {
    /// Logs holding bytes a write failed to get out, for the retries.
    failed: Vec<Arc<LogFile>>,
    /// Moves at every failure, so a retry that ran before one cannot end it.
    gen: u64,
    since: Option<Instant>,
    /// The last failure logged, to log each new (file, error) once.
    last: Option<(PathBuf, String)>,
    /// Checkpoints that failed and wait for a retry (their `.ckpt`'s path, the
    /// error logged, since when): they raise the alarm too, but refuse nothing
    /// (the log they would replace is kept and still takes appends).
    ckpt: Vec<(PathBuf, String, Instant)>,
}

pub struct Health {
    state: Mutex<State>,
    down: AtomicBool,
    /// true while down; writers waiting for their lease or compaction record watch it.
    tx: tokio::sync::watch::Sender<bool>,
    hook: RwLock<Option<AlarmHook>>,
}

impl Default for Health {
    fn default() -> Self {
        Health { state: Mutex::new(State::default()), down: AtomicBool::new(false), tx: tokio::sync::watch::channel(false).0, hook: RwLock::new(None) }
    }
}

impl Health {
    /// Whether writes to durable prefixes are refused (a failed write is outstanding).
    pub fn down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Installs the alarm hook; called at once with true if a write or a
    /// checkpoint already failed (a start on a full disk fails before the
    /// server that raises the alarm exists).
    pub fn set_alarm_hook(&self, h: AlarmHook) {
        let mut hook = self.hook.write();
        let s = self.state.lock();
        if s.since.is_some() || !s.ckpt.is_empty() {
            h(true);
        }
        drop(s);
        *hook = Some(h);
    }

    /// Whether the alarm is up: a log write or a checkpoint is failing.
    pub fn alarmed(&self) -> bool {
        let s = self.state.lock();
        s.since.is_some() || !s.ckpt.is_empty()
    }

    /// Records that the checkpoint `ckpt` could not be written (`e`, naming the
    /// file): the alarm goes up (logged once per (file, error)); writes are not
    /// refused for it. `checkpoint_ok` ends it.
    pub(super) fn fail_checkpoint(&self, ckpt: &std::path::Path, e: &std::io::Error) {
        {
            let mut s = self.state.lock();
            let msg = e.to_string();
            match s.ckpt.iter_mut().find(|(p, _, _)| p == ckpt) {
                Some((_, m, _)) if *m == msg => {}
                found => {
                    eprintln!(
                        "meganode-store: error: checkpoint {} failed: {e}; alarm NOSPACE: the log segments it would replace are kept (nothing is lost) and it is retried; writes go on while the logs can be written",
                        ckpt.display()
                    );
                    match found {
                        Some((_, m, _)) => *m = msg,
                        None => s.ckpt.push((ckpt.to_path_buf(), msg, Instant::now())),
                    }
                }
            }
        }
        if let Some(h) = &*self.hook.read() {
            h(true);
        }
    }

    /// The checkpoint `ckpt` was written: if it had failed, its part of the
    /// alarm ends, and the alarm with it when no log write is failing.
    pub(super) fn checkpoint_ok(&self, ckpt: &std::path::Path) {
        let clear = {
            let mut s = self.state.lock();
            let Some(i) = s.ckpt.iter().position(|(p, _, _)| p == ckpt) else { return };
            let (_, _, since) = s.ckpt.swap_remove(i);
            eprintln!("meganode-store: checkpoint {} written after failing for {:.1} s", ckpt.display(), since.elapsed().as_secs_f64());
            s.ckpt.is_empty() && s.since.is_none()
        };
        if clear {
            eprintln!("meganode-store: alarm NOSPACE (disk) cleared");
            if let Some(h) = &*self.hook.read() {
                h(false);
            }
        }
    }

    /// Whether a checkpoint is failing (the checkpoint thread retries sooner).
    pub fn checkpoint_failing(&self) -> bool {
        !self.state.lock().ckpt.is_empty()
    }

    /// Records that writing `log` failed with `e`: its bytes wait in the log
    /// for the retries. Logs each new (file, error) with the file's name.
    pub(super) fn fail(&self, log: &Arc<LogFile>, e: &std::io::Error) {
        let first = {
            let mut s = self.state.lock();
            s.gen += 1;
            if !s.failed.iter().any(|l| Arc::ptr_eq(l, log)) {
                s.failed.push(log.clone());
            }
            let first = s.since.is_none();
            if first {
                s.since = Some(Instant::now());
            }
            let what = (log.path.clone(), e.to_string());
            if s.last.as_ref() != Some(&what) {
                eprintln!(
                    "meganode-store: error: write to {} failed: {e}; alarm NOSPACE: writes to durable prefixes are refused (to memory-only ones too while a key's write is held), reads and watches are served, and the write is retried until it succeeds",
                    log.path.display()
                );
                s.last = Some(what);
            }
            self.down.store(true, Ordering::Release);
            first
        };
        if first {
            self.tx.send_replace(true);
        }
        if let Some(h) = &*self.hook.read() {
            h(true);
        }
    }

    /// The failures so far: (generation, the logs to retry).
    pub(super) fn snapshot(&self) -> (u64, Vec<Arc<LogFile>>) {
        let s = self.state.lock();
        (s.gen, s.failed.clone())
    }

    /// Ends the outage if no failure came after the snapshot `gen` whose logs
    /// were all written since. Returns whether it ended one.
    pub(super) fn recovered(&self, gen: u64) -> bool {
        let clear = {
            let mut s = self.state.lock();
            if s.gen != gen || s.since.is_none() {
                return false;
            }
            let since = s.since.take().unwrap();
            s.failed.clear();
            s.last = None;
            self.down.store(false, Ordering::Release);
            let clear = s.ckpt.is_empty();
            eprintln!(
                "meganode-store: log writes succeed again after {:.1} s: writes to durable prefixes accepted, alarm NOSPACE (disk) {}",
                since.elapsed().as_secs_f64(),
                if clear { "cleared" } else { "kept while a checkpoint fails" }
            );
            clear
        };
        self.tx.send_replace(false);
        if clear {
            if let Some(h) = &*self.hook.read() {
                h(false);
            }
        }
        true
    }

    /// Resolves once no failed write is outstanding (at once when none is).
    pub async fn settled(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|down| !*down).await;
    }
}

pub fn next_backoff(d: Duration) -> Duration {
    if d.is_zero() {
        BACKOFF_MIN
    } else {
        (d * 2).min(BACKOFF_MAX)
    }
}
