//! A user's merged key permissions and etcd's check of a request against them
//! (server/auth/range_perm_cache.go): every permission of every role of the
//! user becomes an interval `[key, range_end)` in a read and/or a write set;
//! a single key is allowed when an interval holds it, a range `[key, end)` when
//! the intervals that overlap it cover it without a gap.
//!
//! Bounds compare as etcd's `BytesAffineComparable`: the empty byte string is
//! +infinity (a range_end of "\0", "from key", is stored as empty).
use std::cmp::Ordering;

/// etcd's authpb.Permission.Type.
pub const READ: i32 = 0;
pub const WRITE: i32 = 1;
pub const READWRITE: i32 = 2;

/// One permission as a role keeps it (as granted: range_end as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Perm {
    pub perm_type: i32,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

/// Compares two bounds with the empty one as +infinity.
fn cmp_affine(a: &[u8], b: &[u8]) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.cmp(b),
    }
}

fn open_ended(end: &[u8]) -> bool {
    end == [0]
}

/// `[begin, end)`; end empty = +infinity.
#[derive(Clone, Debug)]
struct Interval {
    begin: Vec<u8>,
    end: Vec<u8>,
}

impl Interval {
    /// A permission's interval: a single key is `[key, key + "\0")`.
    fn of_perm(p: &Perm) -> Interval {
        if p.range_end.is_empty() {
            let mut end = p.key.clone();
            end.push(0);
            Interval { begin: p.key.clone(), end }
        } else if open_ended(&p.range_end) {
            Interval { begin: p.key.clone(), end: Vec::new() }
        } else {
            Interval { begin: p.key.clone(), end: p.range_end.clone() }
        }
    }

    fn overlaps(&self, begin: &[u8], end: &[u8]) -> bool {
        cmp_affine(begin, &self.end) == Ordering::Less && cmp_affine(&self.begin, end) == Ordering::Less
    }
}

/// The read and write intervals of one user, sorted by begin.
#[derive(Clone, Debug, Default)]
pub struct UserPerms {
    read: Vec<Interval>,
    write: Vec<Interval>,
}

impl UserPerms {
    pub fn merge<'a>(perms: impl Iterator<Item = &'a Perm>) -> UserPerms {
        let mut u = UserPerms::default();
        for p in perms {
            let ivl = Interval::of_perm(p);
            match p.perm_type {
                READ => u.read.push(ivl),
                WRITE => u.write.push(ivl),
                READWRITE => {
                    u.read.push(ivl.clone());
                    u.write.push(ivl);
                }
                _ => {}
            }
        }
        let by_begin = |a: &Interval, b: &Interval| cmp_affine(&a.begin, &b.begin);
        u.read.sort_by(by_begin);
        u.write.sort_by(by_begin);
        u
    }

    /// etcd's isRangeOpPermitted: `range_end` empty checks the single key;
    /// "\0" means every key from `key` on.
    pub fn permits(&self, write: bool, key: &[u8], range_end: &[u8]) -> bool {
        let set = if write { &self.write } else { &self.read };
        if range_end.is_empty() {
            let mut end = key.to_vec();
            end.push(0);
            return set.iter().any(|i| i.overlaps(key, &end));
        }
        let end: &[u8] = if open_ended(range_end) { &[] } else { range_end };
        // The overlapping intervals, in begin order, must reach from key to end without a gap.
        let mut min_begin: Option<&[u8]> = None;
        let mut max_end: &[u8] = &[];
        for i in set.iter().filter(|i| i.overlaps(key, end)) {
            match min_begin {
                None => {
                    min_begin = Some(&i.begin);
                    max_end = &i.end;
                }
                Some(_) => {
                    if cmp_affine(max_end, &i.begin) == Ordering::Less {
                        return false;
                    }
                    if cmp_affine(&i.end, max_end) == Ordering::Greater {
                        max_end = &i.end;
                    }
                }
            }
        }
        match min_begin {
            None => false,
            Some(b) => cmp_affine(max_end, end) != Ordering::Less && cmp_affine(b, key) != Ordering::Greater,
        }
    }
}

/// etcd's isValidPermissionRange: a key is needed; a range must not be empty
/// or inverted, unless it is "from key".
pub fn valid_range(key: &[u8], range_end: &[u8]) -> bool {
    if key.is_empty() {
        return false;
    }
    range_end.is_empty() || cmp_affine(key, range_end) == Ordering::Less || open_ended(range_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: i32, k: &str, e: &[u8]) -> Perm {
        Perm { perm_type: t, key: k.as_bytes().to_vec(), range_end: e.to_vec() }
    }

    #[test]
    fn keys_ranges_prefixes_and_from_key() {
        let perms = [p(READ, "a", b""), p(READWRITE, "/p/", b"/p0"), p(WRITE, "/q/", b"/q0"), p(READ, "/q0", b"/r"), p(READ, "x", b"\0")];
        let u = UserPerms::merge(perms.iter());
        assert!(u.permits(false, b"a", b""));
        assert!(!u.permits(true, b"a", b""));
        assert!(!u.permits(false, b"a", b"b"), "a single key does not cover a range");
        assert!(u.permits(false, b"/p/x", b""));
        assert!(u.permits(true, b"/p/", b"/p0"));
        assert!(u.permits(false, b"/p/a", b"/p/b"));
        assert!(!u.permits(false, b"/p/", b"/p1"), "past the end");
        assert!(!u.permits(false, b"/q/", b"/q0"), "write only");
        assert!(u.permits(true, b"/q/a", b""));
        assert!(u.permits(false, b"/q0", b"/q5"));
        assert!(u.permits(false, b"x", b"\0"));
        assert!(u.permits(false, b"zzz", b"\0"));
        assert!(u.permits(false, b"y", b""));
        assert!(!u.permits(false, b"w", b"\0"));
        assert!(!u.permits(true, b"x", b""));
    }

    #[test]
    fn adjacent_intervals_cover_together() {
        let perms = [p(READ, "a", b"c"), p(READ, "c", b"e")];
        let u = UserPerms::merge(perms.iter());
        assert!(u.permits(false, b"a", b"e"));
        assert!(u.permits(false, b"b", b"d"));
        let gap = [p(READ, "a", b"c"), p(READ, "d", b"e")];
        let u = UserPerms::merge(gap.iter());
        assert!(!u.permits(false, b"a", b"e"));
    }

    #[test]
    fn valid_ranges() {
        assert!(valid_range(b"a", b""));
        assert!(valid_range(b"a", b"b"));
        assert!(valid_range(b"a", b"\0"));
        assert!(!valid_range(b"b", b"a"));
        assert!(!valid_range(b"a", b"a"));
        assert!(!valid_range(b"", b"a"));
    }
}
