//! Auth changes as values (etcd's InternalRaftRequest auth fields): what a
//! replicated group's log carries so every member applies the same changes
//! in the same order, and what a single member applies at once. Passwords
//! travel hashed (the proposer runs bcrypt, as etcd's server does before it
//! proposes); a simple token travels whole, so every member knows it.
//!
//! ```text
//! "MGNAUTHC" | op:u8 | fields | crc32c:u32   (crate::state_file's form)
//!   1 enable  2 disable                                 (no fields)
//!   3 user add        name | hash | no_password:u8     (hash: bcrypt text, empty without one)
//!   4 user delete     name
//!   5 change password name | hash
//!   6 grant role      user | role      7 revoke role   user | role
//!   8 role add        name             9 role delete   name
//!  10 grant perm      role | given:u8 | (perm_type:i32 | key | range_end if given)
//!  11 revoke perm     role | key | range_end
//!  12 token           user | token | auth revision:u64  (a simple token Authenticate issued)
//! ```
use super::perm::Perm;
use super::{AuthError, AuthStore, Password, Result};
use crate::state_file::{put_bytes, seal, Reader};

const MAGIC: &[u8; 8] = b"MGNAUTHC";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthOp {
    Enable,
    Disable,
    UserAdd { name: String, hash: String, no_password: bool },
    UserDelete { name: String },
    UserChangePassword { name: String, hash: String },
    UserGrantRole { user: String, role: String },
    UserRevokeRole { user: String, role: String },
    RoleAdd { name: String },
    RoleDelete { name: String },
    RoleGrantPermission { role: String, perm: Option<Perm> },
    RoleRevokePermission { role: String, key: Vec<u8>, range_end: Vec<u8> },
    /// A simple token for `user`, checked at auth revision `rev`.
    Token { user: String, token: String, rev: u64 },
}

impl AuthOp {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        let s = |out: &mut Vec<u8>, v: &str| put_bytes(out, v.as_bytes());
        match self {
            AuthOp::Enable => out.push(1),
            AuthOp::Disable => out.push(2),
            AuthOp::UserAdd { name, hash, no_password } => {
                out.push(3);
                s(&mut out, name);
                s(&mut out, hash);
                out.push(*no_password as u8);
            }
            AuthOp::UserDelete { name } => {
                out.push(4);
                s(&mut out, name);
            }
            AuthOp::UserChangePassword { name, hash } => {
                out.push(5);
                s(&mut out, name);
                s(&mut out, hash);
            }
            AuthOp::UserGrantRole { user, role } | AuthOp::UserRevokeRole { user, role } => {
                out.push(if matches!(self, AuthOp::UserGrantRole { .. }) { 6 } else { 7 });
                s(&mut out, user);
                s(&mut out, role);
            }
            AuthOp::RoleAdd { name } | AuthOp::RoleDelete { name } => {
                out.push(if matches!(self, AuthOp::RoleAdd { .. }) { 8 } else { 9 });
                s(&mut out, name);
            }
            AuthOp::RoleGrantPermission { role, perm } => {
                out.push(10);
                s(&mut out, role);
                match perm {
                    Some(p) => {
                        out.push(1);
                        out.extend_from_slice(&p.perm_type.to_le_bytes());
                        put_bytes(&mut out, &p.key);
                        put_bytes(&mut out, &p.range_end);
                    }
                    None => out.push(0),
                }
            }
            AuthOp::RoleRevokePermission { role, key, range_end } => {
                out.push(11);
                s(&mut out, role);
                put_bytes(&mut out, key);
                put_bytes(&mut out, range_end);
            }
            AuthOp::Token { user, token, rev } => {
                out.push(12);
                s(&mut out, user);
                s(&mut out, token);
                out.extend_from_slice(&rev.to_le_bytes());
            }
        }
        seal(out)
    }

    pub fn decode(b: &[u8]) -> std::result::Result<AuthOp, String> {
        let mut r = Reader::open(b, MAGIC, "auth change", "an auth change")?;
        let op = match r.u8()? {
            1 => AuthOp::Enable,
            2 => AuthOp::Disable,
            3 => AuthOp::UserAdd { name: r.string()?, hash: r.string()?, no_password: r.u8()? != 0 },
            4 => AuthOp::UserDelete { name: r.string()? },
            5 => AuthOp::UserChangePassword { name: r.string()?, hash: r.string()? },
            6 => AuthOp::UserGrantRole { user: r.string()?, role: r.string()? },
            7 => AuthOp::UserRevokeRole { user: r.string()?, role: r.string()? },
            8 => AuthOp::RoleAdd { name: r.string()? },
            9 => AuthOp::RoleDelete { name: r.string()? },
            10 => {
                let role = r.string()?;
                let perm = match r.u8()? {
                    0 => None,
                    _ => Some(Perm { perm_type: r.u32()? as i32, key: r.bytes()?, range_end: r.bytes()? }),
                };
                AuthOp::RoleGrantPermission { role, perm }
            }
            11 => AuthOp::RoleRevokePermission { role: r.string()?, key: r.bytes()?, range_end: r.bytes()? },
            12 => AuthOp::Token { user: r.string()?, token: r.string()?, rev: r.u64()? },
            t => return Err(format!("auth change: unknown kind {t}")),
        };
        r.finish()?;
        Ok(op)
    }
}

impl AuthStore {
    /// Applies one change: what the matching RPC does once its password is
    /// hashed and its caller checked.
    pub fn apply(&self, op: AuthOp) -> Result<()> {
        let hashed = |h: String| if h.is_empty() { Password::None } else { Password::Hashed(h) };
        match op {
            AuthOp::Enable => self.enable(),
            AuthOp::Disable => self.disable(),
            AuthOp::UserAdd { name, hash, no_password } => self.user_add(&name, hashed(hash), no_password),
            AuthOp::UserDelete { name } => self.user_delete(&name),
            AuthOp::UserChangePassword { name, hash } => self.user_change_password(&name, Password::Hashed(hash)),
            AuthOp::UserGrantRole { user, role } => self.user_grant_role(&user, &role),
            AuthOp::UserRevokeRole { user, role } => self.user_revoke_role(&user, &role),
            AuthOp::RoleAdd { name } => self.role_add(&name),
            AuthOp::RoleDelete { name } => self.role_delete(&name),
            AuthOp::RoleGrantPermission { role, perm } => self.role_grant_permission(&role, perm),
            AuthOp::RoleRevokePermission { role, key, range_end } => self.role_revoke_permission(&role, &key, &range_end),
            AuthOp::Token { user, token, rev } => {
                let g = self.inner.read();
                if !g.state.enabled {
                    return Err(AuthError::AuthNotEnabled);
                }
                match g.state.users.get(&user) {
                    Some(u) if !u.no_password => {}
                    _ => return Err(AuthError::AuthFailed),
                }
                // The password was checked at `rev`: a change since may have
                // changed it (the proposer checks again).
                if g.state.revision != rev {
                    return Err(AuthError::AuthOldRevision);
                }
                self.tokens.insert(&token, &user);
                Ok(())
            }
        }
    }

    /// A new simple token's text (not yet valid: `AuthOp::Token` makes it so).
    pub fn new_simple_token(&self) -> String {
        self.tokens.new_token()
    }

    /// Whether tokens are JWTs (valid on every member without the log).
    pub fn jwt_tokens(&self) -> bool {
        self.jwt.is_some()
    }

    /// Replaces the whole state with `encoded` (auth.state's form: a replicated
    /// member taking a snapshot); its simple tokens are dropped.
    pub fn replace_state(&self, encoded: &[u8]) -> Result<()> {
        let state = super::persist::decode(encoded).map_err(AuthError::Other)?;
        self.mutate(false, |s| {
            *s = state;
            Ok(true)
        })?;
        self.tokens.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_round_trips_and_a_damaged_one_is_refused() {
        let ops = vec![
            AuthOp::Enable,
            AuthOp::Disable,
            AuthOp::UserAdd { name: "u".into(), hash: "$2b$h".into(), no_password: false },
            AuthOp::UserAdd { name: "n".into(), hash: String::new(), no_password: true },
            AuthOp::UserDelete { name: "u".into() },
            AuthOp::UserChangePassword { name: "u".into(), hash: "x".into() },
            AuthOp::UserGrantRole { user: "u".into(), role: "r".into() },
            AuthOp::UserRevokeRole { user: "u".into(), role: "r".into() },
            AuthOp::RoleAdd { name: "r".into() },
            AuthOp::RoleDelete { name: "r".into() },
            AuthOp::RoleGrantPermission { role: "r".into(), perm: Some(Perm { perm_type: 2, key: b"a".to_vec(), range_end: b"b".to_vec() }) },
            AuthOp::RoleGrantPermission { role: "r".into(), perm: Some(Perm { perm_type: -7, key: Vec::new(), range_end: vec![0] }) },
            AuthOp::RoleGrantPermission { role: "r".into(), perm: None },
            AuthOp::RoleRevokePermission { role: "r".into(), key: b"a".to_vec(), range_end: Vec::new() },
            AuthOp::Token { user: "u".into(), token: "abc.1".into(), rev: 7 },
        ];
        for op in ops {
            let b = op.encode();
            assert_eq!(AuthOp::decode(&b).unwrap(), op);
            let mut bad = b.clone();
            bad[9] ^= 1;
            assert!(AuthOp::decode(&bad).is_err());
        }
    }

    /// Two stores given the same changes end equal, and a token one issues is
    /// valid on the other; a token checked at an older revision is refused.
    #[test]
    fn members_applying_the_same_changes_agree() {
        let (a, b) = (AuthStore::in_memory(), AuthStore::in_memory());
        let hash = match a.hash_password("pw", "").unwrap() {
            Password::Hashed(h) => h,
            Password::None => unreachable!(),
        };
        let ops = [
            AuthOp::UserAdd { name: "root".into(), hash: hash.clone(), no_password: false },
            AuthOp::UserGrantRole { user: "root".into(), role: "root".into() },
            AuthOp::RoleAdd { name: "r".into() },
            AuthOp::UserAdd { name: "u".into(), hash, no_password: false },
            AuthOp::UserGrantRole { user: "u".into(), role: "r".into() },
            AuthOp::Enable,
        ];
        for op in ops {
            assert_eq!(a.apply(op.clone()), b.apply(op));
        }
        assert_eq!(a.encoded_state(), b.encoded_state());
        assert_eq!(a.apply(AuthOp::RoleAdd { name: "r".into() }), Err(AuthError::RoleAlreadyExist));
        let rev = a.check_password("u", "pw").unwrap();
        let token = a.new_simple_token();
        let op = AuthOp::Token { user: "u".into(), token: token.clone(), rev };
        a.apply(op.clone()).unwrap();
        b.apply(op).unwrap();
        let creds = super::super::Creds { token: Some(token), cn: None };
        assert_eq!(b.info(&creds).unwrap().unwrap().user, "u");
        assert_eq!(a.apply(AuthOp::Token { user: "u".into(), token: "t.9".into(), rev: rev - 1 }), Err(AuthError::AuthOldRevision));
    }
}
