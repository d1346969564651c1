//! The caller's deadline (gRPC's `grpc-timeout`) for a request that waits:
//! a write held for durability or back-pressure, a Lock or Campaign waiting
//! its turn (docs/design.md §5, "Past the client's deadline").
//!
//! etcd: a proposal still waiting when the request's context ends returns
//! (v3_server.go) and grpc-go's server, whose own timer fired, has already
//! reset the stream (RST_STREAM CANCEL, no status): a grpc-go client sees
//! DeadlineExceeded, "context deadline exceeded" from its own timer, or the
//! reset turned into DeadlineExceeded since its deadline has passed too.
//! tonic's own grpc-timeout handling, outside our services, answers Cancelled
//! ("Timeout expired") instead, which a client whose timer ran late (a loaded
//! machine) saw. So a waiting request answers DeadlineExceeded, "context
//! deadline exceeded", itself, `MARGIN` before tonic would.
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// How much earlier than tonic's timer a waiting request answers.
pub const MARGIN: Duration = Duration::from_millis(5);

/// When a request must be answered by (None: no deadline sent).
#[derive(Clone, Copy, Debug, Default)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// The request's deadline, from its `grpc-timeout` as it arrives. One
    /// header look-up when none is sent.
    pub fn of(md: &MetadataMap) -> Self {
        Self::after(grpc_timeout(md))
    }

    /// The deadline of a request that arrives now with grpc-timeout `timeout`.
    pub fn after(timeout: Option<Duration>) -> Self {
        Deadline(timeout.map(|d| Instant::now() + d.saturating_sub(MARGIN)))
    }

    /// `f`, unless the deadline passes first: then DeadlineExceeded, and `f` is
    /// dropped (what it committed stays committed, as a proposal that timed out
    /// in etcd may still be applied). No timer without a deadline.
    pub async fn bound<F: Future>(self, f: F) -> Result<F::Output, Status> {
        match self.0 {
            None => Ok(f.await),
            Some(at) => tokio::time::timeout_at(at, f).await.map_err(|_| exceeded()),
        }
    }
}

/// What a request answers when its deadline passed while it waited.
pub fn exceeded() -> Status {
    Status::deadline_exceeded("context deadline exceeded")
}

/// The request's grpc-timeout (gRPC over HTTP/2: up to 8 digits and a unit H, M, S, m, u, n).
pub fn grpc_timeout(md: &MetadataMap) -> Option<Duration> {
    parse_timeout(md.get("grpc-timeout")?.to_str().ok()?)
}

/// A grpc-timeout value.
pub fn parse_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_refuses_the_rest() {
        let t = |v: &str| {
            let mut md = tonic::metadata::MetadataMap::new();
            md.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&md)
        };
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("5S"), Some(Duration::from_secs(5)));
        assert_eq!(t("199m"), Some(Duration::from_millis(199)));
        assert_eq!(t("199875u"), Some(Duration::from_micros(199875)));
        assert_eq!(t("12n"), Some(Duration::from_nanos(12)));
        assert_eq!(t("12"), None);
        assert_eq!(t("m"), None);
        assert_eq!(t("1x"), None);
        assert_eq!(grpc_timeout(&tonic::metadata::MetadataMap::new()), None);
    }

    /// A wait past the deadline answers DeadlineExceeded ("context deadline
    /// exceeded"), MARGIN early; one that ends in time answers its result.
    #[test]
    fn a_wait_past_the_deadline_answers_deadline_exceeded() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut md = MetadataMap::new();
        md.insert("grpc-timeout", "50m".parse().unwrap());
        rt.block_on(async {
            let t = Instant::now();
            let e = Deadline::of(&md).bound(tokio::time::sleep(Duration::from_secs(5))).await.unwrap_err();
            assert_eq!((e.code(), e.message()), (tonic::Code::DeadlineExceeded, "context deadline exceeded"));
            assert!(t.elapsed() >= Duration::from_millis(40) && t.elapsed() < Duration::from_millis(500), "{:?}", t.elapsed());
            assert_eq!(Deadline::of(&md).bound(async { 7 }).await.unwrap(), 7);
            assert_eq!(Deadline::of(&MetadataMap::new()).bound(async { 8 }).await.unwrap(), 8);
        });
    }
}
