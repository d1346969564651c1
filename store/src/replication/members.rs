//! What the group knows of each member beyond its raft ID: its name and URLs,
//! as etcd's MemberList reports them. Peer URLs travel in the membership
//! change that adds a member (the context of its `ConfChange`, as etcd's);
//! name and client URLs in an attributes entry each member proposes once it
//! has a leader (etcd's "publish"), so every member can tell a client where
//! the leader is and forward a write there.
//!
//! ```text
//! ConfChange.context = {"name": N, "peerURLs": [...]}          (JSON, etcd's field names)
//! attributes entry   = -1:i64 LE | id:u64 LE | {"name": N, "clientURLs": [...]}
//! peer URLs entry    = -3:i64 LE | id:u64 LE | {"peerURLs": [...]}   (MemberUpdate)
//! roster             = {"cluster": "ID", "members": [{"id": "ID", "name": N, "peerURLs": [...],
//!                       "clientURLs": [...], "isLearner": B}, ...]}
//! ```
//! A roster is what a member joining a running group (--initial-cluster-state
//! existing) asks a peer for: the cluster ID and every member with its ID, as
//! etcd's joining member reads a peer's /members.
use serde_json::{json, Value};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
}

/// The entry revision that marks an attributes entry.
pub const ATTRIBUTES: i64 = -1;
/// The entry revision that marks a member's new peer URLs (MemberUpdate).
pub const PEER_URLS: i64 = -3;

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// A membership change's context: the added member's name and peer URLs.
pub fn encode_context(m: &MemberInfo) -> Vec<u8> {
    json!({"name": m.name, "peerURLs": m.peer_urls}).to_string().into_bytes()
}

/// The name and peer URLs a membership change carries (empty when it carries none).
pub fn decode_context(id: u64, ctx: &[u8]) -> MemberInfo {
    let v: Value = serde_json::from_slice(ctx).unwrap_or(Value::Null);
    MemberInfo { id, name: v["name"].as_str().unwrap_or("").to_string(), peer_urls: strings(&v["peerURLs"]), client_urls: Vec::new() }
}

pub fn encode_attributes(m: &MemberInfo) -> Vec<u8> {
    let mut out = ATTRIBUTES.to_le_bytes().to_vec();
    out.extend_from_slice(&m.id.to_le_bytes());
    out.extend_from_slice(json!({"name": m.name, "clientURLs": m.client_urls}).to_string().as_bytes());
    out
}

/// An attributes entry's body (after its revision): the member, its name and client URLs.
pub fn decode_attributes(body: &[u8]) -> Result<(u64, String, Vec<String>), String> {
    let (id, json) = body.split_at_checked(8).ok_or("attributes entry shorter than its member ID")?;
    let id = u64::from_le_bytes(id.try_into().expect("8 bytes"));
    let v: Value = serde_json::from_slice(json).map_err(|e| format!("attributes of member {id:x}: {e}"))?;
    Ok((id, v["name"].as_str().unwrap_or("").to_string(), strings(&v["clientURLs"])))
}

pub fn encode_peer_urls(id: u64, urls: &[String]) -> Vec<u8> {
    let mut out = PEER_URLS.to_le_bytes().to_vec();
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(json!({"peerURLs": urls}).to_string().as_bytes());
    out
}

/// A peer URLs entry's body (after its revision): the member and its new peer URLs.
pub fn decode_peer_urls(body: &[u8]) -> Result<(u64, Vec<String>), String> {
    let (id, json) = body.split_at_checked(8).ok_or("peer URLs entry shorter than its member ID")?;
    let id = u64::from_le_bytes(id.try_into().expect("8 bytes"));
    let v: Value = serde_json::from_slice(json).map_err(|e| format!("peer URLs of member {id:x}: {e}"))?;
    Ok((id, strings(&v["peerURLs"])))
}

/// A member as a roster lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RosterEntry {
    pub member: MemberInfo,
    pub learner: bool,
}

pub fn encode_roster(cluster: u64, ms: &[RosterEntry]) -> Vec<u8> {
    let list: Vec<Value> = ms
        .iter()
        .map(|e| {
            let m = &e.member;
            json!({"id": m.id.to_string(), "name": m.name, "peerURLs": m.peer_urls, "clientURLs": m.client_urls, "isLearner": e.learner})
        })
        .collect();
    json!({"cluster": cluster.to_string(), "members": list}).to_string().into_bytes()
}

pub fn decode_roster(data: &[u8]) -> Result<(u64, Vec<RosterEntry>), String> {
    let v: Value = serde_json::from_slice(data).map_err(|e| format!("members list: {e}"))?;
    let id = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| format!("members list: bad ID {v}"));
    let cluster = id(&v["cluster"])?;
    let mut out = Vec::new();
    for m in v["members"].as_array().ok_or("members list without members")? {
        let member = MemberInfo { id: id(&m["id"])?, name: m["name"].as_str().unwrap_or("").to_string(), peer_urls: strings(&m["peerURLs"]), client_urls: strings(&m["clientURLs"]) };
        out.push(RosterEntry { member, learner: m["isLearner"].as_bool().unwrap_or(false) });
    }
    Ok((cluster, out))
}

/// A snapshot's data: the sender (the leader the receiver fetches the store's
/// state from) and every member's name and URLs, which the log entries a
/// snapshot replaces carried.
pub fn encode_members(sender: u64, ms: &[MemberInfo]) -> Vec<u8> {
    let list: Vec<Value> = ms.iter().map(|m| json!({"id": m.id.to_string(), "name": m.name, "peerURLs": m.peer_urls, "clientURLs": m.client_urls})).collect();
    json!({"sender": sender.to_string(), "members": list}).to_string().into_bytes()
}

pub fn decode_members(data: &[u8]) -> Result<(u64, Vec<MemberInfo>), String> {
    let v: Value = serde_json::from_slice(data).map_err(|e| format!("snapshot data: {e}"))?;
    let id = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| format!("snapshot data: bad member ID {v}"));
    let sender = id(&v["sender"])?;
    let mut out = Vec::new();
    for m in v["members"].as_array().ok_or("snapshot data without members")? {
        out.push(MemberInfo { id: id(&m["id"])?, name: m["name"].as_str().unwrap_or("").to_string(), peer_urls: strings(&m["peerURLs"]), client_urls: strings(&m["clientURLs"]) });
    }
    Ok((sender, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_and_attributes_round_trip() {
        let m = MemberInfo { id: 7, name: "m0".into(), peer_urls: vec!["http://127.0.0.1:2380".into()], client_urls: vec!["http://127.0.0.1:2379".into()] };
        let ctx = decode_context(7, &encode_context(&m));
        assert_eq!(ctx, MemberInfo { client_urls: Vec::new(), ..m.clone() });
        assert_eq!(decode_context(9, b""), MemberInfo { id: 9, ..Default::default() });
        let a = encode_attributes(&m);
        assert_eq!(i64::from_le_bytes(a[..8].try_into().unwrap()), ATTRIBUTES);
        assert_eq!(decode_attributes(&a[8..]).unwrap(), (7, "m0".to_string(), m.client_urls.clone()));
        assert!(decode_attributes(&a[8..12]).is_err());
        assert!(decode_attributes(&a[8..a.len() - 1]).is_err());
        let (sender, ms) = decode_members(&encode_members(u64::MAX, &[m.clone()])).unwrap();
        assert_eq!((sender, ms), (u64::MAX, vec![m.clone()]));
        assert!(decode_members(b"{}").is_err());
        let p = encode_peer_urls(7, &["http://a:1".to_string()]);
        assert_eq!(i64::from_le_bytes(p[..8].try_into().unwrap()), PEER_URLS);
        assert_eq!(decode_peer_urls(&p[8..]).unwrap(), (7, vec!["http://a:1".to_string()]));
        assert!(decode_peer_urls(&p[8..10]).is_err());
        let roster = vec![RosterEntry { member: m.clone(), learner: false }, RosterEntry { member: MemberInfo { id: 9, ..Default::default() }, learner: true }];
        assert_eq!(decode_roster(&encode_roster(u64::MAX, &roster)).unwrap(), (u64::MAX, roster));
        assert!(decode_roster(b"{\"members\": []}").is_err());
    }
}
