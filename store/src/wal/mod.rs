//! Write-ahead logs, one file per resource prefix, with per-prefix durability:
//! `none` (memory only), `buffered` (written to the file — the page cache —
//! before the client is answered) and `fsync` (on disk before the answer).
//! Writers append encoded records to an in-memory buffer under the store's
//! sequencer; the first writer to reach the file writes (and in fsync mode
//! syncs) everything buffered so far, so concurrent writers share one write
//! and one fsync (group commit). The byte format is in docs/design.md.
//!
//! Files by concern: `record` (the byte format of log records and reading a
//! log back), `logfile` (one log file: its buffer, writes and syncs),
//! `sink` (the store's commit sink: which log a write goes to, group commit,
//! the fsync flusher and the retries of failed writes), `health` (whether a
//! write has failed: the alarm), `fault` (a hook to inject file errors and
//! delays in tests), `checkpoint` (per-prefix checkpoints), `recovery`
//! (opening a data directory and replaying it), `metrics`.
mod checkpoint;
pub use checkpoint::WrittenOut;
pub mod fault;
mod gather;
pub mod health;
mod logfile;
mod metrics;
mod record;
mod recovery;
mod sink;

pub use checkpoint::{decode_checkpoint, CKPT_MAGIC};
pub use logfile::LogFile;
pub use metrics::WalMetrics;
pub use record::{decode_records, encode_event, encode_lease_grant, encode_lease_revoke, read_log, Record, Replayed};
pub use recovery::{holds_logs, open, read_all, RecoveryReport};
pub use sink::{SyncState, Wal, FLOOR_MARGIN};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    None,
    Buffered,
    Fsync,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "none" => Some(Mode::None),
            "buffered" => Some(Mode::Buffered),
            "fsync" => Some(Mode::Fsync),
            _ => None,
        }
    }
}

/// Which mode each prefix gets: the longest configured prefix that matches,
/// else the default. Events and Leases default to memory only: Kubernetes
/// recreates both by itself (kubelets renew, controllers re-emit).
#[derive(Clone, Debug)]
pub struct Durability {
    pub default: Mode,
    pub prefixes: Vec<(Vec<u8>, Mode)>,
}

impl Durability {
    pub fn new(default: Mode, overrides: &[(String, Mode)]) -> Self {
        let mut prefixes: Vec<(Vec<u8>, Mode)> = vec![
            (b"/registry/events/".to_vec(), Mode::None),
            (b"/registry/leases/".to_vec(), Mode::None),
        ];
        for (p, m) in overrides {
            prefixes.retain(|(q, _)| q.as_slice() != p.as_bytes());
            prefixes.push((p.as_bytes().to_vec(), *m));
        }
        Durability { default, prefixes }
    }

    /// Mode for the shard holding `shard_prefix` (empty = keys outside any resource prefix).
    pub fn mode_for(&self, shard_prefix: &[u8]) -> Mode {
        self.prefixes
            .iter()
            .filter(|(p, _)| !shard_prefix.is_empty() && shard_prefix.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .map_or(self.default, |(_, m)| *m)
    }

    pub fn any_fsync(&self) -> bool {
        self.default == Mode::Fsync || self.prefixes.iter().any(|(_, m)| *m == Mode::Fsync)
    }

    /// Whether any prefix is kept on disk (`buffered` or `fsync`).
    pub fn any_logged(&self) -> bool {
        self.default != Mode::None || self.prefixes.iter().any(|(_, m)| *m != Mode::None)
    }
}

/// File name for a shard prefix: readable, reversible enough to debug.
pub fn file_stem(prefix: &[u8]) -> String {
    if prefix.is_empty() {
        return "_other".into();
    }
    let mut s = String::new();
    for &b in prefix.strip_prefix(b"/").unwrap_or(prefix) {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' => s.push(b as char),
            b'/' => s.push('+'),
            _ => s.push_str(&format!("%{b:02x}")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_modes_by_prefix() {
        let d = Durability::new(Mode::Buffered, &[("/registry/pods/".into(), Mode::Fsync), ("/registry/leases/".into(), Mode::Buffered)]);
        assert_eq!(d.mode_for(b"/registry/pods/"), Mode::Fsync);
        assert_eq!(d.mode_for(b"/registry/events/"), Mode::None);
        assert_eq!(d.mode_for(b"/registry/leases/"), Mode::Buffered);
        assert_eq!(d.mode_for(b"/registry/configmaps/"), Mode::Buffered);
        assert_eq!(d.mode_for(b""), Mode::Buffered);
        assert!(d.any_fsync());
    }

    #[test]
    fn file_stems() {
        assert_eq!(file_stem(b"/registry/pods/"), "registry+pods+");
        assert_eq!(file_stem(b"/registry/example.com/widgets/"), "registry+example.com+widgets+");
        assert_eq!(file_stem(b""), "_other");
    }
}
