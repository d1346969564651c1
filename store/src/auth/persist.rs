//! The auth state on disk: `<data-dir>/auth.state`, the whole state in one
//! file (crate::state_file), replaced by every auth mutation before it is
//! answered (etcd commits them at once too: ForceCommit) — the form of etcd's
//! `auth`, `authUsers` and `authRoles` buckets. Format (little-endian):
//!
//! ```text
//! "MGNAUTH1" | enabled:u8 | revision:u64 | n_users:u32 | user* | n_roles:u32 | role* | crc32c:u32
//! user: name | password (bcrypt hash text, empty without one) | no_password:u8 | n_roles:u32 | name*
//! role: name | n_perms:u32 | (perm_type:u8 | key | range_end)*
//! name, password, key, range_end: len:u32 | bytes
//! ```
use std::fs;
use std::path::Path;

use super::perm::Perm;
use super::{Role, State, User};
use crate::state_file::{put_bytes, seal, Reader};

const MAGIC: &[u8; 8] = b"MGNAUTH1";
pub const FILE: &str = "auth.state";

pub fn encode(s: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    out.push(s.enabled as u8);
    out.extend_from_slice(&s.revision.to_le_bytes());
    out.extend_from_slice(&(s.users.len() as u32).to_le_bytes());
    for (name, u) in &s.users {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, u.password.as_bytes());
        out.push(u.no_password as u8);
        out.extend_from_slice(&(u.roles.len() as u32).to_le_bytes());
        for r in &u.roles {
            put_bytes(&mut out, r.as_bytes());
        }
    }
    out.extend_from_slice(&(s.roles.len() as u32).to_le_bytes());
    for (name, r) in &s.roles {
        put_bytes(&mut out, name.as_bytes());
        out.extend_from_slice(&(r.perms.len() as u32).to_le_bytes());
        for p in &r.perms {
            out.push(p.perm_type as u8);
            put_bytes(&mut out, &p.key);
            put_bytes(&mut out, &p.range_end);
        }
    }
    seal(out)
}

pub fn decode(b: &[u8]) -> Result<State, String> {
    let mut r = Reader::open(b, MAGIC, FILE, "an auth state file")?;
    let mut s = State { enabled: r.u8()? != 0, revision: r.u64()?, ..Default::default() };
    for _ in 0..r.u32()? {
        let name = r.string()?;
        let password = r.string()?;
        let no_password = r.u8()? != 0;
        let roles = (0..r.u32()?).map(|_| r.string()).collect::<Result<Vec<_>, _>>()?;
        s.users.insert(name, User { password, no_password, roles });
    }
    for _ in 0..r.u32()? {
        let name = r.string()?;
        let mut perms = Vec::new();
        for _ in 0..r.u32()? {
            let perm_type = r.u8()? as i32;
            perms.push(Perm { perm_type, key: r.bytes()?, range_end: r.bytes()? });
        }
        s.roles.insert(name, Role { perms });
    }
    r.finish()?;
    Ok(s)
}

/// Replaces the file with `s`, durably.
pub fn save(dir: &Path, s: &State) -> std::io::Result<()> {
    crate::state_file::replace(dir, FILE, &encode(s))
}

/// The saved state, if there is one.
pub fn load(dir: &Path) -> Result<Option<State>, String> {
    match fs::read(dir.join(FILE)) {
        Ok(b) => decode(&b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", dir.join(FILE).display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let mut s = State { enabled: true, revision: 7, ..Default::default() };
        s.users.insert("root".into(), User { password: "$2b$04$abc".into(), no_password: false, roles: vec!["root".into()] });
        s.users.insert("svc".into(), User { password: String::new(), no_password: true, roles: vec![] });
        s.roles.insert("r".into(), Role { perms: vec![Perm { perm_type: 2, key: b"/a".to_vec(), range_end: vec![0] }] });
        let b = encode(&s);
        assert_eq!(decode(&b).unwrap(), s);
        let mut bad = b.clone();
        bad[12] ^= 1;
        assert!(decode(&bad).is_err());
        assert!(decode(&b[..b.len() - 1]).is_err());
        let dir = std::env::temp_dir().join(format!("auth-persist-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(load(&dir).unwrap(), None);
        save(&dir, &s).unwrap();
        assert_eq!(load(&dir).unwrap(), Some(s));
        fs::remove_dir_all(&dir).unwrap();
    }
}
