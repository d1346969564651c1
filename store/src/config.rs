//! Command-line flags, spelled like etcd's so meganode-store drops in where
//! etcd is started. Unknown flags are errors; etcd flags that mean nothing for
//! a single in-memory member are accepted and reported as ignored.
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    pub data_dir: String,
    pub listen_client_urls: Vec<String>,
    pub advertise_client_urls: Vec<String>,
    /// etcd's --initial-advertise-peer-urls: only reported as this member's
    /// peer URLs (MemberList); nothing listens on them (a single member).
    pub advertise_peer_urls: Vec<String>,
    pub listen_metrics_urls: Vec<String>,
    pub max_request_bytes: usize,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub trusted_ca_file: Option<String>,
    pub client_cert_auth: bool,
    pub progress_notify_interval: Duration,
    pub durability: String,
    pub durability_prefixes: Vec<(String, String)>,
    pub restore_from: Option<String>,
    /// A prefix's log is checkpointed and truncated once it grows past this.
    pub checkpoint_bytes: u64,
    /// --quota-backend-bytes: the accounted size writes may not take the store
    /// past (crate::quota); 0 = a share of the machine's memory, negative = none.
    pub quota_backend_bytes: i64,
    /// etcd's --auth-token: "simple" (the default) or "jwt,pub-key=...,priv-key=...,sign-method=...,ttl=..." (crate::auth::jwt).
    pub auth_token: String,
    /// etcd's --auth-token-ttl (seconds): how long a simple token lives after its last use.
    pub auth_token_ttl: Duration,
    /// etcd's --bcrypt-cost: the cost of the password hashes.
    pub bcrypt_cost: u32,
    /// --test-fault-fsync-latency / --test-fault-write-latency: FOR TESTS ONLY —
    /// every fdatasync (write) of the logs and checkpoints sleeps this long first
    /// (crate::wal::fault::Latency), to try the store on a slow disk.
    pub test_fault_fsync_latency: Duration,
    pub test_fault_write_latency: Duration,
    /// --value-compression: the background packer (mvcc/packer.rs) packs each resource
    /// prefix's values with a zstd dictionary of the prefix; --value-compression-cpu is
    /// the share of one core it may use while it works.
    pub value_compression: bool,
    pub value_compression_cpu: f64,
    /// --grpc-transport: `lean` (default) serves plaintext HTTP/2 connections with
    /// the store's own HTTP/2 server for the hot unary RPCs (src/transport), `tonic`
    /// with tonic's server for everything (as before; TLS listeners always use it).
    pub lean_transport: bool,
    /// --history-spill: values replaced by newer versions are kept in unlinked spill
    /// files in --data-dir instead of memory until compaction (mvcc/spill.rs).
    pub history_spill: bool,
    /// --runtime-workers: the tokio worker threads that serve connections; `auto`
    /// (None) is one fewer than the CPUs this process may use, at least one
    /// (`runtime_workers`; docs/design.md §8 rule 10).
    pub runtime_workers: Option<usize>,
    /// etcd's --initial-cluster (NAME=PEER_URL,...) and --initial-cluster-state. A
    /// member cannot join a replicated group yet (issue 36), so `check_single_member`
    /// refuses a list naming other members and the `existing` state: started as one
    /// of three, each member would serve alone and diverge without an error.
    pub initial_cluster: Vec<(String, String)>,
    pub initial_cluster_state: String,
    /// etcd's --initial-cluster-token: part of every member ID, so groups started
    /// with different tokens never take each other's peers.
    pub initial_cluster_token: String,
    /// Where peers reach this member (--listen-peer-urls; a replicated group only).
    pub listen_peer_urls: Vec<String>,
    /// etcd's raft timing: --heartbeat-interval (one tick) and --election-timeout, in ms.
    pub heartbeat_interval: Duration,
    pub election_timeout: Duration,
    /// etcd's --snapshot-count: a group member's raft log is cut once it holds
    /// this many applied entries, keeping the newer half for slow members.
    pub snapshot_count: u64,
    /// Whether --durability was given (a replicated group defaults to `replicated`).
    pub durability_given: bool,
    /// etcd's --auto-tls: https:// client listeners without --cert-file serve a
    /// self-signed certificate made at start-up (crate::auto_tls).
    pub auto_tls: bool,
    /// etcd's peer TLS (replication::peer_tls), for https:// peer URLs: this
    /// member's certificate and key, the CA peers' certificates chain to, whether
    /// the listener asks peers for one, and --peer-auto-tls (self-signed, made
    /// at start-up under <data-dir>/fixtures/peer, peers not checked).
    pub peer_cert_file: Option<String>,
    pub peer_key_file: Option<String>,
    pub peer_trusted_ca_file: Option<String>,
    pub peer_client_cert_auth: bool,
    pub peer_auto_tls: bool,
    /// etcd's --self-signed-cert-validity: the auto-TLS certificate's years.
    pub self_signed_cert_validity: u32,
    pub ignored: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "default".into(),
            data_dir: String::new(),
            listen_client_urls: vec!["http://localhost:2379".into()],
            advertise_client_urls: Vec::new(),
            advertise_peer_urls: vec!["http://localhost:2380".into()],
            listen_metrics_urls: Vec::new(),
            max_request_bytes: 1572864,
            cert_file: None,
            key_file: None,
            trusted_ca_file: None,
            client_cert_auth: false,
            progress_notify_interval: Duration::from_secs(600),
            durability: "buffered".into(),
            durability_prefixes: Vec::new(),
            restore_from: None,
            checkpoint_bytes: 64 << 20,
            quota_backend_bytes: 0,
            auth_token: "simple".into(),
            auth_token_ttl: Duration::from_secs(300),
            bcrypt_cost: 10,
            test_fault_fsync_latency: Duration::ZERO,
            test_fault_write_latency: Duration::ZERO,
            value_compression: true,
            value_compression_cpu: 0.5,
            lean_transport: true,
            history_spill: true,
            runtime_workers: None,
            initial_cluster: Vec::new(),
            initial_cluster_state: "new".into(),
            initial_cluster_token: "etcd-cluster".into(),
            listen_peer_urls: vec!["http://localhost:2380".into()],
            heartbeat_interval: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            durability_given: false,
            snapshot_count: 10_000,
            auto_tls: false,
            peer_cert_file: None,
            peer_key_file: None,
            peer_trusted_ca_file: None,
            peer_client_cert_auth: false,
            peer_auto_tls: false,
            self_signed_cert_validity: 1,
            ignored: Vec::new(),
        }
    }
}

/// etcd flags with no meaning for an in-memory member.
const IGNORED: &[&str] = &[
    "auto-compaction-mode", "auto-compaction-retention", "log-level", "logger", "log-outputs", "enable-v2",
    "enable-pprof", "metrics",
    "experimental-initial-corrupt-check", "experimental-watch-progress-notify-interval", "unsafe-no-fsync",
    "max-txn-ops", "backend-batch-limit", "backend-batch-interval", "strict-reconfig-check", "socket-reuse-address",
];

const KNOWN: &[&str] = &[
    "name", "data-dir", "listen-client-urls", "advertise-client-urls", "initial-advertise-peer-urls", "listen-metrics-urls", "max-request-bytes",
    "cert-file", "key-file", "trusted-ca-file", "client-cert-auth", "watch-progress-notify-interval", "durability",
    "durability-prefix", "restore-from", "wal-checkpoint-bytes", "quota-backend-bytes", "auth-token", "auth-token-ttl", "bcrypt-cost",
    "test-fault-fsync-latency", "test-fault-write-latency", "value-compression", "value-compression-cpu", "grpc-transport", "history-spill",
    "runtime-workers", "initial-cluster", "initial-cluster-state", "auto-tls", "self-signed-cert-validity",
    "listen-peer-urls", "initial-cluster-token", "heartbeat-interval", "election-timeout", "snapshot-count",
    "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-client-cert-auth", "peer-auto-tls",
];

const BOOL_FLAGS: &[&str] = &["auto-tls", "peer-auto-tls", "client-cert-auth", "enable-v2", "enable-pprof", "strict-reconfig-check", "unsafe-no-fsync", "experimental-initial-corrupt-check", "peer-client-cert-auth", "socket-reuse-address"];

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn parse_bool(flag: &str, v: &str) -> Result<bool, String> {
    match v {
        "true" | "1" | "" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("invalid value {v:?} for --{flag}: expected true or false")),
    }
}

pub fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let Some(body) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            return Err(format!("unexpected argument {a:?}"));
        };
        let (flag, inline) = match body.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        if !KNOWN.contains(&flag.as_str()) && !IGNORED.contains(&flag.as_str()) {
            return Err(format!("unknown flag: --{flag}"));
        }
        let is_bool = BOOL_FLAGS.contains(&flag.as_str());
        let value = match (inline, is_bool) {
            (Some(v), _) => v,
            (None, true) => String::new(),
            (None, false) => {
                i += 1;
                args.get(i).cloned().ok_or_else(|| format!("flag needs an argument: --{flag}"))?
            }
        };
        match flag.as_str() {
            "name" => c.name = value,
            "data-dir" => c.data_dir = value,
            "listen-client-urls" => c.listen_client_urls = list(&value),
            "advertise-client-urls" => c.advertise_client_urls = list(&value),
            "initial-advertise-peer-urls" => c.advertise_peer_urls = list(&value),
            "listen-metrics-urls" => c.listen_metrics_urls = list(&value),
            "max-request-bytes" => {
                c.max_request_bytes = value.parse().map_err(|_| format!("invalid value {value:?} for --max-request-bytes"))?
            }
            "cert-file" => c.cert_file = Some(value),
            "key-file" => c.key_file = Some(value),
            "trusted-ca-file" => c.trusted_ca_file = Some(value),
            "client-cert-auth" => c.client_cert_auth = parse_bool(&flag, &value)?,
            "watch-progress-notify-interval" => c.progress_notify_interval = parse_duration(&value)?,
            "durability" => {
                c.durability = value;
                c.durability_given = true;
            }
            "durability-prefix" => {
                for item in list(&value) {
                    let (p, m) = item.rsplit_once('=').ok_or_else(|| format!("invalid --durability-prefix entry {item:?}: want PREFIX=MODE"))?;
                    c.durability_prefixes.push((p.to_string(), m.to_string()));
                }
            }
            "restore-from" => c.restore_from = Some(value),
            "wal-checkpoint-bytes" => {
                c.checkpoint_bytes = value.parse().map_err(|_| format!("invalid value {value:?} for --wal-checkpoint-bytes"))?
            }
            "quota-backend-bytes" => {
                c.quota_backend_bytes =
                    value.parse().map_err(|_| format!("invalid value {value:?} for --quota-backend-bytes: want a number of bytes"))?
            }
            "auth-token" => {
                // etcd's form: TYPE[,k=v...]: simple, or jwt with its options (crate::auth::jwt).
                match value.split(',').next().unwrap_or("") {
                    "simple" => c.auth_token = value,
                    "jwt" => c.auth_token = value,
                    _ => return Err(format!("invalid value {value:?} for --auth-token: auth: invalid auth options")),
                }
            }
            "auth-token-ttl" => {
                let n: u64 = value.parse().map_err(|_| format!("invalid value {value:?} for --auth-token-ttl: want seconds"))?;
                c.auth_token_ttl = Duration::from_secs(n);
            }
            "bcrypt-cost" => c.bcrypt_cost = value.parse().map_err(|_| format!("invalid value {value:?} for --bcrypt-cost"))?,
            "test-fault-fsync-latency" => c.test_fault_fsync_latency = parse_duration(&value)?,
            "test-fault-write-latency" => c.test_fault_write_latency = parse_duration(&value)?,
            "value-compression" => c.value_compression = parse_bool(&flag, &value)?,
            "value-compression-cpu" => {
                c.value_compression_cpu = value
                    .parse()
                    .ok()
                    .filter(|x: &f64| *x > 0.0 && *x <= 1.0)
                    .ok_or_else(|| format!("invalid value {value:?} for --value-compression-cpu: want a share of one core in (0, 1]"))?
            }
            "history-spill" => c.history_spill = parse_bool(&flag, &value)?,
            "grpc-transport" => {
                c.lean_transport = match value.as_str() {
                    "lean" => true,
                    "tonic" => false,
                    _ => return Err(format!("invalid value {value:?} for --grpc-transport: want lean or tonic")),
                }
            }
            "runtime-workers" => {
                c.runtime_workers = match value.as_str() {
                    "auto" => None,
                    v => Some(v.parse().ok().filter(|n: &usize| *n > 0).ok_or_else(|| format!("invalid value {value:?} for --runtime-workers: want auto or a number ≥ 1"))?),
                }
            }
            "initial-cluster" => {
                c.initial_cluster.clear();
                for item in list(&value) {
                    let (n, u) = item.split_once('=').ok_or_else(|| format!("invalid value {value:?} for --initial-cluster: want NAME=PEER_URL,..."))?;
                    c.initial_cluster.push((n.to_string(), u.to_string()));
                }
            }
            "initial-cluster-state" => match value.as_str() {
                "new" | "existing" => c.initial_cluster_state = value,
                _ => return Err(format!("invalid value {value:?} for --initial-cluster-state: want new or existing")),
            },
            "initial-cluster-token" => c.initial_cluster_token = value,
            "snapshot-count" => {
                c.snapshot_count = value.parse().ok().filter(|n| *n >= 2).ok_or_else(|| format!("invalid value {value:?} for --snapshot-count: want a number ≥ 2"))?
            }
            "listen-peer-urls" => c.listen_peer_urls = list(&value),
            "heartbeat-interval" | "election-timeout" => {
                let ms: u64 = value.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("invalid value {value:?} for --{flag}: want milliseconds"))?;
                let d = Duration::from_millis(ms);
                if flag == "heartbeat-interval" {
                    c.heartbeat_interval = d;
                } else {
                    c.election_timeout = d;
                }
            }
            "auto-tls" => c.auto_tls = parse_bool(&flag, &value)?,
            "peer-cert-file" => c.peer_cert_file = Some(value),
            "peer-key-file" => c.peer_key_file = Some(value),
            "peer-trusted-ca-file" => c.peer_trusted_ca_file = Some(value),
            "peer-client-cert-auth" => c.peer_client_cert_auth = parse_bool(&flag, &value)?,
            "peer-auto-tls" => c.peer_auto_tls = parse_bool(&flag, &value)?,
            "self-signed-cert-validity" => {
                c.self_signed_cert_validity = value
                    .parse()
                    .ok()
                    .filter(|n: &u32| *n > 0)
                    .ok_or_else(|| format!("invalid value {value:?} for --self-signed-cert-validity: want a number of years ≥ 1"))?
            }
            f if IGNORED.contains(&f) => c.ignored.push(format!("--{f}")),
            _ => return Err(format!("unknown flag: --{flag}")),
        }
        i += 1;
    }
    if c.data_dir.is_empty() {
        c.data_dir = format!("{}.etcd", c.name);
    }
    if c.advertise_client_urls.is_empty() {
        c.advertise_client_urls = c.listen_client_urls.clone();
    }
    for m in std::iter::once(&c.durability).chain(c.durability_prefixes.iter().map(|(_, m)| m)) {
        if !["none", "buffered", "fsync", "replicated"].contains(&m.as_str()) {
            return Err(format!("invalid durability mode {m:?}: want none, buffered, fsync or replicated"));
        }
    }
    if c.cert_file.is_some() != c.key_file.is_some() {
        return Err("--cert-file and --key-file go together".into());
    }
    check_cluster(&mut c)?;
    Ok(c)
}

impl Config {
    /// A member of a replicated group: --initial-cluster names other members.
    pub fn is_cluster(&self) -> bool {
        self.initial_cluster.iter().any(|(n, _)| *n != self.name)
    }

    /// This member's peer URLs as --initial-cluster gives them.
    pub fn own_peer_urls(&self) -> Vec<String> {
        self.initial_cluster.iter().filter(|(n, _)| *n == self.name).map(|(_, u)| u.clone()).collect()
    }

    /// Whether the peer links are TLS: any https:// URL among --initial-cluster
    /// and --listen-peer-urls (check_cluster holds the rules for the TLS flags).
    pub fn peer_https(&self) -> bool {
        self.initial_cluster.iter().map(|(_, u)| u).chain(&self.listen_peer_urls).any(|u| u.starts_with("https://"))
    }
}

/// etcd's checks of the cluster flags, then what a replicated group built so
/// far can serve (docs/design.md §10): refused in one line rather than started
/// as a member that would not keep its promise.
fn check_cluster(c: &mut Config) -> Result<(), String> {
    if !c.initial_cluster.is_empty() && !c.initial_cluster.iter().any(|(n, _)| *n == c.name) {
        return Err(format!("couldn't find local name {:?} in the initial cluster configuration", c.name));
    }
    fn modes(c: &Config) -> Vec<String> {
        std::iter::once(c.durability.clone()).chain(c.durability_prefixes.iter().map(|(_, m)| m.clone())).collect()
    }
    if !c.is_cluster() {
        if c.initial_cluster_state == "existing" {
            return Err("--initial-cluster-state=existing needs --initial-cluster naming the members already running".into());
        }
        if modes(c).iter().any(|m| m == "replicated") {
            return Err("--durability replicated needs a replicated group: --initial-cluster naming the other members".into());
        }
        return Ok(());
    }
    if !c.durability_given {
        c.durability = "replicated".into();
    }
    let own = c.own_peer_urls();
    let adv_given = c.advertise_peer_urls != Config::default().advertise_peer_urls;
    if adv_given {
        let (mut a, mut b) = (own.clone(), c.advertise_peer_urls.clone());
        a.sort();
        b.sort();
        if a != b {
            return Err(format!(
                "--initial-cluster has {}={} but missing from --initial-advertise-peer-urls={}",
                c.name,
                own.join(","),
                c.advertise_peer_urls.join(",")
            ));
        }
    }
    c.advertise_peer_urls = own;
    for u in c.initial_cluster.iter().map(|(_, u)| u).chain(&c.listen_peer_urls) {
        crate::replication::peer_tls::split_url(u)?;
    }
    let https = c.peer_https();
    let files = c.peer_cert_file.is_some() || c.peer_key_file.is_some();
    if https && !files && !c.peer_auto_tls {
        return Err("https peer URLs need peer TLS: --peer-cert-file and --peer-key-file (with --peer-trusted-ca-file), or --peer-auto-tls".into());
    }
    if files && (c.peer_cert_file.is_none() || c.peer_key_file.is_none()) {
        return Err("--peer-cert-file and --peer-key-file go together".into());
    }
    // Go's TLS would check peers against the host's CA pool; this build has
    // none, so the CA that signed the members' certificates is named.
    if files && c.peer_trusted_ca_file.is_none() {
        return Err("--peer-cert-file needs --peer-trusted-ca-file: the CA every member's peer certificate chains to".into());
    }
    if c.peer_client_cert_auth && c.peer_trusted_ca_file.is_none() {
        return Err("--peer-client-cert-auth needs --peer-trusted-ca-file".into());
    }
    if c.election_timeout < 5 * c.heartbeat_interval {
        return Err(format!(
            "--election-timeout[{}ms] should be at least as 5 times as --heartbeat-interval[{}ms]",
            c.election_timeout.as_millis(),
            c.heartbeat_interval.as_millis()
        ));
    }
    Ok(())
}

/// The runtime's worker threads: the flag's number, or one fewer than the CPUs
/// this process may use (affinity and cgroup quota count), at least one. The
/// store's own threads (wal-fsync, wal-write, checkpoint, bulk reads, compaction)
/// and the kernel's network work need a CPU too; a worker for every CPU competed
/// with them and parked and woke more often than it served (§8 rule 10).
pub fn runtime_workers(c: &Config, cpus: usize) -> usize {
    c.runtime_workers.unwrap_or(cpus.saturating_sub(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_etcd_style_flags() {
        let c = parse(&a(&["--name", "n1", "--listen-client-urls=http://127.0.0.1:1,http://127.0.0.1:2", "--client-cert-auth", "--max-request-bytes", "10", "--enable-pprof"])).unwrap();
        assert_eq!(c.name, "n1");
        assert_eq!(c.data_dir, "n1.etcd");
        assert_eq!(c.listen_client_urls.len(), 2);
        assert!(c.client_cert_auth);
        assert_eq!(c.max_request_bytes, 10);
        assert_eq!(c.ignored, vec!["--enable-pprof"]);
        assert_eq!(c.quota_backend_bytes, 0);
        assert_eq!(parse(&a(&["--quota-backend-bytes", "33554432"])).unwrap().quota_backend_bytes, 33554432);
        assert_eq!(parse(&a(&["--quota-backend-bytes=-1"])).unwrap().quota_backend_bytes, -1);
        assert!(parse(&a(&["--quota-backend-bytes=32MiB"])).is_err());
        // etcd's default peer URL, or the flag's: reported by MemberList only.
        assert_eq!(c.advertise_peer_urls, vec!["http://localhost:2380"]);
        let c = parse(&a(&["--initial-advertise-peer-urls", "http://10.0.0.1:2380,http://10.0.0.2:2380"])).unwrap();
        assert_eq!(c.advertise_peer_urls, vec!["http://10.0.0.1:2380", "http://10.0.0.2:2380"]);
        assert!(c.ignored.is_empty());
    }

    #[test]
    fn cluster_flags() {
        // One member named in the list, as etcd's default: a single member.
        let c = parse(&a(&["--name", "m0", "--initial-cluster", "m0=http://127.0.0.1:2380", "--initial-cluster-state", "new"])).unwrap();
        assert_eq!(c.initial_cluster, vec![("m0".to_string(), "http://127.0.0.1:2380".to_string())]);
        assert!(!c.is_cluster());
        // Two peer URLs of the same member are still one member.
        assert!(!parse(&a(&["--name=m0", "--initial-cluster=m0=http://127.0.0.1:2380,m0=http://127.0.0.2:2380"])).unwrap().is_cluster());
        let three = ["--name", "m1", "--initial-cluster", "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2381,m2=http://127.0.0.1:2382"];
        let c = parse(&a(&three)).unwrap();
        assert!(c.is_cluster());
        assert_eq!(c.durability, "replicated", "a group's default");
        assert_eq!(c.advertise_peer_urls, vec!["http://127.0.0.1:2381"]);
        let with = |extra: &[&str]| parse(&a(&[&three[..], extra].concat()));
        assert!(with(&["--durability", "none"]).is_ok());
        // buffered and fsync prefixes: the members keep their raft logs on disk.
        assert!(with(&["--durability-prefix", "/registry/pods/=fsync"]).is_ok());
        assert!(with(&["--durability", "buffered"]).is_ok());
        let e = with(&["--initial-advertise-peer-urls", "http://127.0.0.1:9"]).unwrap_err();
        assert!(e.contains("missing from --initial-advertise-peer-urls"), "{e}");
        assert!(with(&["--initial-advertise-peer-urls", "http://127.0.0.1:2381"]).is_ok());
        assert!(with(&["--listen-peer-urls", "https://127.0.0.1:2381"]).unwrap_err().contains("--peer-auto-tls"));
        assert!(with(&["--listen-peer-urls", "https://127.0.0.1:2381", "--peer-auto-tls"]).is_ok());
        assert!(with(&["--listen-peer-urls", "https://127.0.0.1:2381", "--peer-cert-file=c", "--peer-key-file=k"]).unwrap_err().contains("--peer-trusted-ca-file"));
        assert!(with(&["--listen-peer-urls", "https://127.0.0.1:2381", "--peer-cert-file=c"]).unwrap_err().contains("go together"));
        assert!(with(&["--listen-peer-urls", "https://127.0.0.1:2381", "--peer-cert-file=c", "--peer-key-file=k", "--peer-trusted-ca-file=a"]).is_ok());
        assert!(with(&["--listen-peer-urls", "unix://x:1"]).unwrap_err().contains("https://host:port"));
        assert_eq!(with(&["--initial-cluster-state", "existing"]).unwrap().initial_cluster_state, "existing");
        let c = with(&["--heartbeat-interval", "50", "--election-timeout=500", "--initial-cluster-token", "t1"]).unwrap();
        assert_eq!((c.heartbeat_interval, c.election_timeout, c.initial_cluster_token.as_str()), (Duration::from_millis(50), Duration::from_millis(500), "t1"));
        assert!(with(&["--heartbeat-interval", "500"]).unwrap_err().contains("5 times"));
        let e = parse(&a(&["--name", "mx", "--initial-cluster", "m0=http://127.0.0.1:2380"])).unwrap_err();
        assert_eq!(e, "couldn't find local name \"mx\" in the initial cluster configuration");
        assert!(parse(&a(&["--initial-cluster-state=existing"])).unwrap_err().contains("existing"));
        assert!(parse(&a(&["--durability=replicated"])).unwrap_err().contains("needs a replicated group"));
        assert!(parse(&a(&["--initial-cluster-state=sometimes"])).is_err());
        assert!(parse(&a(&["--initial-cluster=m0"])).is_err());
    }

    #[test]
    fn auto_tls_flags() {
        let c = parse(&a(&["--auto-tls", "--peer-auto-tls", "--self-signed-cert-validity=2"])).unwrap();
        assert!(c.auto_tls);
        assert_eq!(c.self_signed_cert_validity, 2);
        assert!(c.peer_auto_tls && c.ignored.is_empty());
        assert!(!parse(&a(&["--auto-tls=false"])).unwrap().auto_tls);
        assert!(parse(&a(&["--self-signed-cert-validity=0"])).is_err());
    }

    #[test]
    fn rejects_unknown_flags() {
        let e = parse(&a(&["--no-such-flag"])).unwrap_err();
        assert!(e.contains("--no-such-flag"), "{e}");
        assert!(parse(&a(&["--durability=sometimes"])).is_err());
    }

    #[test]
    fn runtime_workers_leave_a_cpu_to_the_store_s_own_threads() {
        let auto = parse(&a(&[])).unwrap();
        assert_eq!(runtime_workers(&auto, 2), 1);
        assert_eq!(runtime_workers(&auto, 1), 1);
        assert_eq!(runtime_workers(&auto, 16), 15);
        assert_eq!(runtime_workers(&parse(&a(&["--runtime-workers=auto"])).unwrap(), 8), 7);
        assert_eq!(runtime_workers(&parse(&a(&["--runtime-workers", "3"])).unwrap(), 2), 3);
        for bad in ["0", "-1", "two"] {
            let e = parse(&a(&["--runtime-workers", bad])).unwrap_err();
            assert!(e.contains("--runtime-workers"), "{e}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    }

    #[test]
    fn auth_flags() {
        let c = parse(&a(&[])).unwrap();
        assert_eq!((c.auth_token.as_str(), c.auth_token_ttl, c.bcrypt_cost), ("simple", Duration::from_secs(300), 10));
        let c = parse(&a(&["--auth-token=jwt,sign-method=RS256,pub-key=/k.pub", "--auth-token-ttl", "60", "--bcrypt-cost=4"])).unwrap();
        assert_eq!((c.auth_token.as_str(), c.auth_token_ttl, c.bcrypt_cost), ("jwt,sign-method=RS256,pub-key=/k.pub", Duration::from_secs(60), 4));
        assert!(parse(&a(&["--auth-token=oauth"])).unwrap_err().contains("invalid auth options"));
        assert!(parse(&a(&["--auth-token-ttl=5m"])).is_err(), "etcd's flag is a number of seconds");
    }

    #[test]
    fn test_fault_flags() {
        let c = parse(&a(&[])).unwrap();
        assert!(c.test_fault_fsync_latency.is_zero() && c.test_fault_write_latency.is_zero());
        let c = parse(&a(&["--test-fault-fsync-latency", "200ms", "--test-fault-write-latency=5ms"])).unwrap();
        assert_eq!((c.test_fault_fsync_latency, c.test_fault_write_latency), (Duration::from_millis(200), Duration::from_millis(5)));
        assert!(parse(&a(&["--test-fault-fsync-latency=slow"])).is_err());
    }
}
