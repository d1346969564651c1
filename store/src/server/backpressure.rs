//! Back-pressure on writes when the disk is slower than the clients
//! (docs/design.md §5, "A slow disk"): a bound on the revisions committed
//! and not yet durable, so a slow fsync makes writers wait instead of letting
//! the fsync batch, the log buffers and the answers waiting for it grow.
use tonic::Status;

use super::deadline::Deadline;
use super::Ctx;

/// Committed revisions not yet durable past which writes wait (`Ctx::admit_write`):
/// etcd's own bound between its committed and applied index (5,000), past which
/// it refuses proposals with "too many requests"; a write here waits instead.
pub const MAX_UNPUBLISHED: i64 = 5_000;

impl Ctx {
    /// In front of a write's commit: while `MAX_UNPUBLISHED` revisions are
    /// committed and not yet published (durable), the write waits for the
    /// oldest of them before it commits. Every caller commits in the same poll
    /// as this returns (no await in between), so the gap never passes the limit
    /// by more than the runtime's worker threads, however many requests the
    /// clients send. While a log write has failed it returns at once: the disk
    /// check that follows refuses what must be refused. Two atomic loads when
    /// the disk keeps up. Past the caller's deadline `dl` it answers
    /// DeadlineExceeded, as a write waiting for durability does.
    pub async fn admit_write(&self, dl: Deadline) -> Result<(), Status> {
        let mut counted = false;
        loop {
            let committed = self.store.committed_rev();
            if committed - self.store.current_rev() < MAX_UNPUBLISHED || self.wal.as_ref().is_some_and(|w| w.health.down()) {
                return Ok(());
            }
            if !counted {
                counted = true;
                self.metrics.backpressure_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // Past the caller's deadline it answers DeadlineExceeded, as etcd does (super::deadline).
            dl.bound(self.store.wait_visible(committed - MAX_UNPUBLISHED + 1)).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use etcd_client::proto::PbPutRequest;

    use super::*;
    use crate::mvcc::Store;
    use crate::wal::fault::{FaultHook, FileOp};
    use crate::wal::{Durability, Mode};

    struct HoldSync(AtomicBool);
    impl FaultHook for HoldSync {
        fn before(&self, op: FileOp, _: &std::path::Path, _: usize) -> std::io::Result<()> {
            while op == FileOp::Sync && self.0.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        }
    }

    /// With the fsync held and MAX_UNPUBLISHED writes committed behind it, the
    /// next write waits; it is let in as soon as the fsync returns.
    #[test]
    fn writes_wait_while_too_many_are_not_durable() {
        let dir = std::env::temp_dir().join(format!("mgn-backpressure-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Arc::new(Store::new());
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Fsync, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let ctx = Ctx::new(store.clone(), crate::config::Config::default(), Some(wal.clone()));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let admitted = |ctx: &Arc<Ctx>| {
            let c = ctx.clone();
            rt.block_on(async move { tokio::time::timeout(Duration::from_millis(100), c.admit_write(Deadline::default())).await.is_ok() })
        };
        assert!(admitted(&ctx));
        let hook = Arc::new(HoldSync(AtomicBool::new(true)));
        wal.faults.set(Some(hook.clone()));
        for i in 0..MAX_UNPUBLISHED {
            store.put(&PbPutRequest { key: format!("/registry/pods/{i}").into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
            if i == MAX_UNPUBLISHED - 2 {
                assert!(admitted(&ctx), "one below the limit");
            }
        }
        assert!(!admitted(&ctx), "admitted with {MAX_UNPUBLISHED} writes waiting for their fsync");
        hook.0.store(false, Ordering::SeqCst);
        assert!(admitted(&ctx), "still waiting after the fsync returned");
        drop((ctx, store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
