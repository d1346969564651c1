//! etcd's auth store (server/auth/store.go): users, roles, the enabled flag
//! and the auth revision; authentication (bcrypt passwords, simple tokens, the
//! client certificate's common name); the permission checks every request
//! passes through. docs/design.md §7.
//!
//! Hot path: every check starts with one atomic load of `enabled` and returns
//! at once when auth is off. When it is on, a check takes the state's read lock
//! (writers are the rare auth RPCs) and looks the user's merged intervals up.
pub mod cn;
pub mod jwt;
pub mod ops;
pub mod perm;
pub mod persist;
pub mod token;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use tonic::{Code, Status};

use perm::{Perm, UserPerms};
use token::SimpleTokens;

pub const ROOT_USER: &str = "root";
pub const ROOT_ROLE: &str = "root";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The bcrypt hash (text); empty for a user without password.
    pub password: String,
    pub no_password: bool,
    /// Sorted.
    pub roles: Vec<String>,
}

impl User {
    fn has_root_role(&self) -> bool {
        self.roles.binary_search_by(|r| r.as_str().cmp(ROOT_ROLE)).is_ok()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    /// Sorted by key, as etcd keeps them.
    pub perms: Vec<Perm>,
}

/// What is persisted (persist.rs): etcd's `auth`, `authUsers`, `authRoles` buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub enabled: bool,
    pub revision: u64,
    pub users: BTreeMap<String, User>,
    pub roles: BTreeMap<String, Role>,
}

/// etcd's auth errors, with their gRPC code and text (rpctypes/error.go).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthError {
    RootUserNotExist,
    RootRoleNotExist,
    UserAlreadyExist,
    UserEmpty,
    UserNotFound,
    RoleAlreadyExist,
    RoleNotFound,
    RoleEmpty,
    AuthFailed,
    /// Not mapped by etcd's server: clients get Unknown with the auth package's text.
    NoPasswordUser,
    PermissionNotGiven,
    PermissionDenied,
    RoleNotGranted,
    PermissionNotGranted,
    AuthNotEnabled,
    InvalidAuthToken,
    InvalidAuthMgmt,
    AuthOldRevision,
    /// Anything else (bcrypt, disk): Unknown with this text, as etcd's togRPCError.
    Other(String),
}

impl AuthError {
    pub fn message(&self) -> &str {
        match self {
            AuthError::RootUserNotExist => "etcdserver: root user does not exist",
            AuthError::RootRoleNotExist => "etcdserver: root user does not have root role",
            AuthError::UserAlreadyExist => "etcdserver: user name already exists",
            AuthError::UserEmpty => "etcdserver: user name is empty",
            AuthError::UserNotFound => "etcdserver: user name not found",
            AuthError::RoleAlreadyExist => "etcdserver: role name already exists",
            AuthError::RoleNotFound => "etcdserver: role name not found",
            AuthError::RoleEmpty => "etcdserver: role name is empty",
            AuthError::AuthFailed => "etcdserver: authentication failed, invalid user ID or password",
            AuthError::NoPasswordUser => "auth: authentication failed, password was given for no password user",
            AuthError::PermissionNotGiven => "etcdserver: permission not given",
            AuthError::PermissionDenied => "etcdserver: permission denied",
            AuthError::RoleNotGranted => "etcdserver: role is not granted to the user",
            AuthError::PermissionNotGranted => "etcdserver: permission is not granted to the role",
            AuthError::AuthNotEnabled => "etcdserver: authentication is not enabled",
            AuthError::InvalidAuthToken => "etcdserver: invalid auth token",
            AuthError::InvalidAuthMgmt => "etcdserver: invalid auth management",
            AuthError::AuthOldRevision => "etcdserver: revision of auth store is old",
            AuthError::Other(s) => s,
        }
    }

    pub fn code(&self) -> Code {
        match self {
            AuthError::UserEmpty
            | AuthError::RoleEmpty
            | AuthError::AuthFailed
            | AuthError::PermissionNotGiven
            | AuthError::InvalidAuthMgmt
            | AuthError::AuthOldRevision => Code::InvalidArgument,
            AuthError::PermissionDenied => Code::PermissionDenied,
            AuthError::InvalidAuthToken => Code::Unauthenticated,
            AuthError::NoPasswordUser | AuthError::Other(_) => Code::Unknown,
            _ => Code::FailedPrecondition,
        }
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Status {
        Status::new(e.code(), e.message())
    }
}

pub type Result<T> = std::result::Result<T, AuthError>;

/// Who a request runs as: etcd's AuthInfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthInfo {
    pub user: String,
    /// The auth revision the identity was established at.
    pub rev: u64,
}

/// What a request brings to identify its caller: the `token` (or
/// `authorization`) metadata, and with --client-cert-auth the common name of
/// its verified client certificate.
#[derive(Clone, Debug, Default)]
pub struct Creds {
    pub token: Option<String>,
    pub cn: Option<String>,
}

struct Inner {
    state: State,
    /// Each user's merged permissions (etcd's rangePermCache).
    perms: HashMap<String, UserPerms>,
}

fn merged_perms(s: &State) -> HashMap<String, UserPerms> {
    s.users
        .iter()
        .map(|(name, u)| {
            let perms = u.roles.iter().filter_map(|r| s.roles.get(r)).flat_map(|r| r.perms.iter());
            (name.clone(), UserPerms::merge(perms))
        })
        .collect()
}

/// A user's password as UserAdd / UserChangePassword received it, hashed (or
/// decoded) before the store is locked, as etcd hashes before proposing.
pub enum Password {
    /// bcrypt hash text.
    Hashed(String),
    None,
}

pub struct AuthStore {
    enabled: AtomicBool,
    revision: AtomicU64,
    inner: RwLock<Inner>,
    tokens: SimpleTokens,
    /// `--auth-token jwt,...`: signed tokens instead of simple ones.
    jwt: Option<jwt::JwtTokens>,
    bcrypt_cost: u32,
    /// Where auth.state is kept; None: memory only.
    dir: Option<PathBuf>,
}

impl AuthStore {
    /// `bcrypt_cost` outside bcrypt's 4..=31 falls back to 10, as etcd's.
    pub fn new(bcrypt_cost: u32, token_ttl: Duration, dir: Option<PathBuf>) -> Result<Self> {
        Self::new_restored(bcrypt_cost, token_ttl, dir, None)
    }

    /// `new`, but starting from `restored` (a snapshot's auth state, encoded as
    /// auth.state is) instead of what `dir` holds; it is saved there at once.
    pub fn new_restored(bcrypt_cost: u32, token_ttl: Duration, dir: Option<PathBuf>, restored: Option<&[u8]>) -> Result<Self> {
        let cost = if (4..=31).contains(&bcrypt_cost) { bcrypt_cost } else { 10 };
        let restored = restored.map(|b| persist::decode(b).map_err(|e| AuthError::Other(format!("restored auth state: {e}")))).transpose()?;
        let mut state = match (&restored, &dir) {
            (Some(s), _) => s.clone(),
            (None, Some(d)) => persist::load(d).map_err(AuthError::Other)?.unwrap_or_default(),
            (None, None) => State::default(),
        };
        // etcd starts a new auth store at revision 1.
        let fresh = state.revision == 0;
        if fresh {
            state.revision = 1;
        }
        let fresh = fresh || restored.is_some();
        let s = AuthStore {
            enabled: AtomicBool::new(state.enabled),
            revision: AtomicU64::new(state.revision),
            inner: RwLock::new(Inner { perms: merged_perms(&state), state }),
            tokens: SimpleTokens::new(token_ttl),
            jwt: None,
            bcrypt_cost: cost,
            dir,
        };
        if fresh {
            if let Some(d) = &s.dir {
                match persist::save(d, &s.inner.read().state) {
                    Ok(()) => {}
                    // A restored state is in no other file of the directory: it must be written.
                    Err(e) if restored.is_some() => return Err(AuthError::Other(format!("saving auth state in {}: {e}", d.display()))),
                    // A fresh default state is the same whether saved or not (a
                    // start on a full disk goes on): the first auth change saves it.
                    Err(e) => eprintln!("meganode-store: warning: saving the initial auth state in {} failed: {e}; it is saved at the first auth change", d.display()),
                }
            }
        }
        Ok(s)
    }

    /// Memory only, default cost and TTL (tests, in-process servers).
    pub fn in_memory() -> Self {
        Self::new(10, Duration::from_secs(300), None).expect("no disk")
    }

    /// Issues JWT tokens instead of simple ones.
    pub fn with_jwt(mut self, j: jwt::JwtTokens) -> Self {
        self.jwt = Some(j);
        self
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// The whole state as auth.state holds it, for the Maintenance Snapshot.
    pub fn encoded_state(&self) -> Vec<u8> {
        persist::encode(&self.inner.read().state)
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    pub fn bcrypt_cost(&self) -> u32 {
        self.bcrypt_cost
    }

    /// Applies `f` to a copy of the state; if it succeeds and changed something
    /// (`Ok(true)`), the revision moves on (`bump`), the copy is saved and
    /// takes the old one's place.
    fn mutate(&self, bump: bool, f: impl FnOnce(&mut State) -> Result<bool>) -> Result<()> {
        let mut g = self.inner.write();
        let mut next = g.state.clone();
        if !f(&mut next)? {
            return Ok(());
        }
        if bump {
            next.revision += 1;
        }
        if let Some(d) = &self.dir {
            persist::save(d, &next).map_err(|e| AuthError::Other(format!("saving auth state: {e}")))?;
        }
        g.perms = merged_perms(&next);
        self.revision.store(next.revision, Ordering::Release);
        self.enabled.store(next.enabled, Ordering::Release);
        g.state = next;
        Ok(())
    }

    /// etcd's AuthEnable: needs user root with role root; enabling twice is a no-op; the revision stays.
    pub fn enable(&self) -> Result<()> {
        self.mutate(false, |s| {
            if s.enabled {
                return Ok(false);
            }
            let root = s.users.get(ROOT_USER).ok_or(AuthError::RootUserNotExist)?;
            if !root.has_root_role() {
                return Err(AuthError::RootRoleNotExist);
            }
            s.enabled = true;
            Ok(true)
        })
    }

    /// etcd's AuthDisable: drops every token; the revision moves on.
    pub fn disable(&self) -> Result<()> {
        self.mutate(true, |s| {
            if !s.enabled {
                return Ok(false);
            }
            s.enabled = false;
            Ok(true)
        })?;
        self.tokens.clear();
        Ok(())
    }

    pub fn status(&self) -> (bool, u64) {
        let g = self.inner.read();
        (g.state.enabled, g.state.revision)
    }

    /// etcd's CheckPassword: the auth revision the password was checked at.
    /// Runs bcrypt: call it off the async threads.
    pub fn check_password(&self, name: &str, password: &str) -> Result<u64> {
        let (hash, rev) = {
            let g = self.inner.read();
            if !g.state.enabled {
                return Err(AuthError::AuthNotEnabled);
            }
            let u = g.state.users.get(name).ok_or(AuthError::AuthFailed)?;
            if u.no_password {
                return Err(AuthError::NoPasswordUser);
            }
            (u.password.clone(), g.state.revision)
        };
        match bcrypt::verify(password, &hash) {
            Ok(true) => Ok(rev),
            _ => Err(AuthError::AuthFailed),
        }
    }

    /// etcd's Authenticate: checks the password, then issues a token, again if
    /// the auth store changed in between. Runs bcrypt.
    pub fn authenticate(&self, name: &str, password: &str) -> Result<String> {
        loop {
            let checked = self.check_password(name, password)?;
            let token = {
                let g = self.inner.read();
                if !g.state.enabled {
                    return Err(AuthError::AuthNotEnabled);
                }
                match g.state.users.get(name) {
                    Some(u) if !u.no_password => {}
                    _ => return Err(AuthError::AuthFailed),
                }
                match &self.jwt {
                    Some(j) => j.assign(name, g.state.revision)?,
                    None => self.tokens.assign(name),
                }
            };
            if checked == self.revision() {
                return Ok(token);
            }
        }
    }

    /// Hashes a password as etcd's server does before proposing UserAdd /
    /// UserChangePassword, or decodes a given hash (base64 of the bcrypt text).
    /// Runs bcrypt.
    pub fn hash_password(&self, password: &str, hashed: &str) -> Result<Password> {
        if !password.is_empty() || hashed.is_empty() {
            return match bcrypt::non_truncating_hash(password, self.bcrypt_cost) {
                Ok(h) => Ok(Password::Hashed(h)),
                Err(bcrypt::BcryptError::Truncation(_)) => Err(AuthError::Other("bcrypt: password length exceeds 72 bytes".into())),
                Err(e) => Err(AuthError::Other(e.to_string())),
            };
        }
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD.decode(hashed).map_err(|_| AuthError::NoPasswordUser)?;
        Ok(Password::Hashed(String::from_utf8(raw).map_err(|_| AuthError::NoPasswordUser)?))
    }

    pub fn user_add(&self, name: &str, password: Password, no_password: bool) -> Result<()> {
        if name.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        self.mutate(true, |s| {
            if s.users.contains_key(name) {
                return Err(AuthError::UserAlreadyExist);
            }
            let password = match (no_password, password) {
                (false, Password::Hashed(h)) => h,
                _ => String::new(),
            };
            s.users.insert(name.to_string(), User { password, no_password, roles: Vec::new() });
            Ok(true)
        })
    }

    pub fn user_delete(&self, name: &str) -> Result<()> {
        if self.enabled() && name == ROOT_USER {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.mutate(true, |s| s.users.remove(name).map(|_| true).ok_or(AuthError::UserNotFound))?;
        self.tokens.invalidate_user(name);
        Ok(())
    }

    pub fn user_change_password(&self, name: &str, password: Password) -> Result<()> {
        self.mutate(true, |s| {
            let u = s.users.get_mut(name).ok_or(AuthError::UserNotFound)?;
            if !u.no_password {
                u.password = match password {
                    Password::Hashed(h) => h,
                    Password::None => String::new(),
                };
            }
            Ok(true)
        })?;
        self.tokens.invalidate_user(name);
        Ok(())
    }

    pub fn user_grant_role(&self, name: &str, role: &str) -> Result<()> {
        self.mutate(true, |s| {
            if role != ROOT_ROLE && !s.roles.contains_key(role) {
                // etcd looks the user up first.
                s.users.get(name).ok_or(AuthError::UserNotFound)?;
                return Err(AuthError::RoleNotFound);
            }
            let u = s.users.get_mut(name).ok_or(AuthError::UserNotFound)?;
            match u.roles.binary_search_by(|r| r.as_str().cmp(role)) {
                Ok(_) => Ok(false),
                Err(i) => {
                    u.roles.insert(i, role.to_string());
                    Ok(true)
                }
            }
        })
    }

    pub fn user_revoke_role(&self, name: &str, role: &str) -> Result<()> {
        if self.enabled() && name == ROOT_USER && role == ROOT_ROLE {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.mutate(true, |s| {
            let u = s.users.get_mut(name).ok_or(AuthError::UserNotFound)?;
            let before = u.roles.len();
            u.roles.retain(|r| r != role);
            if u.roles.len() == before {
                return Err(AuthError::RoleNotGranted);
            }
            Ok(true)
        })
    }

    /// The user's roles.
    pub fn user_get(&self, name: &str) -> Result<Vec<String>> {
        self.inner.read().state.users.get(name).map(|u| u.roles.clone()).ok_or(AuthError::UserNotFound)
    }

    pub fn user_list(&self) -> Vec<String> {
        self.inner.read().state.users.keys().cloned().collect()
    }

    pub fn role_add(&self, name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(AuthError::RoleEmpty);
        }
        self.mutate(true, |s| {
            if s.roles.contains_key(name) {
                return Err(AuthError::RoleAlreadyExist);
            }
            s.roles.insert(name.to_string(), Role::default());
            Ok(true)
        })
    }

    /// The role's permissions; root's is READWRITE on every key, as etcd shows it.
    pub fn role_get(&self, name: &str) -> Result<Vec<Perm>> {
        let g = self.inner.read();
        let r = g.state.roles.get(name).ok_or(AuthError::RoleNotFound)?;
        if name == ROOT_ROLE {
            return Ok(vec![Perm { perm_type: perm::READWRITE, key: Vec::new(), range_end: vec![0] }]);
        }
        Ok(r.perms.clone())
    }

    pub fn role_list(&self) -> Vec<String> {
        self.inner.read().state.roles.keys().cloned().collect()
    }

    /// Deletes the role and takes it from every user.
    pub fn role_delete(&self, name: &str) -> Result<()> {
        if self.enabled() && name == ROOT_ROLE {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.mutate(true, |s| {
            s.roles.remove(name).ok_or(AuthError::RoleNotFound)?;
            for u in s.users.values_mut() {
                u.roles.retain(|r| r != name);
            }
            Ok(true)
        })
    }

    /// Adds a permission, or changes the type of the one with the same key and range end.
    pub fn role_grant_permission(&self, name: &str, p: Option<Perm>) -> Result<()> {
        let p = p.ok_or(AuthError::PermissionNotGiven)?;
        if !perm::valid_range(&p.key, &p.range_end) {
            return Err(AuthError::InvalidAuthMgmt);
        }
        self.mutate(true, |s| {
            let r = s.roles.get_mut(name).ok_or(AuthError::RoleNotFound)?;
            let i = r.perms.partition_point(|q| q.key < p.key);
            if i < r.perms.len() && r.perms[i].key == p.key && r.perms[i].range_end == p.range_end {
                r.perms[i].perm_type = p.perm_type;
            } else {
                r.perms.push(p);
                r.perms.sort_by(|a, b| a.key.cmp(&b.key));
            }
            Ok(true)
        })
    }

    pub fn role_revoke_permission(&self, name: &str, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.mutate(true, |s| {
            let r = s.roles.get_mut(name).ok_or(AuthError::RoleNotFound)?;
            let before = r.perms.len();
            r.perms.retain(|p| p.key != key || p.range_end != range_end);
            if r.perms.len() == before {
                return Err(AuthError::PermissionNotGranted);
            }
            Ok(true)
        })
    }

    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.inner.read().state.users.get(user).is_some_and(|u| u.roles.iter().any(|r| r == role))
    }

    /// etcd's AuthInfoFromCtx then AuthInfoFromTLS: nobody while auth is off;
    /// a token must be live; without one, the certificate's common name.
    pub fn info(&self, c: &Creds) -> Result<Option<AuthInfo>> {
        if !self.enabled() {
            return Ok(None);
        }
        if let Some(t) = &c.token {
            if let Some(j) = &self.jwt {
                // A JWT carries the auth revision it was issued at.
                return match j.info(t) {
                    Some((user, rev)) => Ok(Some(AuthInfo { user, rev })),
                    None => Err(AuthError::InvalidAuthToken),
                };
            }
            let rev = self.revision();
            return match self.tokens.user_of(t) {
                Some(user) => Ok(Some(AuthInfo { user, rev })),
                None => Err(AuthError::InvalidAuthToken),
            };
        }
        Ok(c.cn.as_ref().map(|cn| AuthInfo { user: cn.clone(), rev: self.revision() }))
    }

    /// etcd's isOpPermitted: `range_end` empty for one key, "\0" for every key from `key`.
    pub fn check(&self, ai: Option<&AuthInfo>, write: bool, key: &[u8], range_end: &[u8]) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(ai) = ai.filter(|a| a.rev != 0) else {
            return Err(AuthError::UserEmpty);
        };
        if ai.rev < self.revision() {
            return Err(AuthError::AuthOldRevision);
        }
        let g = self.inner.read();
        let Some(u) = g.state.users.get(&ai.user) else {
            return Err(AuthError::PermissionDenied);
        };
        if u.has_root_role() {
            return Ok(());
        }
        match g.perms.get(&ai.user) {
            Some(p) if p.permits(write, key, range_end) => Ok(()),
            _ => Err(AuthError::PermissionDenied),
        }
    }

    pub fn check_read(&self, ai: Option<&AuthInfo>, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.check(ai, false, key, range_end)
    }

    pub fn check_write(&self, ai: Option<&AuthInfo>, key: &[u8], range_end: &[u8]) -> Result<()> {
        self.check(ai, true, key, range_end)
    }

    /// etcd's IsAdminPermitted: the caller has the root role.
    pub fn check_admin(&self, ai: Option<&AuthInfo>) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(ai) = ai.filter(|a| !a.user.is_empty()) else {
            return Err(AuthError::UserEmpty);
        };
        match self.inner.read().state.users.get(&ai.user) {
            None => Err(AuthError::UserNotFound),
            Some(u) if !u.has_root_role() => Err(AuthError::PermissionDenied),
            Some(_) => Ok(()),
        }
    }

    /// etcd's requireAuthInfo: with auth on, the request must identify its caller.
    pub fn require(&self, ai: Option<&AuthInfo>) -> Result<()> {
        if self.enabled() && ai.is_none() {
            return Err(AuthError::UserEmpty);
        }
        Ok(())
    }

    /// etcd's doSerialize epilogue: a read answered under an identity whose
    /// auth revision has moved on since is refused.
    pub fn check_unchanged(&self, ai: Option<&AuthInfo>) -> Result<()> {
        match ai {
            Some(a) if a.rev != 0 && a.rev != self.revision() => Err(AuthError::AuthOldRevision),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> AuthStore {
        AuthStore::new(4, Duration::from_secs(300), None).unwrap()
    }

    fn pw(s: &AuthStore, p: &str) -> Password {
        s.hash_password(p, "").unwrap()
    }

    #[test]
    fn root_rules_and_revisions() {
        let s = store();
        assert_eq!(s.status(), (false, 1));
        assert_eq!(s.enable(), Err(AuthError::RootUserNotExist));
        s.user_add("root", pw(&s, "rootpw"), false).unwrap();
        assert_eq!(s.enable(), Err(AuthError::RootRoleNotExist));
        assert_eq!(s.user_add("root", pw(&s, "x"), false), Err(AuthError::UserAlreadyExist));
        assert_eq!(s.user_add("", Password::None, true), Err(AuthError::UserEmpty));
        s.user_grant_role("root", "root").unwrap();
        assert_eq!(s.status(), (false, 3));
        s.user_grant_role("root", "root").unwrap();
        assert_eq!(s.status(), (false, 3), "a duplicate grant changes nothing");
        s.enable().unwrap();
        assert_eq!(s.status(), (true, 3), "enable keeps the revision");
        assert_eq!(s.user_delete("root"), Err(AuthError::InvalidAuthMgmt));
        assert_eq!(s.user_revoke_role("root", "root"), Err(AuthError::InvalidAuthMgmt));
        assert_eq!(s.role_delete("root"), Err(AuthError::InvalidAuthMgmt));
        assert_eq!(s.check_password("root", "bad"), Err(AuthError::AuthFailed));
        assert_eq!(s.check_password("nobody", "bad"), Err(AuthError::AuthFailed));
        let t = s.authenticate("root", "rootpw").unwrap();
        let ai = s.info(&Creds { token: Some(t.clone()), cn: None }).unwrap();
        assert_eq!(ai, Some(AuthInfo { user: "root".into(), rev: 3 }));
        assert_eq!(s.info(&Creds { token: Some("x.1".into()), cn: None }), Err(AuthError::InvalidAuthToken));
        s.disable().unwrap();
        assert_eq!(s.status(), (false, 4));
        assert_eq!(s.info(&Creds { token: Some(t), cn: None }), Ok(None), "auth off: nobody, no error");
        assert_eq!(s.authenticate("root", "rootpw"), Err(AuthError::AuthNotEnabled));
    }

    #[test]
    fn permissions_follow_roles() {
        let s = store();
        s.user_add("root", pw(&s, "r"), false).unwrap();
        s.user_grant_role("root", "root").unwrap();
        s.user_add("u", pw(&s, "p"), false).unwrap();
        s.user_add("svc", Password::None, true).unwrap();
        assert_eq!(s.user_grant_role("u", "ro"), Err(AuthError::RoleNotFound));
        assert_eq!(s.user_grant_role("nobody", "ro"), Err(AuthError::UserNotFound));
        s.role_add("ro").unwrap();
        assert_eq!(s.role_add("ro"), Err(AuthError::RoleAlreadyExist));
        s.role_grant_permission("ro", Some(Perm { perm_type: perm::READ, key: b"/a/".to_vec(), range_end: b"/a0".to_vec() })).unwrap();
        assert_eq!(s.role_grant_permission("ro", None), Err(AuthError::PermissionNotGiven));
        assert_eq!(
            s.role_grant_permission("ro", Some(Perm { perm_type: perm::READ, key: b"b".to_vec(), range_end: b"a".to_vec() })),
            Err(AuthError::InvalidAuthMgmt)
        );
        s.user_grant_role("u", "ro").unwrap();
        assert_eq!(s.check_read(None, b"/a/x", b""), Ok(()), "auth off: everything");
        s.enable().unwrap();
        let rev = s.revision();
        let u = AuthInfo { user: "u".into(), rev };
        assert_eq!(s.check_read(None, b"/a/x", b""), Err(AuthError::UserEmpty));
        assert_eq!(s.check_read(Some(&u), b"/a/x", b""), Ok(()));
        assert_eq!(s.check_write(Some(&u), b"/a/x", b""), Err(AuthError::PermissionDenied));
        assert_eq!(s.check_admin(Some(&u)), Err(AuthError::PermissionDenied));
        assert_eq!(s.check_admin(Some(&AuthInfo { user: "ghost".into(), rev })), Err(AuthError::UserNotFound));
        assert_eq!(s.check_admin(None), Err(AuthError::UserEmpty));
        assert_eq!(s.authenticate("svc", ""), Err(AuthError::NoPasswordUser));
        s.role_grant_permission("ro", Some(Perm { perm_type: perm::READWRITE, key: b"/a/".to_vec(), range_end: b"/a0".to_vec() })).unwrap();
        assert_eq!(s.role_get("ro").unwrap().len(), 1, "same key and end: the type changes");
        assert_eq!(s.check_write(Some(&u), b"/a/x", b""), Err(AuthError::AuthOldRevision));
        let u = AuthInfo { user: "u".into(), rev: s.revision() };
        assert_eq!(s.check_write(Some(&u), b"/a/x", b""), Ok(()));
        assert_eq!(s.role_revoke_permission("ro", b"/a/", b""), Err(AuthError::PermissionNotGranted));
        s.role_delete("ro").unwrap();
        assert_eq!(s.user_get("u").unwrap(), Vec::<String>::new(), "deleting a role takes it from its users");
        let u = AuthInfo { user: "u".into(), rev: s.revision() };
        assert_eq!(s.check_read(Some(&u), b"/a/x", b""), Err(AuthError::PermissionDenied));
        assert_eq!(s.role_get("root"), Err(AuthError::RoleNotFound));
        s.role_add("root").unwrap();
        assert_eq!(s.role_get("root").unwrap()[0].range_end, vec![0]);
        assert_eq!(s.user_list(), ["root", "svc", "u"]);
    }

    #[test]
    fn state_survives_reopen() {
        let dir = std::env::temp_dir().join(format!("auth-reopen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        {
            let s = AuthStore::new(4, Duration::from_secs(300), Some(dir.clone())).unwrap();
            s.user_add("root", pw(&s, "r"), false).unwrap();
            s.user_grant_role("root", "root").unwrap();
            s.enable().unwrap();
        }
        let s = AuthStore::new(4, Duration::from_secs(300), Some(dir.clone())).unwrap();
        assert_eq!(s.status(), (true, 3));
        assert!(s.enabled());
        assert_eq!(s.check_password("root", "r"), Ok(3));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn restored_state_replaces_the_directorys() {
        let snap = {
            let s = AuthStore::new(4, Duration::from_secs(300), None).unwrap();
            s.user_add("root", pw(&s, "r"), false).unwrap();
            s.user_grant_role("root", "root").unwrap();
            s.enable().unwrap();
            s.encoded_state()
        };
        let dir = std::env::temp_dir().join(format!("auth-restore-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        AuthStore::new(4, Duration::from_secs(300), Some(dir.clone())).unwrap();
        let s = AuthStore::new_restored(4, Duration::from_secs(300), Some(dir.clone()), Some(&snap)).unwrap();
        assert_eq!(s.status(), (true, 3));
        // Saved at once: the next start (without the snapshot) has it.
        let s = AuthStore::new(4, Duration::from_secs(300), Some(dir.clone())).unwrap();
        assert_eq!(s.status(), (true, 3));
        assert_eq!(s.check_password("root", "r"), Ok(3));
        assert!(AuthStore::new_restored(4, Duration::from_secs(300), None, Some(b"garbage")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
