//! Three members in one process over `MemNetwork`, each with its own store:
//! what the leader writes reaches every member's state and watchers, is
//! published only once a quorum holds it, survives the leader's loss, and a
//! member cut off catches up.
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::proto::{PbDeleteRequest, PbPutRequest};

use std::collections::HashMap;

use super::node::SnapshotFetcher;
use super::{MemNetwork, MemberInfo, Replica, ReplicaConfig};
use crate::mvcc::Store;

struct Group {
    net: Arc<MemNetwork>,
    stores: Vec<Arc<Store>>,
    members: Vec<Option<Replica>>,
    /// Each member's store by ID, where a member taking a snapshot fetches it.
    by_id: Arc<parking_lot::Mutex<HashMap<u64, Arc<Store>>>>,
    log_keep: u64,
}

fn config(id: u64) -> ReplicaConfig {
    // Shorter ticks than etcd's 100 ms (elections in ~0.3 s instead of ~1 s), long
    // enough for a loaded 2-core machine not to miss heartbeats.
    ReplicaConfig { tick: Duration::from_millis(25), ..ReplicaConfig::new(id, vec![1, 2, 3]) }
}

impl Group {
    fn start() -> Group {
        Group::start_keeping(5_000)
    }

    /// A group whose members keep `log_keep` entries behind their applied index.
    fn start_keeping(log_keep: u64) -> Group {
        let mut g = Group { net: Arc::new(MemNetwork::default()), stores: Vec::new(), members: Vec::new(), by_id: Arc::default(), log_keep };
        for id in 1..=3u64 {
            let store = Arc::new(Store::new());
            let m = Replica::start(g.config(id), store.clone(), g.net.clone()).unwrap();
            g.net.join(id, m.inbox());
            g.by_id.lock().insert(id, store.clone());
            g.stores.push(store);
            g.members.push(Some(m));
        }
        g
    }

    /// `config(id)` with this group's log length and a snapshot fetcher that
    /// streams the sender's store as its peer listener would.
    fn config(&self, id: u64) -> ReplicaConfig {
        let by_id = self.by_id.clone();
        let fetch = move |m: &MemberInfo, _index: u64| -> Result<Box<dyn std::io::Read + Send>, String> {
            let s = by_id.lock().get(&m.id).cloned().ok_or("no such member")?;
            let mut out = Vec::new();
            crate::snapshot::write_stream(&s, &mut out).map_err(|e| e.to_string())?;
            Ok(Box::new(std::io::Cursor::new(out)))
        };
        ReplicaConfig { log_keep: self.log_keep, fetch_snapshot: Some(SnapshotFetcher(Arc::new(fetch))), ..config(id) }
    }

    /// Member `id` back with an empty store (it lost what it held).
    fn restart_empty(&mut self, id: u64) {
        if let Some(m) = self.members[id as usize - 1].take() {
            m.stop();
        }
        let store = Arc::new(Store::new());
        let m = Replica::start(ReplicaConfig { rejoining: true, ..self.config(id) }, store.clone(), self.net.clone()).unwrap();
        self.net.join(id, m.inbox());
        self.by_id.lock().insert(id, store.clone());
        self.stores[id as usize - 1] = store;
        self.members[id as usize - 1] = Some(m);
    }

    fn member(&self, id: u64) -> &Replica {
        self.members[id as usize - 1].as_ref().expect("running")
    }

    fn store(&self, id: u64) -> &Store {
        &self.stores[id as usize - 1]
    }

    /// The leader every running member outside `except` agrees on, once it may
    /// take writes (it applied every entry before its term's).
    fn leader(&self, except: &[u64]) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen: Vec<u64> = self
                .members
                .iter()
                .flatten()
                .filter(|m| !except.contains(&m.status().id))
                .map(|m| m.status().leader)
                .collect();
            if seen[0] != 0 && !except.contains(&seen[0]) && seen.iter().all(|l| *l == seen[0]) && self.member(seen[0]).status().writable {
                return seen[0];
            }
            assert!(Instant::now() < deadline, "no leader agreed on: {seen:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until `ids`' stores have published `rev`.
    fn wait_published(&self, ids: &[u64], rev: i64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while ids.iter().any(|id| self.store(*id).current_rev() < rev) {
            for id in ids {
                assert_eq!(self.member(*id).status().error, None, "member {id}");
            }
            let revs: Vec<i64> = ids.iter().map(|id| self.store(*id).current_rev()).collect();
            assert!(Instant::now() < deadline, "revision {rev} not published everywhere: {revs:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn assert_same_state(&self, ids: &[u64]) {
        let first = self.store(ids[0]).dump();
        assert!(!first.is_empty());
        for id in &ids[1..] {
            assert!(self.store(*id).dump() == first, "member {id}'s state differs from member {}'s", ids[0]);
        }
    }
}

/// Writes `/registry/nodes/n0..n` with `value`; the last revision.
fn put_nodes(store: &Store, n: usize, value: &str) -> i64 {
    (0..n).map(|i| put(store, &format!("/registry/nodes/n{i}"), value)).last().unwrap_or(0)
}

fn put(store: &Store, key: &str, value: &str) -> i64 {
    let req = PbPutRequest { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec(), ..Default::default() };
    store.put(&req).unwrap().header.unwrap().revision
}

#[test]
fn a_leader_s_writes_reach_every_member_in_order() {
    let g = Group::start();
    let l = g.leader(&[]);
    let followers: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    let mut last = 0;
    for i in 0..300 {
        last = put(g.store(l), &format!("/registry/pods/ns/p{}", i % 50), &format!("v{i}"));
        if i % 7 == 0 {
            put(g.store(l), &format!("/registry/leases/n{}", i % 11), "renew");
        }
    }
    let del = PbDeleteRequest { key: b"/registry/pods/ns/p1".to_vec(), ..Default::default() };
    last = last.max(g.store(l).delete_range(&del).unwrap().header.unwrap().revision);
    let last = last.max(g.store(l).committed_rev());
    g.wait_published(&[1, 2, 3], last);
    g.assert_same_state(&[1, 2, 3]);
    for id in 1..=3 {
        assert_eq!(g.store(id).current_rev(), last, "member {id}");
    }
    // The log every watch stream reads from holds every revision once, in order, on
    // each follower, with the leader's events (prev included: watchers asking prevKV).
    let batches = |id: u64| match g.store(id).hub.read_from(2, usize::MAX) {
        crate::mvcc::watch_hub::LogRead::Batches(b) => b,
        crate::mvcc::watch_hub::LogRead::Gap => panic!("member {id}: the watch log lost its start"),
    };
    let on_leader = batches(l);
    assert_eq!(on_leader.iter().map(|b| b.rev).collect::<Vec<_>>(), (2..=last).collect::<Vec<_>>());
    for f in &followers {
        let got = batches(*f);
        assert_eq!(got.len(), on_leader.len(), "member {f}");
        for (a, b) in on_leader.iter().zip(&got) {
            assert_eq!(a.rev, b.rev);
            let view = |b: &crate::mvcc::watch_hub::RevBatch| b.events.iter().map(|e| (e.key.clone(), e.kv.clone(), e.prev.clone())).collect::<Vec<_>>();
            assert!(view(a) == view(b), "member {f}: revision {} differs", a.rev);
        }
    }
}

#[test]
fn a_revision_is_published_only_once_a_quorum_holds_it() {
    let g = Group::start();
    let l = g.leader(&[]);
    let before = put(g.store(l), "/registry/pods/ns/a", "1");
    g.wait_published(&[1, 2, 3], before);
    let followers: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    for f in &followers {
        g.net.cut(*f);
    }
    let rev = put(g.store(l), "/registry/pods/ns/a", "2");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(g.store(l).committed_rev(), rev, "applied on the leader");
    assert_eq!(g.store(l).current_rev(), before, "not published without a quorum");
    g.net.heal(followers[0]);
    g.wait_published(&[l, followers[0]], rev);
    g.net.heal(followers[1]);
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
}

#[test]
fn writes_go_on_after_the_leader_is_lost_and_a_cut_member_catches_up() {
    let mut g = Group::start();
    let l = g.leader(&[]);
    let mut rev = put_nodes(g.store(l), 50, "ready");
    g.wait_published(&[1, 2, 3], rev);
    // The leader dies.
    g.net.cut(l);
    g.members[l as usize - 1].take().unwrap().stop();
    let l2 = g.leader(&[l]);
    assert_ne!(l2, l);
    let other = (1..=3).find(|id| *id != l && *id != l2).unwrap();
    rev = put_nodes(g.store(l2), 50, "renewed");
    g.wait_published(&[l2, other], rev);
    g.assert_same_state(&[l2, other]);
    // A member cut off while the writes go on catches up when it returns.
    g.net.cut(other);
    let mut cut_rev = rev;
    let t0 = Instant::now();
    // Two members of three: l2 alone is no quorum, so nothing is published until `other` returns.
    for i in 0..20 {
        cut_rev = put(g.store(l2), &format!("/registry/pods/ns/q{i}"), "x");
    }
    assert_eq!(g.store(l2).current_rev(), rev, "no quorum, nothing published");
    g.net.heal(other);
    g.wait_published(&[l2, other], cut_rev);
    assert!(t0.elapsed() < Duration::from_secs(10));
    g.assert_same_state(&[l2, other]);
}

/// A leader cut off applies writes no quorum will hold; the others elect a new
/// leader that hands the same revisions to other writes. When the old leader
/// returns, its driver sees a committed revision it holds differently and stops
/// applying with the reason (rolling back is planned, docs/design.md §10).
#[test]
fn a_deposed_leader_s_speculative_writes_are_detected() {
    let g = Group::start();
    let l = g.leader(&[]);
    let base = put(g.store(l), "/registry/pods/ns/a", "1");
    g.wait_published(&[1, 2, 3], base);
    g.net.cut(l);
    let lost = put(g.store(l), "/registry/pods/ns/a", "lost");
    assert_eq!(g.store(l).current_rev(), base, "never published");
    let l2 = g.leader(&[l]);
    let other = (1..=3).find(|id| *id != l && *id != l2).unwrap();
    let won = put(g.store(l2), "/registry/pods/ns/a", "won");
    assert_eq!(won, lost, "the new leader hands out the same revision");
    g.wait_published(&[l2, other], won);
    g.net.heal(l);
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        if let Some(e) = g.member(l).status().error {
            break e;
        }
        assert!(Instant::now() < deadline, "the old leader's divergence went unnoticed");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(why.contains(&format!("revision {won}")), "{why}");
    assert_eq!(g.store(l).current_rev(), base, "its lost write was never published");
    // It takes no further part; the others go on.
    let again = put(g.store(l2), "/registry/pods/ns/a", "after");
    g.wait_published(&[l2, other], again);
    assert!(!g.member(l).status().writable);
}

/// Three members over real connections on loopback (`peer`), with etcd's IDs:
/// TCP, or TLS with `tls` (https:// peer URLs).
struct TcpGroup {
    rt: tokio::runtime::Runtime,
    urls: Vec<String>,
    addrs: Vec<std::net::SocketAddr>,
    ids: Vec<u64>,
    cluster: u64,
    errors: Vec<Arc<super::peer::PeerErrors>>,
    stores: Vec<Arc<Store>>,
    members: Vec<Replica>,
}

impl TcpGroup {
    fn start(tls: Option<Arc<super::peer_tls::PeerTls>>) -> TcpGroup {
        use super::identity;
        use super::peer::{self, PeerTransport};
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listeners: Vec<std::net::TcpListener> = (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs: Vec<std::net::SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let urls: Vec<String> = addrs.iter().map(|a| format!("{scheme}://{a}")).collect();
        let ids: Vec<u64> = urls.iter().map(|u| identity::member_id(std::slice::from_ref(u), "t")).collect();
        let cluster = identity::cluster_id(&ids);
        let errors: Vec<Arc<super::peer::PeerErrors>> = (0..3).map(|_| Arc::default()).collect();
        let (mut stores, mut members) = (Vec::new(), Vec::new());
        for (i, l) in listeners.into_iter().enumerate() {
            let peers: Vec<(u64, String)> = (0..3).filter(|j| *j != i).map(|j| (ids[j], urls[j].clone())).collect();
            let transport = PeerTransport::start(rt.handle(), cluster, ids[i], &peers, tls.clone());
            let store = Arc::new(Store::new());
            let cfg = ReplicaConfig { tick: Duration::from_millis(25), ..ReplicaConfig::new(ids[i], ids.clone()) };
            let m = Replica::start(cfg, store.clone(), transport).unwrap();
            l.set_nonblocking(true).unwrap();
            let l = {
                let _g = rt.enter();
                tokio::net::TcpListener::from_std(l).unwrap()
            };
            rt.spawn(peer::serve(l, tls.clone(), cluster, ids[i], m.inbox(), errors[i].clone(), peer::Extras::default()));
            stores.push(store);
            members.push(m);
        }
        TcpGroup { rt, urls, addrs, ids, cluster, errors, stores, members }
    }

    /// The index of the member every member follows, once it can write.
    fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen: Vec<u64> = self.members.iter().map(|m| m.status().leader).collect();
            let at = self.ids.iter().position(|id| *id == seen[0]);
            if seen[0] != 0 && seen.iter().all(|l| *l == seen[0]) && at.is_some_and(|i| self.members[i].status().writable) {
                return at.unwrap();
            }
            assert!(Instant::now() < deadline, "no leader over the peer connections: {seen:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// 200 writes on the leader reach every member, whose states are then equal.
    fn replicates(&self, leader: usize) {
        let mut rev = 0;
        for i in 0..200 {
            let req = PbPutRequest { key: format!("/registry/pods/ns/p{i}").into_bytes(), value: b"v".to_vec(), ..Default::default() };
            rev = self.stores[leader].put(&req).unwrap().header.unwrap().revision;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.stores.iter().any(|s| s.current_rev() < rev) {
            assert!(Instant::now() < deadline, "not replicated: {:?}", self.stores.iter().map(|s| s.current_rev()).collect::<Vec<_>>());
            std::thread::sleep(Duration::from_millis(2));
        }
        let first = self.stores[0].dump();
        assert!(self.stores.iter().all(|s| s.dump() == first));
        for m in &self.members {
            assert_eq!(m.status().error, None);
        }
    }
}

/// Three members over real TCP connections on loopback: writes reach every
/// member; a peer of another cluster and a garbled frame are refused and the
/// group goes on.
#[test]
fn members_replicate_over_tcp_and_refuse_strangers() {
    use std::io::{Read, Write};
    let g = TcpGroup::start(None);
    let TcpGroup { addrs, ids, cluster, errors, members, .. } = &g;
    let cluster = *cluster;
    let leader = g.leader();
    // A stranger: the right magic, another cluster's ID.
    let mut s = std::net::TcpStream::connect(addrs[leader]).unwrap();
    let mut hs = Vec::from(*b"MGNPEER1");
    hs.extend_from_slice(&(cluster ^ 1).to_be_bytes());
    hs.extend_from_slice(&42u64.to_be_bytes());
    hs.extend_from_slice(&ids[leader].to_be_bytes());
    s.write_all(&hs).unwrap();
    let mut status = [9u8; 1];
    s.read_exact(&mut status).unwrap();
    assert_eq!(status[0], 1, "cluster ID mismatch");
    assert_eq!(s.read(&mut status).unwrap(), 0, "and the connection is closed");
    // A member of this cluster whose frame is garbled (its CRC does not match).
    let mut s = std::net::TcpStream::connect(addrs[leader]).unwrap();
    let follower = (leader + 1) % 3;
    let mut hs = Vec::from(*b"MGNPEER1");
    hs.extend_from_slice(&cluster.to_be_bytes());
    hs.extend_from_slice(&ids[follower].to_be_bytes());
    hs.extend_from_slice(&ids[leader].to_be_bytes());
    s.write_all(&hs).unwrap();
    s.read_exact(&mut status).unwrap();
    assert_eq!(status[0], 0);
    s.write_all(&[5, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9, 9, 9]).unwrap();
    assert_eq!(s.read(&mut status).unwrap(), 0, "a garbled frame ends the connection");
    g.replicates(leader);
    assert_eq!(errors[leader].cluster_mismatch.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(errors[leader].bad_frames.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Every pair stays connected, followers too (they exchange no raft
    // messages, only keepalives): a leader elected later counts each voter
    // connected since the link came up (etcd's ActiveSince), not since it won.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pairs: Vec<(usize, usize)> = (0..3).flat_map(|i| (0..3).filter(move |j| *j != i).map(move |j| (i, j))).collect();
        let down: Vec<&(usize, usize)> = pairs.iter().filter(|(i, j)| !members[*i].connected_for(ids[*j], Duration::from_millis(500))).collect();
        if down.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "members not connected for 500 ms (member, peer): {down:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A CA and a certificate it signed for 127.0.0.1 (PEM: CA, certificate, key).
fn test_ca_and_cert() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    (ca.pem().into_bytes(), cert.pem().into_bytes(), key.serialize_pem().into_bytes())
}

/// Peer TLS (etcd's --peer-cert-file, --peer-key-file, --peer-trusted-ca-file):
/// three members over https:// peer URLs replicate as over TCP; a peer whose
/// certificate the CA did not sign, one that speaks plain TCP, and a member
/// dialling https without peer TLS are refused, and the group goes on.
#[test]
fn members_replicate_over_peer_tls_and_refuse_other_certificates() {
    use super::peer;
    use super::peer_tls::{self, PeerTls};
    let (ca, cert, key) = test_ca_and_cert();
    let server = crate::transport::tls::server_config_of("peer-", &cert, &key, Some(&ca)).unwrap();
    let client = peer_tls::client_config(&cert, &key, Some(&ca)).unwrap();
    let g = TcpGroup::start(Some(Arc::new(PeerTls::new(server, client))));
    let leader = g.leader();
    g.replicates(leader);
    let url = &g.urls[leader];
    // A stranger with a certificate of its own (as --peer-auto-tls makes): the
    // listener asks for one its CA signed.
    let (other_cert, other_key) = {
        let k = rcgen::KeyPair::generate().unwrap();
        let c = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().self_signed(&k).unwrap();
        (c.pem().into_bytes(), k.serialize_pem().into_bytes())
    };
    let own_ca = peer_tls::client_config(&other_cert, &other_key, None).unwrap();
    let server = crate::transport::tls::server_config_of("peer-", &other_cert, &other_key, None).unwrap();
    let stranger = PeerTls::new(server, own_ca);
    let refused = |tls: Option<&PeerTls>, url: String| g.rt.block_on(peer::connect_forward(tls, g.cluster, g.ids[(leader + 1) % 3], g.ids[leader], &url)).is_err();
    assert!(refused(Some(&stranger), url.clone()), "a peer certificate another CA signed was taken");
    assert!(refused(None, url.replace("https://", "http://")), "plain TCP was taken on a TLS peer listener");
    assert!(refused(None, url.clone()), "an https peer URL was dialled without peer TLS");
    // The stranger's side: a member whose CA did not sign the leader's certificate refuses it.
    let (other_ca, _, _) = test_ca_and_cert();
    let server = crate::transport::tls::server_config_of("peer-", &cert, &key, Some(&other_ca)).unwrap();
    let wrong_ca = PeerTls::new(server, peer_tls::client_config(&cert, &key, Some(&other_ca)).unwrap());
    assert!(refused(Some(&wrong_ca), url.clone()), "a server certificate this member's CA did not sign was taken");
    assert!(g.errors[leader].bad_frames.load(std::sync::atomic::Ordering::Relaxed) >= 2, "the refused handshakes are counted");
    g.replicates(leader);
}

/// ReadIndex: a read on any member waits for a revision that covers every write
/// acknowledged before it; a member cut off from the quorum gets no answer.
#[test]
fn a_linearizable_read_on_a_follower_sees_the_leader_s_acknowledged_writes() {
    let g = Group::start();
    let l = g.leader(&[]);
    let f = (1..=3).find(|id| *id != l).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for i in 0..20 {
        let rev = put(g.store(l), "/registry/pods/ns/r", &format!("{i}"));
        // Acknowledged: published on the leader (its answer waits for this).
        g.wait_published(&[l], rev);
        let read = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), g.member(f).read_index()).await }).unwrap().unwrap();
        assert!(read >= rev, "read index revision {read} before the acknowledged {rev}");
        rt.block_on(g.store(f).wait_visible(read));
        let got = g.store(f).range(&etcd_client::proto::PbRangeRequest { key: b"/registry/pods/ns/r".to_vec(), ..Default::default() }).unwrap();
        assert_eq!(got.kvs[0].value, format!("{i}").into_bytes(), "the follower's read after its ReadIndex");
    }
    // The leader cut off: its ReadIndex needs a quorum's heartbeats, which never come.
    g.net.cut(l);
    let r = rt.block_on(async { tokio::time::timeout(Duration::from_millis(300), g.member(l).read_index()).await });
    assert!(!matches!(r, Ok(Ok(_))), "a leader without its quorum answered a linearizable read");
}

/// A member that comes back without its log (a memory-only member restarted)
/// does not campaign or vote while it has heard from no leader, then catches up.
#[test]
fn a_rejoining_member_catches_up_before_it_votes() {
    let mut g = Group::start();
    let l = g.leader(&[]);
    let mut rev = put_nodes(g.store(l), 100, "ready");
    g.wait_published(&[1, 2, 3], rev);
    let x = (1..=3).find(|id| *id != l).unwrap();
    g.members[x as usize - 1].take().unwrap().stop();
    // It returns empty, and nobody reaches it at first.
    g.net.cut(x);
    let store = Arc::new(Store::new());
    let m = Replica::start(ReplicaConfig { rejoining: true, ..config(x) }, store.clone(), g.net.clone()).unwrap();
    g.net.join(x, m.inbox());
    g.stores[x as usize - 1] = store;
    g.members[x as usize - 1] = Some(m);
    std::thread::sleep(Duration::from_millis(800)); // over 3 election timeouts of these tests
    let st = g.member(x).status();
    assert!(st.catching_up && st.term == 0 && st.leader == 0, "a rejoining member campaigned: {st:?}");
    g.net.heal(x);
    for i in 0..10 {
        rev = put(g.store(l), &format!("/registry/pods/ns/p{i}"), "x");
    }
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.member(x).status().catching_up {
        assert!(Instant::now() < deadline, "still catching up: {:?}", g.member(x).status());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(g.member(x).status().error, None);
}

/// A member restarted empty under its own ID while the group is idle: the
/// leader, which counted it as holding every entry, hears where its log ends
/// and sends the log again (without the report raft-rs takes its refusals as
/// stale, and a heartbeat's commit past its log would stop it).
#[test]
fn a_member_restarted_empty_catches_up_with_an_idle_group() {
    let mut g = Group::start();
    let l = g.leader(&[]);
    let rev = put_nodes(g.store(l), 300, "ready");
    g.wait_published(&[1, 2, 3], rev);
    let x = (1..=3).find(|id| *id != l).unwrap();
    g.members[x as usize - 1].take().unwrap().stop();
    let store = Arc::new(Store::new());
    let m = Replica::start(ReplicaConfig { rejoining: true, ..config(x) }, store.clone(), g.net.clone()).unwrap();
    g.net.join(x, m.inbox());
    g.stores[x as usize - 1] = store;
    g.members[x as usize - 1] = Some(m);
    g.wait_published(&[x], rev);
    g.assert_same_state(&[1, 2, 3]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.member(x).status().catching_up {
        assert!(Instant::now() < deadline, "still catching up: {:?}", g.member(x).status());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(g.member(l).status().leader, l, "the restart did not disturb the leader");
}

/// A follower told the leader's connection closed campaigns at once, and wins
/// if the other follower saw it too; one that alone saw a close of a live
/// leader's connection deposes nobody (the other follower still counts the
/// leader's lease and refuses its pre-vote). Elections here take at least 5 s
/// on their own (50 ticks of 100 ms): any leader change sooner is the early one.
#[test]
fn followers_that_see_the_leader_s_connection_close_elect_at_once() {
    let net = Arc::new(MemNetwork::default());
    let mut members: Vec<Option<Replica>> = Vec::new();
    for id in 1..=3u64 {
        let cfg = ReplicaConfig { tick: Duration::from_millis(100), election_ticks: 50, ..ReplicaConfig::new(id, vec![1, 2, 3]) };
        let m = Replica::start(cfg, Arc::new(Store::new()), net.clone()).unwrap();
        net.join(id, m.inbox());
        members.push(Some(m));
    }
    let status = |ms: &Vec<Option<Replica>>, id: u64| ms[id as usize - 1].as_ref().unwrap().status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let l = loop {
        if let Some(l) = (1..=3).find(|id| status(&members, *id).writable) {
            break l;
        }
        assert!(Instant::now() < deadline, "no first leader");
        std::thread::sleep(Duration::from_millis(10));
    };
    let others: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    let term = status(&members, l).term;
    // One follower alone sees a close: the live leader stays.
    let _ = members[others[0] as usize - 1].as_ref().unwrap().inbox().send(super::Input::PeerClosed(l));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(status(&members, l).writable && status(&members, l).term == term, "a live leader was deposed: {:?}", status(&members, l));
    // The leader dies; both followers see its connections close.
    members[l as usize - 1].take().unwrap().stop();
    net.cut(l);
    let start = Instant::now();
    for o in &others {
        let _ = members[*o as usize - 1].as_ref().unwrap().inbox().send(super::Input::PeerClosed(l));
    }
    loop {
        if others.iter().any(|o| status(&members, *o).writable) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(4), "no early election: {:?}", others.iter().map(|o| status(&members, *o)).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The leader's compaction reaches every member through the log: the same
/// compaction point and the same history everywhere.
#[test]
fn a_compaction_reaches_every_member() {
    let g = Group::start();
    let l = g.leader(&[]);
    put_nodes(g.store(l), 50, "a");
    let mid = put_nodes(g.store(l), 50, "b");
    let rev = put_nodes(g.store(l), 50, "c");
    g.wait_published(&[1, 2, 3], rev);
    g.store(l).compact(mid).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (1..=3).any(|id| g.store(id).compacted_rev() != mid) {
        assert!(Instant::now() < deadline, "compaction points: {:?}", (1..=3).map(|id| g.store(id).compacted_rev()).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(5));
    }
    // The compaction point is set before the history is walked.
    while (2..=3).any(|id| g.store(id).dump() != g.store(1).dump()) {
        assert!(Instant::now() < deadline, "the members' histories differ after the compaction");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Members keep 20 entries behind their applied index: a member restarted
/// empty after the leader dropped the entries it lacks takes a snapshot (the
/// leader's store, fetched), then the log after it; one cut off while holding
/// state is told to restart empty (it cannot take a snapshot over its state yet).
#[test]
fn a_member_behind_the_leader_s_log_takes_a_snapshot() {
    let mut g = Group::start_keeping(20);
    let l = g.leader(&[]);
    let lease = g.store(l).grant_lease(0, 600).unwrap().0;
    let mut rev = put_nodes(g.store(l), 200, "ready");
    g.wait_published(&[1, 2, 3], rev);
    let x = (1..=3).find(|id| *id != l).unwrap();
    g.members[x as usize - 1].take().unwrap().stop();
    // Long enough for the leader to stop counting x as active (check-quorum rounds).
    std::thread::sleep(Duration::from_millis(600));
    for i in 0..200 {
        rev = put(g.store(l), &format!("/registry/pods/ns/p{i}"), "x");
    }
    g.wait_published(&[l], rev);
    let first = g.member(l).status().log_first_index;
    assert!(first > 200, "the leader kept its log from index {first}");
    g.restart_empty(x);
    rev = put(g.store(l), "/registry/pods/ns/after", "y");
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
    assert!(g.store(x).leases.exists(lease), "the snapshot's lease");
    assert_eq!(g.member(x).status().error, None);

    // A follower cut off while holding state, past the log: told to restart empty.
    let y = (1..=3).find(|id| *id != l && *id != x).unwrap();
    g.net.cut(y);
    std::thread::sleep(Duration::from_millis(600));
    for i in 0..200 {
        rev = put(g.store(l), &format!("/registry/configmaps/ns/c{i}"), "z");
    }
    g.wait_published(&[l, x], rev);
    g.net.heal(y);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = g.member(y).status().error {
            assert!(e.contains("restart it with an empty store"), "{e}");
            break;
        }
        assert!(Instant::now() < deadline, "the cut-off member neither caught up nor stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    g.restart_empty(y);
    g.wait_published(&[y], rev);
    g.assert_same_state(&[1, 2, 3]);
}

/// etcd's membership calls on the driver: a learner added to a running group
/// learns the membership and the data from the log and does not vote; promoted,
/// it counts in the quorum; a member removed no longer does; MoveLeader hands
/// leadership to the named voter.
#[test]
fn members_are_added_as_learners_promoted_removed_and_lead_on_request() {
    use super::Membership;
    let mut g = Group::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let change = |rx: tokio::sync::oneshot::Receiver<Result<Membership, String>>| {
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), rx).await }).expect("answered in time").expect("not dropped")
    };
    let l = g.leader(&[]);
    let rev = put_nodes(g.store(l), 100, "ready");
    // Member 4 joins: an empty member (no founding log), then MemberAdd --learner.
    let store4 = Arc::new(Store::new());
    let m4 = Replica::start(ReplicaConfig { voters: Vec::new(), ..config(4) }, store4.clone(), g.net.clone()).unwrap();
    g.net.join(4, m4.inbox());
    g.stores.push(store4);
    g.members.push(Some(m4));
    let ms = change(g.member(l).add_learner(4)).unwrap();
    assert_eq!(ms, Membership { voters: vec![1, 2, 3], learners: vec![4] });
    g.wait_published(&[1, 2, 3, 4], rev);
    g.assert_same_state(&[1, 2, 3, 4]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.member(4).status().members != ms {
        assert!(Instant::now() < deadline, "the learner's membership: {:?}", g.member(4).status().members);
        std::thread::sleep(Duration::from_millis(5));
    }
    // A follower is refused a membership change; a second learner for 4 is no change.
    let f = (1..=3).find(|id| *id != l).unwrap();
    assert!(change(g.member(f).promote(4)).is_err(), "only the leader changes the membership");
    // Promoted: four voters, so the leader and one founding member (two of three
    // before) are no quorum without 4.
    let ms = change(g.member(l).promote(4)).unwrap();
    assert_eq!(ms, Membership { voters: vec![1, 2, 3, 4], learners: vec![] });
    let others: Vec<u64> = (1..=3).filter(|id| *id != l).collect();
    g.net.cut(others[0]);
    g.net.cut(4);
    let before = g.store(l).current_rev();
    let r2 = put(g.store(l), "/registry/pods/ns/with-4", "x");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(g.store(l).current_rev(), before, "two of four voters published a write");
    g.net.heal(4);
    g.wait_published(&[l, 4], r2);
    g.net.heal(others[0]);
    // Removed: the cut member no longer counts.
    let ms = change(g.member(l).remove(others[1])).unwrap();
    assert_eq!(ms.voters, (1..=4).filter(|id| *id != others[1]).collect::<Vec<_>>());
    g.net.cut(others[1]);
    g.members[others[1] as usize - 1].take().unwrap().stop();
    let r3 = put(g.store(l), "/registry/pods/ns/after-remove", "x");
    g.wait_published(&[l, others[0], 4], r3);
    // MoveLeader to 4.
    g.member(l).move_leader(4);
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.leader(&[others[1]]) != 4 {
        assert!(Instant::now() < deadline, "leadership stayed with {}", g.leader(&[others[1]]));
        std::thread::sleep(Duration::from_millis(5));
    }
    let r4 = put(g.store(4), "/registry/pods/ns/led-by-4", "x");
    g.wait_published(&[l, others[0], 4], r4);
    g.assert_same_state(&[l, others[0], 4]);
}

/// etcd's raft metrics as a dashboard reads them: every member counts the
/// leader it saw elected and the one leadership moved to; the leader times a
/// heartbeat round trip to each peer; nothing stays pending or failed after
/// writes the group committed.
#[test]
fn members_count_leader_changes_proposals_and_peer_round_trips() {
    let g = Group::start();
    let l = g.leader(&[]);
    let rev = put_nodes(g.store(l), 50, "ready");
    g.wait_published(&[1, 2, 3], rev);
    for id in 1..=3 {
        let c = g.member(id).counters();
        assert!(c.leader_changes >= 1, "member {id}: {c:?}");
        assert_eq!(c.failed, 0, "member {id}: {c:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = g.member(l).counters();
        let rtt: Vec<(u64, u64)> = g.member(l).round_trips().iter().map(|(id, h)| (*id, h.count())).collect();
        if c.pending == 0 && rtt.len() == 2 && rtt.iter().all(|(id, n)| *id != l && *n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "leader {l}: {c:?}, round trips {rtt:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before: Vec<u64> = (1..=3).map(|id| g.member(id).counters().leader_changes).collect();
    let to = (1..=3).find(|id| *id != l).unwrap();
    g.member(l).move_leader(to);
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.leader(&[]) != to {
        assert!(Instant::now() < deadline, "leadership stayed with {l}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while (1..=3).any(|id| g.member(id).counters().leader_changes <= before[id as usize - 1]) {
        let now: Vec<u64> = (1..=3).map(|id| g.member(id).counters().leader_changes).collect();
        assert!(Instant::now() < deadline, "leader changes before {before:?}, after {now:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Leases only through the log: a grant answered on the leader is on every
/// member, a key attached to it is attached everywhere, a revoke drops it and
/// deletes its keys on every member; a new leader gives every lease its full TTL
/// again, as etcd's does.
#[test]
fn leases_are_granted_and_revoked_through_the_log() {
    let mut g = Group::start();
    let l = g.leader(&[]);
    let (id, _) = g.store(l).grant_lease(7001, 60).unwrap();
    for m in 1..=3 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !g.store(m).leases.exists(id) {
            assert!(Instant::now() < deadline, "member {m} lacks the lease");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let req = PbPutRequest { key: b"/registry/events/ns/e1".to_vec(), value: b"x".to_vec(), lease: id, ..Default::default() };
    let rev = g.store(l).put(&req).unwrap().header.unwrap().revision;
    g.store(l).grant_lease(7002, 30).unwrap();
    g.wait_published(&[1, 2, 3], rev);
    for m in 1..=3 {
        let (_, granted, keys) = g.store(m).leases.time_to_live(id, true).expect("the lease");
        assert_eq!((granted, keys), (60, vec![bytes::Bytes::from_static(b"/registry/events/ns/e1")]), "member {m}");
    }
    let rev = g.store(l).revoke_lease(id).unwrap();
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
    for m in 1..=3 {
        assert!(!g.store(m).leases.exists(id), "member {m} still holds the revoked lease");
        let got = g.store(m).range(&etcd_client::proto::PbRangeRequest { key: b"/registry/events/ns/e1".to_vec(), ..Default::default() }).unwrap();
        assert!(got.kvs.is_empty(), "member {m} kept the revoked lease's key");
    }
    // The leader dies after its lease's clock ran for a while: the next leader
    // counts the lease's full TTL again.
    std::thread::sleep(Duration::from_millis(2100));
    for m in (1..=3).filter(|m| *m != l) {
        let (remaining, _, _) = g.store(m).leases.time_to_live(7002, false).expect("the lease");
        assert!(remaining <= 27, "member {m}: the lease's clock did not run ({remaining} s left of 30)");
    }
    g.net.cut(l);
    g.members[l as usize - 1].take().unwrap().stop();
    let l2 = g.leader(&[l]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Whole seconds, rounded down: 29 right after the refresh.
        let (remaining, granted, _) = g.store(l2).leases.time_to_live(7002, false).expect("the lease");
        if remaining >= granted - 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the new leader did not refresh the lease: {remaining} of {granted}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A grant the group will never hold (asked of a member that is not the
/// leader) is undone and answered with etcd's timeout error, not granted.
#[test]
fn a_lease_grant_the_group_does_not_hold_is_refused() {
    let g = Group::start();
    let l = g.leader(&[]);
    let f = (1..=3).find(|id| *id != l).unwrap();
    let e = g.store(f).grant_lease(9001, 30).unwrap_err();
    assert_eq!(e, crate::errors::StoreError::Timeout);
    assert!(!g.store(f).leases.exists(9001), "the refused grant stayed in the member's table");
    assert!(g.member(f).status().error.is_some(), "a lease granted off the leader stops the member");
    // The others go on.
    g.store(l).grant_lease(9002, 30).unwrap();
}

/// Rounds of faults — the leader killed and replaced by an empty member that
/// rejoins, a member cut off and healed — with writes between them: every write
/// a leader published is on every member at the end, all members hold the same
/// state, and none stopped.
#[test]
fn acknowledged_writes_survive_rounds_of_faults() {
    let mut g = Group::start();
    let mut acknowledged: Vec<(String, String)> = Vec::new();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..6 {
        let l = g.leader(&[]);
        for i in 0..30 {
            let key = format!("/registry/pods/ns/p{}", next() % 40);
            let value = format!("r{round}-{i}");
            let rev = put(g.store(l), &key, &value);
            g.wait_published(&[l], rev);
            acknowledged.push((key, value));
        }
        if round % 2 == 0 {
            // The leader dies; an empty member takes its ID and rejoins.
            g.net.cut(l);
            g.members[l as usize - 1].take().unwrap().stop();
            g.leader(&[l]);
            let store = Arc::new(Store::new());
            let m = Replica::start(ReplicaConfig { rejoining: true, ..config(l) }, store.clone(), g.net.clone()).unwrap();
            g.net.join(l, m.inbox());
            g.stores[l as usize - 1] = store;
            g.members[l as usize - 1] = Some(m);
            g.net.heal(l);
        } else {
            // A follower is cut off for a while.
            let f = (1..=3).find(|id| *id != l).unwrap();
            g.net.cut(f);
            let rev = put(g.store(l), "/registry/pods/ns/while-cut", &format!("{round}"));
            g.wait_published(&[l], rev);
            acknowledged.push(("/registry/pods/ns/while-cut".into(), format!("{round}")));
            g.net.heal(f);
        }
    }
    let l = g.leader(&[]);
    let last = g.store(l).current_rev();
    g.wait_published(&[1, 2, 3], last);
    g.assert_same_state(&[1, 2, 3]);
    // The last value acknowledged for each key is what every member holds.
    let mut want = std::collections::BTreeMap::new();
    for (k, v) in acknowledged {
        want.insert(k, v);
    }
    for m in 1..=3 {
        assert_eq!(g.member(m).status().error, None, "member {m}");
        for (k, v) in &want {
            let got = g.store(m).range(&etcd_client::proto::PbRangeRequest { key: k.clone().into_bytes(), ..Default::default() }).unwrap();
            assert_eq!(got.kvs.first().map(|kv| kv.value.clone()), Some(v.clone().into_bytes()), "member {m}, {k}");
        }
    }
}

/// Members with their raft logs on disk (`buffered`/`fsync` groups): the whole
/// group stopped at once comes back from its disks with every published write,
/// the same state on every member, and goes on; a member stopped alone
/// restarts from its log and catches up from the leader without a snapshot of
/// the leader's (the saved snapshots bound each log).
#[test]
fn members_with_disk_logs_restart_from_them_together_or_alone() {
    let root = std::env::temp_dir().join(format!("replication-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let disk = |id: u64| super::disk_log::DiskConfig {
        dir: root.join(format!("m{id}")),
        sync: crate::wal::Durability::new(crate::wal::Mode::Fsync, &[("/registry/leases/".into(), crate::wal::Mode::None)]),
        snapshot_every: 64,
    };
    let mut g = Group { net: Arc::new(MemNetwork::default()), stores: Vec::new(), members: Vec::new(), by_id: Arc::default(), log_keep: 5_000 };
    let start_as = |g: &mut Group, id: u64, rejoining: bool| {
        let store = Arc::new(Store::new());
        let m = Replica::start(ReplicaConfig { disk: Some(disk(id)), rejoining, ..g.config(id) }, store.clone(), g.net.clone()).unwrap();
        g.net.join(id, m.inbox());
        g.by_id.lock().insert(id, store.clone());
        if g.stores.len() < id as usize {
            g.stores.push(store);
            g.members.push(Some(m));
        } else {
            g.stores[id as usize - 1] = store;
            g.members[id as usize - 1] = Some(m);
        }
    };
    let start = |g: &mut Group, id: u64| start_as(g, id, false);
    for id in 1..=3 {
        start(&mut g, id);
    }
    let l = g.leader(&[]);
    let lease = g.store(l).grant_lease(0, 600).unwrap().0;
    let mut rev = put_nodes(g.store(l), 150, "ready");
    for i in 0..100 {
        rev = put(g.store(l), &format!("/registry/leases/n{}", i % 10), "renew");
    }
    g.wait_published(&[1, 2, 3], rev);
    let before = g.store(l).dump();
    // Every member at once: what each stream had published comes back from disk.
    for id in 1..=3 {
        g.members[id as usize - 1].take().unwrap().stop();
    }
    // From here on the members keep 20 entries behind their applied index.
    g.log_keep = 20;
    for id in 1..=3 {
        assert!(super::disk_log::holds_state(&disk(id).dir), "member {id} kept nothing");
        let snaps = std::fs::read_dir(disk(id).dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".snap")).count();
        // (The one before the newest stays until the driver has accounted the newest.)
        assert!((1..=2).contains(&snaps), "member {id} keeps {snaps} snapshots");
        start(&mut g, id);
    }
    let l = g.leader(&[]);
    g.wait_published(&[1, 2, 3], rev);
    assert!(g.store(l).dump() == before, "the state after the restart differs from the state before");
    g.assert_same_state(&[1, 2, 3]);
    assert!((1..=3).all(|id| g.store(id).leases.exists(lease)), "the lease came back on every member");
    rev = put(g.store(l), "/registry/pods/ns/after", "y");
    g.wait_published(&[1, 2, 3], rev);

    // One member alone: it restarts from its log and catches up.
    let x = (1..=3).find(|id| *id != l).unwrap();
    g.members[x as usize - 1].take().unwrap().stop();
    // Fewer than the 20 entries the leader keeps: x's log still leads to the leader's.
    for i in 0..10 {
        rev = put(g.store(l), &format!("/registry/configmaps/ns/c{i}"), "z");
    }
    g.wait_published(&[l], rev);
    start(&mut g, x);
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
    assert!(!g.member(x).status().catching_up, "a member with its log votes at once");
    // The saved snapshots bounded the logs: no member keeps its first segment.
    // (A snapshot saved on its thread is accounted at the driver's next turn.)
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in 1..=3 {
        loop {
            let logs = std::fs::read_dir(disk(id).dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".log")).count();
            if logs <= 3 {
                break;
            }
            assert!(Instant::now() < deadline, "member {id} keeps {logs} log segments");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // A member whose log on disk ends before the leader's begins: the leader's
    // snapshot cannot go over its state, so it discards its log, and its next
    // start (rejoining, as its data dir's marker says) takes the snapshot.
    let x = (1..=3).find(|id| *id != l && *id != x).unwrap();
    let stopped_at = g.member(l).status().applied_index;
    g.members[x as usize - 1].take().unwrap().stop();
    std::thread::sleep(Duration::from_millis(600));
    for i in 0..200 {
        rev = put(g.store(l), &format!("/registry/secrets/ns/s{i}"), "w");
    }
    g.wait_published(&[l], rev);
    let first = g.member(l).status().log_first_index;
    assert!(first > stopped_at + 1, "the leader kept its log from index {first}, x stopped at {stopped_at}");
    start(&mut g, x);
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        if let Some(e) = g.member(x).status().error {
            break e;
        }
        assert!(Instant::now() < deadline, "the member behind the log neither caught up nor stopped");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(why.contains("discarded"), "{why}");
    assert!(!super::disk_log::holds_state(&disk(x).dir), "its log is gone");
    g.members[x as usize - 1].take().unwrap().stop();
    start_as(&mut g, x, true);
    g.wait_published(&[1, 2, 3], rev);
    g.assert_same_state(&[1, 2, 3]);
    assert!(super::disk_log::holds_state(&disk(x).dir), "the snapshot it took is on its disk");
    for id in 1..=3 {
        g.members[id as usize - 1].take().unwrap().stop();
    }
    let _ = std::fs::remove_dir_all(&root);
}
