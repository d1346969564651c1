//! Member and cluster IDs as etcd computes them for a new cluster, so that the
//! same flags give a store group the IDs an etcd cluster would report
//! (MemberList, response headers) and two groups started with different
//! --initial-cluster-token values never take each other's peers.
//!
//! member ID = the first 8 bytes (big-endian) of SHA-1(sorted peer URLs joined | token)
//! cluster ID = the first 8 bytes of SHA-1(the member IDs in ascending order, 8 bytes big-endian each)
use ring::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};

/// etcd's default --initial-cluster-token.
pub const DEFAULT_TOKEN: &str = "etcd-cluster";

pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    member_id_with(peer_urls, token, None)
}

/// The ID of a member added to a running group (MemberAdd): etcd appends the
/// time of the call in seconds, so a member removed and added again with the
/// same URLs gets a new ID.
pub fn member_id_at(peer_urls: &[String], token: &str, unix_secs: i64) -> u64 {
    member_id_with(peer_urls, token, Some(unix_secs))
}

fn member_id_with(peer_urls: &[String], token: &str, unix_secs: Option<i64>) -> u64 {
    let mut urls: Vec<&str> = peer_urls.iter().map(|s| s.as_str()).collect();
    urls.sort_unstable();
    let mut b = urls.concat().into_bytes();
    b.extend_from_slice(token.as_bytes());
    if let Some(t) = unix_secs {
        b.extend_from_slice(t.to_string().as_bytes());
    }
    first_u64(&b)
}

pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let b: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    first_u64(&b)
}

fn first_u64(b: &[u8]) -> u64 {
    let h = digest(&SHA1_FOR_LEGACY_USE_ONLY, b);
    u64::from_be_bytes(h.as_ref()[..8].try_into().expect("SHA-1 has 20 bytes"))
}

/// The members of --initial-cluster (NAME=URL, a name may repeat for several
/// URLs) with their IDs, in the order first named.
pub fn members(initial_cluster: &[(String, String)], token: &str) -> Vec<(String, Vec<String>, u64)> {
    let mut out: Vec<(String, Vec<String>, u64)> = Vec::new();
    for (name, url) in initial_cluster {
        match out.iter_mut().find(|m| m.0 == *name) {
            Some(m) => m.1.push(url.clone()),
            None => out.push((name.clone(), vec![url.clone()], 0)),
        }
    }
    for m in &mut out {
        m.2 = member_id(&m.1, token);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures etcd 3.6.16's own code gives for these flags
    /// (`membership.NewMember`, `membership.NewClusterFromURLsMap` with
    /// `m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2381` and the default token).
    #[test]
    fn ids_are_etcd_s() {
        let ms = members(&[("m0".into(), "http://127.0.0.1:2380".into()), ("m1".into(), "http://127.0.0.1:2381".into())], DEFAULT_TOKEN);
        assert_eq!((ms[0].2, ms[1].2), (13195394291058371180, 708162861580590150));
        assert_eq!(cluster_id(&[ms[0].2, ms[1].2]), 3863317401740711618);
    }

    #[test]
    fn ids_follow_urls_and_token_only() {
        let a = member_id(&["http://127.0.0.1:2380".into()], DEFAULT_TOKEN);
        assert_eq!(a, member_id(&["http://127.0.0.1:2380".into()], DEFAULT_TOKEN));
        assert_ne!(a, member_id(&["http://127.0.0.1:2380".into()], "other"));
        let two = member_id(&["http://b:2380".into(), "http://a:2380".into()], "t");
        assert_eq!(two, member_id(&["http://a:2380".into(), "http://b:2380".into()], "t"), "URLs sorted");
        assert_eq!(cluster_id(&[3, 1, 2]), cluster_id(&[1, 2, 3]));
        assert_ne!(cluster_id(&[1, 2, 3]), cluster_id(&[1, 2]));
        let added = member_id_at(&["http://a:1".into()], "t", 1_700_000_000);
        assert_ne!(added, member_id(&["http://a:1".into()], "t"));
        assert_ne!(added, member_id_at(&["http://a:1".into()], "t", 1_700_000_001));
        let ms = members(
            &[("m0".into(), "http://a:1".into()), ("m1".into(), "http://b:1".into()), ("m0".into(), "http://a:2".into())],
            "t",
        );
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].1, vec!["http://a:1", "http://a:2"]);
        assert_eq!(ms[0].2, member_id(&["http://a:1".into(), "http://a:2".into()], "t"));
    }
}
