//! This member's own state that etcd keeps in its backend (the members and
//! cluster buckets) and a restart must not forget: its peer URLs as
//! MemberUpdate last set them, and the downgrade target Downgrade ENABLE set
//! (CANCEL clears it). Kept in `<data-dir>/member.state` when anything is kept
//! (the auth state's rule), replaced whole per change before it is answered
//! (crate::state_file). Format (little-endian):
//!
//! ```text
//! "MGNMEMB1" | n_urls:u32 | url* | has_downgrade:u8 | target? | crc32c:u32
//! url, target: len:u32 | bytes (UTF-8)
//! ```
//! A restart takes the file over --initial-advertise-peer-urls, as etcd takes
//! its stored membership over the flag once the member exists.
use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

use tonic::Status;

use crate::state_file::{put_bytes, seal, Reader};

const MAGIC: &[u8; 8] = b"MGNMEMB1";
pub const FILE: &str = "member.state";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    pub peer_urls: Vec<String>,
    pub downgrade: Option<String>,
}

pub fn encode(s: &MemberState) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(s.peer_urls.len() as u32).to_le_bytes());
    for u in &s.peer_urls {
        put_bytes(&mut out, u.as_bytes());
    }
    out.push(s.downgrade.is_some() as u8);
    if let Some(t) = &s.downgrade {
        put_bytes(&mut out, t.as_bytes());
    }
    seal(out)
}

pub fn decode(b: &[u8]) -> Result<MemberState, String> {
    let mut r = Reader::open(b, MAGIC, FILE, "a member state file")?;
    let mut s = MemberState::default();
    for _ in 0..r.u32()? {
        s.peer_urls.push(r.string()?);
    }
    if r.u8()? == 1 {
        s.downgrade = Some(r.string()?);
    }
    r.finish()?;
    Ok(s)
}

/// The state and where it is kept (None: memory only).
pub struct Member {
    inner: Mutex<(MemberState, Option<PathBuf>)>,
}

impl Member {
    pub fn new(peer_urls: Vec<String>) -> Self {
        Member { inner: Mutex::new((MemberState { peer_urls, downgrade: None }, None)) }
    }

    /// Keeps the state in `dir` from now on, taking what a previous run kept there.
    pub fn keep_in(&self, dir: PathBuf) -> Result<(), String> {
        let mut g = self.inner.lock().unwrap();
        match fs::read(dir.join(FILE)) {
            Ok(b) => g.0 = decode(&b).map_err(|e| format!("{}: {e}", dir.join(FILE).display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", dir.join(FILE).display())),
        }
        g.1 = Some(dir);
        Ok(())
    }

    pub fn get(&self) -> MemberState {
        self.inner.lock().unwrap().0.clone()
    }

    /// Applies `f` to a copy; when it answers Ok the copy is saved and becomes
    /// the state, else nothing changes. A failed save answers Internal (etcd
    /// cannot fail here short of stopping; the change is not made).
    pub fn update<T>(&self, f: impl FnOnce(&mut MemberState) -> Result<T, Status>) -> Result<T, Status> {
        let mut g = self.inner.lock().unwrap();
        let mut next = g.0.clone();
        let out = f(&mut next)?;
        if next != g.0 {
            if let Some(dir) = &g.1 {
                crate::state_file::replace(dir, FILE, &encode(&next)).map_err(|e| Status::internal(format!("saving {}: {e}", dir.join(FILE).display())))?;
            }
            g.0 = next;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_corruption_and_restart() {
        let s = MemberState { peer_urls: vec!["http://127.0.0.1:2380".into(), "http://10.0.0.1:2380".into()], downgrade: Some("3.5.0".into()) };
        let b = encode(&s);
        assert_eq!(decode(&b).unwrap(), s);
        assert_eq!(decode(&encode(&MemberState::default())).unwrap(), MemberState::default());
        let mut bad = b.clone();
        bad[13] ^= 1;
        assert!(decode(&bad).is_err());
        assert!(decode(&b[..b.len() - 1]).is_err());

        let dir = std::env::temp_dir().join(format!("member-state-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let m = Member::new(vec!["http://flag:2380".into()]);
        m.keep_in(dir.clone()).unwrap();
        assert_eq!(m.get().peer_urls, vec!["http://flag:2380".to_string()], "no file yet: the flag's URLs");
        m.update(|s| {
            s.peer_urls = vec!["http://new:2380".into()];
            s.downgrade = Some("3.5.0".into());
            Ok(())
        })
        .unwrap();
        let refused: Result<(), Status> = m.update(|s| {
            s.downgrade = None;
            Err(Status::failed_precondition("refused"))
        });
        assert!(refused.is_err());
        let again = Member::new(vec!["http://flag:2380".into()]);
        again.keep_in(dir.clone()).unwrap();
        assert_eq!(again.get(), MemberState { peer_urls: vec!["http://new:2380".into()], downgrade: Some("3.5.0".into()) });
        fs::remove_dir_all(&dir).unwrap();
    }
}
