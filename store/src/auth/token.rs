//! etcd's simple tokens (server/auth/simple_token.go): `<16 random letters>.<n>`,
//! held in memory only (a restart invalidates them, as in etcd), each valid
//! for the TTL (`--auth-token-ttl`, 300 s) since it was issued or last used.
//! Deleting a user or changing its password drops its tokens; disabling auth
//! drops all.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const PREFIX_LEN: usize = 16;

pub struct SimpleTokens {
    ttl: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// token -> (user, expiry)
    tokens: HashMap<String, (String, Instant)>,
    /// The number after the dot (etcd puts its raft index there).
    next_index: u64,
    /// When expired tokens were last swept out.
    swept: Option<Instant>,
}

fn random_prefix() -> String {
    let mut raw = [0u8; PREFIX_LEN];
    getrandom::getrandom(&mut raw).expect("OS randomness");
    // 256 % 52 != 0: reject the top values so every letter is equally likely.
    let mut out = String::with_capacity(PREFIX_LEN);
    let mut i = 0;
    while out.len() < PREFIX_LEN {
        if i == raw.len() {
            getrandom::getrandom(&mut raw).expect("OS randomness");
            i = 0;
        }
        let b = raw[i];
        i += 1;
        if (b as usize) < 256 - 256 % LETTERS.len() {
            out.push(LETTERS[b as usize % LETTERS.len()] as char);
        }
    }
    out
}

impl SimpleTokens {
    pub fn new(ttl: Duration) -> Self {
        let ttl = if ttl.is_zero() { Duration::from_secs(300) } else { ttl };
        SimpleTokens { ttl, inner: Mutex::new(Inner { next_index: 1, ..Default::default() }) }
    }

    /// A new token for `user`.
    pub fn assign(&self, user: &str) -> String {
        let token = self.new_token();
        self.insert(&token, user);
        token
    }

    /// A new token's text, not yet valid (`insert`): a replicated group's
    /// leader makes it, and every member inserts it as its log says.
    pub fn new_token(&self) -> String {
        let mut g = self.inner.lock();
        let index = g.next_index;
        g.next_index += 1;
        format!("{}.{index}", random_prefix())
    }

    /// Makes `token` valid for `user` for the TTL.
    pub fn insert(&self, token: &str, user: &str) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        // Expired tokens go at most once a second (etcd's keeper ticks at 1 s).
        if g.swept.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            g.tokens.retain(|_, (_, exp)| *exp > now);
            g.swept = Some(now);
        }
        g.tokens.insert(token.to_string(), (user.to_string(), now + self.ttl));
    }

    /// The user of a live token, whose TTL starts again.
    pub fn user_of(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut g = self.inner.lock();
        let (user, exp) = g.tokens.get_mut(token)?;
        if *exp <= now {
            g.tokens.remove(token);
            return None;
        }
        *exp = now + self.ttl;
        Some(user.clone())
    }

    pub fn invalidate_user(&self, user: &str) {
        self.inner.lock().tokens.retain(|_, (u, _)| u != user);
    }

    pub fn clear(&self) {
        self.inner.lock().tokens.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_refresh_and_drop() {
        let t = SimpleTokens::new(Duration::from_millis(200));
        let a = t.assign("alice");
        let (prefix, n) = a.split_once('.').unwrap();
        assert_eq!(prefix.len(), 16);
        assert!(prefix.bytes().all(|b| b.is_ascii_alphabetic()));
        assert_eq!(n, "1");
        assert_eq!(t.user_of(&a).as_deref(), Some("alice"));
        assert_eq!(t.user_of("nope.1"), None);
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(120));
            assert_eq!(t.user_of(&a).as_deref(), Some("alice"), "use refreshes the TTL");
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.user_of(&a), None);
        let b = t.assign("bob");
        let c = t.assign("carol");
        t.invalidate_user("bob");
        assert_eq!(t.user_of(&b), None);
        assert_eq!(t.user_of(&c).as_deref(), Some("carol"));
        t.clear();
        assert_eq!(t.user_of(&c), None);
    }
}
