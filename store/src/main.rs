//! The meganode-store binary: parse etcd-style flags, build the store, serve
//! gRPC on every --listen-client-urls address (TLS and mutual TLS when
//! configured) and metrics on --listen-metrics-urls.
use std::net::SocketAddr;
use std::sync::Arc;

use meganode_store::config::{self, Config};
use meganode_store::server::{self, grpc_metrics, lease, metrics, Ctx};
use meganode_store::{wal, Store};
use tokio::net::TcpListener;
use tonic::transport::Server;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;


fn host_port(url: &str) -> Result<(bool, SocketAddr), String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("unsupported URL {url:?}: want http:// or https://"));
    };
    let hp = rest.trim_end_matches('/');
    let hp = hp.replace("localhost", "127.0.0.1");
    let addr: SocketAddr = hp.parse().map_err(|_| format!("invalid listen address in {url:?}: want IP:port"))?;
    Ok((tls, addr))
}

async fn serve_client(ctx: Arc<Ctx>, url: String) -> Result<(), String> {
    let (tls, addr) = host_port(&url)?;
    let cfg = &ctx.cfg;
    let tls = if tls { Some(tls_config(cfg)?) } else { None };
    let limit = server::decode_limit(cfg.max_request_bytes);
    let listener = TcpListener::bind(addr).await.map_err(|e| format!("listen {addr}: {e}"))?;
    let routes = server::routes(&ctx, limit);
    // HTTP/1 too: etcd answers its HTTP endpoints on the client port (http_endpoints).
    let mut builder = Server::builder().tcp_nodelay(true).accept_http1(true).layer(grpc_metrics::CountRpcs);
    let tonic_routes = routes.clone();
    let serve_err = |e: &dyn std::fmt::Display| format!("serve {url}: {e}");
    // HTTP/2 connections by the lean transport (meganode_store::transport), the
    // others (HTTP/1.1, and every connection with --grpc-transport=tonic) handed to
    // tonic's server.
    let lean = cfg.lean_transport.then(|| (ctx.clone(), routes));
    if let Some(config) = tls {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let others = futures::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), Ok::<_, std::io::Error>);
        let tonic = builder.add_routes(tonic_routes).serve_with_incoming(others);
        let ours = meganode_store::transport::tls::serve(listener, config, lean, tx);
        return tokio::select! {
            r = tonic => r.map_err(|e| serve_err(&e)),
            r = ours => r.map_err(|e| serve_err(&e)),
        };
    }
    let Some((ctx, routes)) = lean else {
        // Our own listener, so tonic's tcp_nodelay does not apply: set it per
        // connection, or Nagle's algorithm holds small responses back ~40 ms.
        let incoming = futures::StreamExt::map(tokio_stream::wrappers::TcpListenerStream::new(listener), |s| {
            s.inspect(|s| {
                meganode_store::transport::count_connection(false, false);
                let _ = s.set_nodelay(true);
            })
        });
        return builder.add_routes(tonic_routes).serve_with_incoming(incoming).await.map_err(|e| serve_err(&e));
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let others = futures::StreamExt::map(tokio_stream::wrappers::UnboundedReceiverStream::new(rx), Ok::<_, std::io::Error>);
    let tonic = builder.add_routes(tonic_routes).serve_with_incoming(others);
    let lean = meganode_store::transport::serve(listener, ctx, routes, tx);
    tokio::select! {
        r = tonic => r.map_err(|e| serve_err(&e)),
        r = lean => r.map_err(|e| serve_err(&e)),
    }
}

/// An https:// listener's TLS from --cert-file/--key-file (or --auto-tls's
/// self-signed certificate), and with
/// --trusted-ca-file the CA its clients' certificates must chain to: as etcd's,
/// a trusted CA makes a client certificate required, --client-cert-auth (which
/// needs the CA) makes its common name the caller.
fn tls_config(cfg: &Config) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
    let (cert, key) = match (&cfg.cert_file, &cfg.key_file) {
        (Some(cert), Some(key)) => (
            std::fs::read(cert).map_err(|e| format!("--cert-file {cert}: {e}"))?,
            std::fs::read(key).map_err(|e| format!("--key-file {key}: {e}"))?,
        ),
        // As etcd's: given certificates win over --auto-tls.
        _ if cfg.auto_tls => {
            let dir = meganode_store::auto_tls::client_dir(&cfg.data_dir);
            let hosts = meganode_store::auto_tls::hosts_of(&cfg.listen_client_urls);
            meganode_store::auto_tls::self_cert(&dir, &hosts, cfg.self_signed_cert_validity)?
        }
        _ => return Err("an https:// URL needs --cert-file and --key-file, or --auto-tls".into()),
    };
    if cfg.client_cert_auth && cfg.trusted_ca_file.is_none() {
        return Err("--client-cert-auth needs --trusted-ca-file".into());
    }
    let ca = match &cfg.trusted_ca_file {
        Some(ca) => Some(std::fs::read(ca).map_err(|e| format!("--trusted-ca-file {ca}: {e}"))?),
        None => None,
    };
    meganode_store::transport::tls::server_config(&cert, &key, ca.as_deref())
}

/// This member's peer TLS when its peer URLs are https (etcd's --peer-* flags,
/// replication::peer_tls): its certificate serves the peer listener and is
/// offered to the peers it dials. As etcd's, a --peer-trusted-ca-file makes
/// every peer's certificate required and checked; --peer-auto-tls alone makes
/// a self-signed one and checks none.
fn peer_tls(cfg: &Config) -> Result<Option<Arc<meganode_store::replication::peer_tls::PeerTls>>, String> {
    use meganode_store::replication::peer_tls;
    // The flags were checked together in config::check_cluster.
    if !cfg.peer_https() {
        if cfg.peer_cert_file.is_some() {
            eprintln!("meganode-store: the peer URLs are http: ignoring --peer-cert-file and --peer-key-file");
        }
        return Ok(None);
    }
    let read = |flag: &str, f: &str| std::fs::read(f).map_err(|e| format!("--{flag} {f}: {e}"));
    let (cert, key, ca) = match (&cfg.peer_cert_file, &cfg.peer_key_file) {
        (Some(cert), Some(key)) => {
            let ca = cfg.peer_trusted_ca_file.as_deref().map(|f| read("peer-trusted-ca-file", f)).transpose()?;
            (read("peer-cert-file", cert)?, read("peer-key-file", key)?, ca)
        }
        // As etcd's: given certificates win over --peer-auto-tls.
        _ => {
            let dir = meganode_store::auto_tls::peer_dir(&cfg.data_dir);
            let hosts = meganode_store::auto_tls::hosts_of(&cfg.listen_peer_urls.iter().chain(&cfg.advertise_peer_urls).cloned().collect::<Vec<_>>());
            let (cert, key) = meganode_store::auto_tls::self_cert(&dir, &hosts, cfg.self_signed_cert_validity)?;
            (cert, key, None)
        }
    };
    let server = meganode_store::transport::tls::server_config_of("peer-", &cert, &key, ca.as_deref())?;
    let client = peer_tls::client_config(&cert, &key, ca.as_deref())?;
    Ok(Some(Arc::new(peer_tls::PeerTls::new(server, client))))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version" || a == "version") {
        println!("meganode-store {} (etcd API {})", env!("CARGO_PKG_VERSION"), server::ETCD_COMPAT_VERSION);
        return;
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        eprintln!("usage: meganode-store [--name N] [--data-dir D] [--listen-client-urls URLS] [--advertise-client-urls URLS]\n  [--listen-metrics-urls URLS] [--max-request-bytes N] [--cert-file F --key-file F | --auto-tls] [--trusted-ca-file F]\n  [--client-cert-auth] [--watch-progress-notify-interval D] [--durability none|buffered|fsync]\n  [--durability-prefix PREFIX=MODE,...] [--restore-from SNAPSHOT (the store's, or etcd's: converted by meganode store import)] [--quota-backend-bytes N (0: 40% of RAM or cgroup limit; <0: none)]\n  [--auth-token simple|jwt,pub-key=F,priv-key=F,sign-method=ALG,ttl=D] [--auth-token-ttl SECONDS] [--bcrypt-cost N]\n  [--grpc-transport lean|tonic] [--history-spill true|false] [--value-compression true|false] [--value-compression-cpu SHARE]\n  [--runtime-workers N|auto (auto: CPUs - 1, at least 1)]\n  for tests only: [--test-fault-fsync-latency D] [--test-fault-write-latency D] (simulate a slow disk)");
        return;
    }
    let cfg = match config::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("meganode-store: {e}");
            std::process::exit(2);
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = config::runtime_workers(&cfg, cpus);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().expect("tokio runtime");
    if let Err(e) = rt.block_on(run(cfg)) {
        eprintln!("meganode-store: {e}");
        std::process::exit(1);
    }
}

/// Makes this process a member of the replicated group --initial-cluster names
/// (docs/design.md §10): etcd's member and cluster IDs, a raft driver over the
/// store, peers reached and served over TCP. A member that finds its own
/// marker in the data dir restarted and lost what it held (nothing is on
/// disk): it rejoins, catching up before it votes. A member whose replication
/// stops (its state left the group's) exits, to be restarted and rejoin.
fn start_replica(
    ctx: &Arc<Ctx>,
    joined: Option<Joined>,
    tls: Option<Arc<meganode_store::replication::peer_tls::PeerTls>>,
    disk: Option<meganode_store::replication::disk_log::DiskConfig>,
) -> Result<(), String> {
    use meganode_store::replication::{identity, peer, peer_tls, MemberInfo, Replica, ReplicaConfig, SnapshotFetcher};
    let cfg = &ctx.cfg;
    let joining = joined.is_some();
    let founders: Vec<MemberInfo> = match joined {
        // A member joining a running group knows every member from the roster;
        // its log comes from the leader (no founding entries).
        Some(j) => j.members,
        None => identity::members(&cfg.initial_cluster, &cfg.initial_cluster_token)
            .into_iter()
            .map(|(name, peer_urls, id)| MemberInfo { id, name, peer_urls, client_urls: Vec::new() })
            .collect(),
    };
    let (me, cluster) = (ctx.member_id, ctx.cluster_id);
    // A member whose raft log survived on disk restarts from it (and votes);
    // one that held this data dir without one lost what it held.
    let from_disk = disk.as_ref().is_some_and(|d| meganode_store::replication::disk_log::holds_state(&d.dir));
    let rejoining = member_marker(std::path::Path::new(&cfg.data_dir), &cfg.name, me, cluster)? && !from_disk;
    let mut listeners = Vec::new();
    for url in &cfg.listen_peer_urls {
        let addr = peer::peer_addr(url)?;
        let l = std::net::TcpListener::bind(addr).map_err(|e| format!("listen peer {addr}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let secure = url.starts_with("https://").then(|| tls.clone()).flatten();
        listeners.push((TcpListener::from_std(l).map_err(|e| e.to_string())?, secure));
    }
    if let Some(t) = &tls {
        let _ = ctx.peer_tls.set(t.clone());
    }
    let transport = peer::PeerTransport::start(&tokio::runtime::Handle::current(), cluster, me, &[], tls.clone());
    let voters = if joining { Vec::new() } else { founders.iter().map(|m| m.id).collect() };
    let mut rc = ReplicaConfig::new(me, voters);
    rc.tick = cfg.heartbeat_interval;
    rc.election_ticks = (cfg.election_timeout.as_millis() / cfg.heartbeat_interval.as_millis().max(1)).max(2) as usize;
    rc.rejoining = rejoining;
    rc.log_keep = cfg.snapshot_count / 2;
    rc.founders = founders;
    rc.me = MemberInfo { id: me, name: cfg.name.clone(), peer_urls: cfg.advertise_peer_urls.clone(), client_urls: cfg.advertise_client_urls.clone() };
    rc.auth = Some(ctx.auth_log.clone());
    rc.fetch_snapshot = Some(SnapshotFetcher(Arc::new(fetch_snapshot(tokio::runtime::Handle::current(), cluster, me, tls))));
    rc.disk = disk;
    let replica = Arc::new(Replica::start(rc, ctx.store.clone(), transport)?);
    let errors = Arc::new(peer::PeerErrors::default());
    for (l, secure) in listeners {
        let forward = meganode_store::transport::forward::handler(meganode_store::transport::unary::Services::new(ctx.clone()));
        let roster: peer::RosterHandler = {
            let replica = replica.clone();
            Arc::new(move || {
                let learners = replica.status().members.learners;
                let ms: Vec<_> = replica
                    .members()
                    .into_iter()
                    .map(|m| meganode_store::replication::members::RosterEntry { learner: learners.contains(&m.id), member: m })
                    .collect();
                meganode_store::replication::members::encode_roster(cluster, &ms)
            })
        };
        let snapshot: peer::ForwardHandler = {
            let (store, replica, auth) = (ctx.store.clone(), replica.clone(), ctx.auth_log.clone());
            Arc::new(move |s, _| {
                let (store, replica, auth) = (store.clone(), replica.clone(), auth.clone());
                let rt = tokio::runtime::Handle::current();
                tokio::task::spawn_blocking(move || {
                    let sent = (|| {
                        let mut s = peer_tls::Blocking::new(s, rt, std::time::Duration::from_secs(5));
                        let mut index = [0u8; 8];
                        std::io::Read::read_exact(&mut s, &mut index)?;
                        let index = u64::from_le_bytes(index);
                        // This member's state is the one the snapshot stands for only if
                        // it has applied that far (it made the snapshot, then restarted
                        // empty, or stopped): else it says nothing and the receiver asks again.
                        let st = replica.status();
                        if st.applied_index < index || st.catching_up || st.error.is_some() {
                            return Err(std::io::Error::other(format!("refused: asked for the state at raft index {index}, this member applied {}", st.applied_index)));
                        }
                        // A receiver that stops reading (cut off mid-stream) must not
                        // hold compactions off for ever (write_stream holds them).
                        s.set_timeout(std::time::Duration::from_secs(30));
                        use meganode_store::replication::AuthLog;
                        meganode_store::snapshot::write_stream_with(&store, s, Some(&auth.snapshot()))
                    })();
                    match sent {
                        Ok((rev, bytes)) => eprintln!("meganode-store: sent a snapshot: revision {rev}, {bytes} bytes"),
                        Err(e) => eprintln!("meganode-store: sending a snapshot failed: {e}"),
                    }
                });
            })
        };
        let removed = {
            let replica = replica.clone();
            Arc::new(move |id: u64| replica.was_removed(id))
        };
        let h2 = meganode_store::transport::forwarded_h2_handler(ctx.clone());
        let extras = peer::Extras {
            forward: Some(forward),
            roster: Some(roster),
            snapshot: Some(snapshot),
            removed: Some(removed),
            h2: Some(h2),
        };
        tokio::spawn(peer::serve(l, secure, cluster, me, replica.inbox(), errors.clone(), extras));
    }
    let _ = ctx.replica.set(replica.clone());
    eprintln!(
        "meganode-store: member {me:x} of cluster {cluster:x} ({} members{}), peers on {}",
        cfg.initial_cluster.len(),
        if rejoining {
            ", rejoining: it held this data dir before and lost what it kept in memory"
        } else if from_disk {
            ", restarted from its raft log on disk"
        } else if joining {
            ", joining the running group"
        } else {
            ""
        },
        cfg.listen_peer_urls.join(",")
    );
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            if let Some(why) = replica.error() {
                // Time for the answer to the call that caused it (a MemberRemove of this member) to leave.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                if why.contains("permanently removed") {
                    eprintln!("meganode-store: exiting: {why}; its data dir must not be used again");
                    std::process::exit(1);
                }
                // A restart would fail the same way: the disk needs an operator (etcd exits too).
                if why.contains(meganode_store::replication::disk_log::DISK_FAILED) {
                    eprintln!("meganode-store: exiting: {why}; free or replace the disk and restart it (the others go on without it)");
                    std::process::exit(1);
                }
                // Its state left the group's (a deposed leader's writes the group
                // did not commit): start again as this member, which rejoins empty
                // and takes the leader's snapshot — what a supervisor's restart
                // would do, without waiting for one.
                eprintln!("meganode-store: this member's replication stopped ({why}); restarting in place to rejoin the group");
                use std::os::unix::process::CommandExt;
                let exe = std::env::current_exe().unwrap_or_else(|_| "meganode-store".into());
                let err = std::process::Command::new(exe).args(std::env::args_os().skip(1)).exec();
                eprintln!("meganode-store: exiting: the restart failed ({err}); restart it to rejoin the group");
                std::process::exit(1);
            }
        }
    });
    Ok(())
}

/// What a member joining a running group learned from a peer.
struct Joined {
    me: u64,
    cluster: u64,
    members: Vec<meganode_store::replication::MemberInfo>,
}

/// etcd's --initial-cluster-state existing: the roster of the running group
/// from the first other member of --initial-cluster that answers, checked
/// against the flags as etcd checks them (ValidateClusterAndAssignIDs: the
/// same members, matched by peer URLs); this member's ID is the one MemberAdd
/// gave its peer URLs.
async fn join_group(cfg: &Config, tls: Option<&meganode_store::replication::peer_tls::PeerTls>) -> Result<Joined, String> {
    use meganode_store::replication::{members, peer};
    let own = cfg.own_peer_urls();
    let mut last = String::from("no other member in --initial-cluster");
    let mut got = None;
    for (_, url) in cfg.initial_cluster.iter().filter(|(_, u)| !own.contains(u)) {
        match peer::roster(tls, url).await {
            Ok(b) => {
                got = Some(members::decode_roster(&b)?);
                break;
            }
            Err(e) => last = format!("{url}: {e}"),
        }
    }
    let Some((cluster, roster)) = got else {
        return Err(format!("cannot fetch cluster info from peer urls: could not retrieve cluster information from the given URLs ({last})"));
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let local = meganode_store::replication::identity::members(&cfg.initial_cluster, &cfg.initial_cluster_token);
    let describe = || roster.iter().map(|e| format!("{:x}={}", e.member.id, e.member.peer_urls.join(","))).collect::<Vec<_>>().join(",");
    if local.len() != roster.len() {
        return Err(format!("error validating peerURLs {{{}}}: member count is unequal", describe()));
    }
    for (_, urls, _) in &local {
        if !roster.iter().any(|e| sorted(e.member.peer_urls.clone()) == sorted(urls.clone())) {
            return Err(format!("error validating peerURLs {{{}}}: unmatched member while checking PeerURLs ({})", describe(), urls.join(",")));
        }
    }
    let me = roster
        .iter()
        .find(|e| sorted(e.member.peer_urls.clone()) == sorted(own.clone()))
        .map(|e| e.member.id)
        .ok_or_else(|| format!("this member's peer URLs {} are not in the group's members {{{}}}: add it with MemberAdd first", own.join(","), describe()))?;
    Ok(Joined { me, cluster, members: roster.into_iter().map(|e| e.member).collect() })
}

/// How a member behind its leader's log gets the store's state: the sender's
/// stream over its peer URL (peer::open_snapshot; crate::snapshot::write_stream),
/// read from the raft driver's thread as it arrives.
fn fetch_snapshot(
    rt: tokio::runtime::Handle,
    cluster: u64,
    me: u64,
    tls: Option<Arc<meganode_store::replication::peer_tls::PeerTls>>,
) -> impl Fn(&meganode_store::replication::MemberInfo, u64) -> Result<Box<dyn std::io::Read + Send>, String> + Send + Sync {
    use meganode_store::replication::{peer, peer_tls};
    move |m, index| {
        let url = m.peer_urls.first().ok_or("the sender has no peer URL")?;
        let s = rt.block_on(peer::open_snapshot(tls.as_deref(), cluster, me, m.id, url, index)).map_err(|e| format!("{url}: {e}"))?;
        // A sender that stops writing (its process hung) must not hold the driver forever.
        Ok(Box::new(peer_tls::Blocking::new(s, rt.clone(), std::time::Duration::from_secs(30))))
    }
}

/// The data dir's record of the member that used it (`member/replica`):
/// absent → written, a founding start; this member's → it restarts (true);
/// another's → refused, and nothing changes.
fn member_marker(dir: &std::path::Path, name: &str, me: u64, cluster: u64) -> Result<bool, String> {
    let path = dir.join("member").join("replica");
    let want = format!("member={me:x} cluster={cluster:x}\n");
    match std::fs::read_to_string(&path) {
        Ok(s) if s == want => Ok(true),
        Ok(s) => Err(format!(
            "data dir {} belongs to another member ({}); this is member {me:x} ({name}) of cluster {cluster:x}: give each member its own --data-dir",
            dir.display(),
            s.trim()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path.parent().expect("has a parent")).map_err(|e| format!("{}: {e}", dir.display()))?;
            std::fs::write(&path, want).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(false)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// History of memory-only prefixes did not survive: serve them as compacted
/// up to `since` (now; on a start that restored a snapshot, which holds their
/// history, its compaction point), so watchers of those prefixes relist.
fn set_volatile(store: &Store, dur: &wal::Durability, since: i64) {
    store.set_volatile(meganode_store::mvcc::kvstore::Volatile {
        since,
        prefixes: dur.prefixes.iter().filter(|(_, m)| *m == wal::Mode::None).map(|(p, _)| p.clone()).collect(),
        all: dur.default == wal::Mode::None,
    });
}

/// Whether `path` is a bbolt file (etcd's backend: `etcdctl snapshot save`'s
/// output or a member's `member/snap/db`): its first page is a meta page
/// (flags 0x04) holding bbolt's magic 0xED0CDAED.
fn is_bbolt(path: &str) -> bool {
    let mut head = [0u8; 20];
    std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok()
        && u16::from_le_bytes([head[8], head[9]]) == 0x04
        && u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")) == 0xED0C_DAED
}

/// etcd's snapshot given to --restore-from: converted to this store's snapshot
/// by `meganode store import` (which reads bbolt with etcd's own library;
/// docs/design.md §11), found beside this binary, else on PATH
/// (MEGANODE_BIN overrides). The converted file goes to a temporary directory,
/// so a failed conversion writes nothing into the data dir.
fn convert_etcd_snapshot(path: &str) -> Result<tempdir::Converted, String> {
    let tool = std::env::var_os("MEGANODE_BIN").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let beside = std::env::current_exe().ok().map(|e| e.with_file_name("meganode"));
        beside.filter(|p| p.exists()).unwrap_or_else(|| "meganode".into())
    });
    let dir = std::env::temp_dir().join(format!("meganode-store-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("--restore-from {path}: {}: {e}", dir.display()))?;
    let converted = tempdir::Converted { dir: dir.clone(), file: dir.join("store.snap") };
    eprintln!("meganode-store: --restore-from {path} is an etcd snapshot: converting it with {} store import", tool.display());
    let out = std::process::Command::new(&tool)
        .args(["store", "import", "--from", path, "--out"])
        .arg(&converted.file)
        .output()
        .map_err(|e| format!("--restore-from {path} is an etcd snapshot; converting it needs `meganode store import` ({}: {e})", tool.display()))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!("--restore-from {path}: {}", why.trim().lines().last().unwrap_or("meganode store import failed")));
    }
    Ok(converted)
}

mod tempdir {
    /// A converted snapshot, removed with its directory when dropped.
    pub struct Converted {
        pub dir: std::path::PathBuf,
        pub file: std::path::PathBuf,
    }

    impl Drop for Converted {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A single member's logs (docs/design.md §5): recovery into `store`, then the
/// log as its commit sink, with its checkpointer; the recovered auth state of a
/// --restore-from snapshot; the data dir's lock.
fn open_log(cfg: &Config, store: &Arc<Store>, dur: &wal::Durability) -> Result<(Arc<wal::Wal>, Option<Vec<u8>>, std::fs::File), String> {
    let converted = match cfg.restore_from.as_deref() {
        Some(p) if is_bbolt(p) && !wal::holds_logs(std::path::Path::new(&cfg.data_dir)) => Some(convert_etcd_snapshot(p)?),
        _ => None,
    };
    let restore = converted.as_ref().map(|c| c.file.as_path()).or(cfg.restore_from.as_deref().map(std::path::Path::new));
    let (log, rep, lock) = wal::open(std::path::Path::new(&cfg.data_dir), dur.clone(), store, restore)?;
    drop(converted);
    eprintln!(
        "meganode-store: recovered {} keys, {} leases from {} files ({} records) in {} ms; revision {}, compacted {}; accounted size {}{}",
        store.key_count(), rep.leases, rep.files, rep.records, rep.millis, rep.rev, rep.compacted,
        meganode_store::quota::human(store.size_bytes().max(0) as u64),
        if rep.torn.is_empty() { String::new() } else { format!("; {} torn tails cut", rep.torn.len()) }
    );
    if !cfg.test_fault_fsync_latency.is_zero() || !cfg.test_fault_write_latency.is_zero() {
        eprintln!(
            "meganode-store: warning: FOR TESTS ONLY: a slow disk is simulated: every log and checkpoint fsync sleeps {:?} and every write {:?} first (--test-fault-fsync-latency, --test-fault-write-latency); never set these in production",
            cfg.test_fault_fsync_latency, cfg.test_fault_write_latency
        );
        log.faults.set(Some(Arc::new(wal::fault::Latency { fsync: cfg.test_fault_fsync_latency, write: cfg.test_fault_write_latency })));
    }
    set_volatile(store, dur, if rep.restored { rep.compacted } else { store.current_rev() });
    let orphans = store.relink_leases();
    store.set_sink(log.clone());
    // A key whose lease did not survive (its grant was in no durable log) is
    // dropped as expiry would drop it: at once, or, when the start found the
    // disk full (no revision reserved yet), once the disk takes writes again.
    let drop_orphans = {
        let store = store.clone();
        move || {
            for k in orphans {
                let _ = store.delete_range(&etcd_client::proto::PbDeleteRequest { key: k.to_vec(), ..Default::default() });
            }
        }
    };
    if log.health.down() {
        let log = log.clone();
        tokio::spawn(async move {
            log.settled().await;
            drop_orphans();
        });
    } else {
        drop_orphans();
    }
    {
        let m = log.metrics.clone();
        let _ = metrics::EXTRA.set(Box::new(move || m.render()));
    }
    {
        let (log, store, every) = (log.clone(), store.clone(), cfg.checkpoint_bytes);
        std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(move || {
                meganode_store::background::lower_this_thread();
                log.checkpointer(store, every)
            })
            .map_err(|e| e.to_string())?;
    }
    Ok((log, rep.restored_auth, lock))
}

async fn run(cfg: Config) -> Result<(), String> {
    for f in &cfg.ignored {
        eprintln!("meganode-store: ignoring etcd flag {f} (no meaning for a single in-memory member)");
    }
    // A member joining a running group learns its IDs from a peer before it
    // touches its data dir: one that cannot is refused with nothing written.
    let ptls = if cfg.is_cluster() { peer_tls(&cfg)? } else { None };
    let joined = if cfg.is_cluster() && cfg.initial_cluster_state == "existing" { Some(join_group(&cfg, ptls.as_deref()).await?) } else { None };
    let store = Arc::new(Store::new());
    let (quota, why) = meganode_store::quota::resolve(cfg.quota_backend_bytes);
    store.set_quota(quota);
    eprintln!("meganode-store: {why}");
    // A replicated group's members keep nothing on disk: `replicated` is the
    // log's `none` (the quorum's memory holds each write, docs/design.md §10).
    let mode = |m: &str| if m == "replicated" { wal::Mode::None } else { wal::Mode::parse(m).expect("validated by config") };
    let overrides: Vec<(String, wal::Mode)> = cfg.durability_prefixes.iter().map(|(p, m)| (p.clone(), mode(m))).collect();
    let dur = wal::Durability::new(mode(&cfg.durability), &overrides);
    if cfg.history_spill {
        // Before recovery, so that replayed history goes to the spill too.
        let dir = std::path::Path::new(&cfg.data_dir);
        match std::fs::create_dir_all(dir).and_then(|_| store.spill_to(dir)) {
            Ok(()) => eprintln!("meganode-store: replaced versions' values spill to unlinked files in {}", cfg.data_dir),
            Err(e) => eprintln!("meganode-store: warning: no history spill in {}: {e}; replaced values stay in memory", cfg.data_dir),
        }
    }
    // A group's members keep a raft log on disk when any prefix is `buffered`
    // or `fsync` (§10): a quorum has written (synced) each write before it is
    // answered. Their stores keep no logs of their own.
    let mut raft_disk = None;
    let (log, restored_auth, _lock, dur) = if cfg.is_cluster() {
        // A member's state comes from its group, not from its data dir (§10).
        if cfg.restore_from.is_some() {
            return Err("--restore-from in a replicated group is not built yet: restore a single member".into());
        }
        if dur.any_logged() {
            let dir = std::path::Path::new(&cfg.data_dir).join("member").join("raft");
            raft_disk = Some(meganode_store::replication::disk_log::DiskConfig { dir, sync: dur.clone(), snapshot_every: cfg.snapshot_count });
        }
        let dur = wal::Durability::new(wal::Mode::None, &[]);
        set_volatile(&store, &dur, store.current_rev());
        (None, None, None, dur)
    } else {
        let (log, auth, lock) = open_log(&cfg, &store, &dur)?;
        (Some(log), auth, Some(lock), dur)
    };
    if cfg.value_compression {
        meganode_store::mvcc::packer::Packer::spawn(store.clone(), cfg.value_compression_cpu).map_err(|e| e.to_string())?;
    }
    // The auth state is kept when anything is (docs/design.md §7): in auth.state, fsynced per change.
    let durable = dur.any_logged();
    let auth_dir = durable.then(|| std::path::PathBuf::from(&cfg.data_dir));
    // A --restore-from snapshot's auth state replaces the directory's (docs/design.md §7).
    let mut auth = meganode_store::auth::AuthStore::new_restored(cfg.bcrypt_cost, cfg.auth_token_ttl, auth_dir, restored_auth.as_deref())
        .map_err(|e| e.message().to_string())?;
    if cfg.auth_token.starts_with("jwt") {
        auth = auth.with_jwt(meganode_store::auth::jwt::JwtTokens::parse(&cfg.auth_token)?);
    }
    let (enabled, auth_rev) = auth.status();
    eprintln!(
        "meganode-store: auth {} (auth revision {auth_rev}, {} tokens)",
        if enabled { "enabled" } else { "disabled" },
        cfg.auth_token.split(',').next().unwrap_or("")
    );
    let ctx = Ctx::with_auth(store, cfg.clone(), log, Arc::new(auth), joined.as_ref().map(|j| (j.me, j.cluster)));
    // Peer URLs and the downgrade target are kept by the auth state's rule (server/member_state.rs).
    if durable {
        ctx.member.keep_in(std::path::PathBuf::from(&cfg.data_dir))?;
    }
    if cfg.is_cluster() {
        start_replica(&ctx, joined, ptls, raft_disk)?;
    }
    tokio::spawn(lease::expiry_loop(ctx.clone()));
    for url in &cfg.listen_metrics_urls {
        let (_, addr) = host_port(url)?;
        let l = TcpListener::bind(addr).await.map_err(|e| format!("listen metrics {addr}: {e}"))?;
        tokio::spawn(metrics::serve(ctx.clone(), l));
    }
    let mut tasks = Vec::new();
    for url in &cfg.listen_client_urls {
        // Bind errors surface before we claim to be ready.
        let (_, addr) = host_port(url)?;
        std::net::TcpListener::bind(addr).map_err(|e| format!("listen {addr}: {e}"))?;
        tasks.push(tokio::spawn(serve_client(ctx.clone(), url.clone())));
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    eprintln!(
        "meganode-store: ready to serve client requests on {} (revision {})",
        cfg.listen_client_urls.join(","),
        ctx.store.current_rev()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        r = futures::future::select_all(tasks) => {
            let (res, _, _) = r;
            match res {
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(e.to_string()),
                Ok(Ok(())) => {}
            }
        }
    }
    eprintln!("meganode-store: shutting down");
    Ok(())
}
