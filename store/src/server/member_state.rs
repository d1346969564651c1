//! This member's own state that etcd keeps in its backend (the members and
//! cluster buckets) and a restart must not forget: its peer URLs as
//! MemberUpdate last set them, and the downgrade target Downgrade ENABLE set
//! (CANCEL clears it). Kept in `<data-dir>/member.state` when anything is kept
//! (the auth state's rule), replaced atomically per change as auth.state is
//! (write `.tmp`, fsync, rename, fsync the directory) before the change is
//! answered. Format (little-endian):
//!
//! ```text
//! "MGNMEMB1" | n_urls:u32 | url* | has_downgrade:u8 | target? | crc32c:u32
//! url, target: len:u32 | bytes (UTF-8)
//! ```
//! A restart takes the file over --initial-advertise-peer-urls, as etcd takes
//! its stored membership over the flag once the member exists.
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tonic::Status;

const MAGIC: &[u8; 8] = b"MGNMEMB1";
pub const FILE: &str = "member.state";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    pub peer_urls: Vec<String>,
    pub downgrade: Option<String>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub fn encode(s: &MemberState) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(s.peer_urls.len() as u32).to_le_bytes());
    for u in &s.peer_urls {
        put_str(&mut out, u);
    }
    out.push(s.downgrade.is_some() as u8);
    if let Some(t) = &s.downgrade {
        put_str(&mut out, t);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub fn decode(b: &[u8]) -> Result<MemberState, String> {
    let bad = || "member.state: corrupt".to_string();
    if b.len() < MAGIC.len() + 4 || &b[..8] != MAGIC {
        return Err(bad());
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
        return Err(bad());
    }
    let mut p = &body[8..];
    let u32_ = |p: &mut &[u8]| -> Result<u32, String> {
        let (n, rest) = p.split_at_checked(4).ok_or_else(bad)?;
        *p = rest;
        Ok(u32::from_le_bytes(n.try_into().unwrap()))
    };
    let string = |p: &mut &[u8], n: u32| -> Result<String, String> {
        let (s, rest) = p.split_at_checked(n as usize).ok_or_else(bad)?;
        *p = rest;
        String::from_utf8(s.to_vec()).map_err(|_| bad())
    };
    let mut s = MemberState::default();
    for _ in 0..u32_(&mut p)? {
        let n = u32_(&mut p)?;
        s.peer_urls.push(string(&mut p, n)?);
    }
    let (flag, rest) = p.split_first().ok_or_else(bad)?;
    p = rest;
    if *flag == 1 {
        let n = u32_(&mut p)?;
        s.downgrade = Some(string(&mut p, n)?);
    }
    if !p.is_empty() {
        return Err(bad());
    }
    Ok(s)
}

fn save(dir: &Path, s: &MemberState) -> std::io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&encode(s))?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(FILE))?;
    File::open(dir)?.sync_all()
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
                save(dir, &next).map_err(|e| Status::internal(format!("saving {}: {e}", dir.join(FILE).display())))?;
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
