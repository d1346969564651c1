//! etcd's HTTP endpoints on the client URLs: etcd serves `/metrics`,
//! `/health`, `/livez`, `/readyz` and `/version` on the same port as gRPC
//! (HTTP/1.1 or HTTP/2, told apart per connection), and tools expect them
//! there — `curl http://127.0.0.1:2379/health`, Prometheus scraping the client
//! port, client libraries' test suites reading `/metrics`. The same answers as
//! on --listen-metrics-urls (metrics::answer).
use std::sync::Arc;

use axum::routing::{get, MethodRouter};
use tonic::codegen::http;
use tonic::service::Routes;

use super::{metrics, Ctx};

/// The checks behind /livez and /readyz, as etcd 3.6 registers them; each is
/// also served alone at /livez/<name> or /readyz/<name>.
const LIVEZ: [&str; 1] = ["serializable_read"];
const READYZ: [&str; 4] = ["data_corruption", "serializable_read", "linearizable_read", "non_learner"];

const TEXT: &str = "text/plain; charset=utf-8";

/// Entries a ready member may have committed and not yet applied (a busy
/// member applies a few behind its commit index all the time).
const CAUGHT_UP_SLACK: u64 = 1000;

/// The answer to an HTTP GET of one of etcd's endpoints, served here and on
/// --listen-metrics-urls: (status line, content type, body); None for any
/// other path.
pub fn answer(ctx: &Ctx, path: &str, query: &str) -> Option<(&'static str, &'static str, String)> {
    let params = || query.split('&').filter(|p| !p.is_empty());
    // etcd's getQuerySet: every value of the parameter (repeated, not comma-separated).
    let set = |name: &str| -> Vec<String> { params().filter_map(|p| p.strip_prefix(name)?.strip_prefix('=')).map(String::from).collect() };
    let verbose = params().any(|p| p == "verbose" || p.starts_with("verbose="));
    Some(match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics::render(ctx)),
        "/health" => health(ctx, &set("exclude")),
        "/livez" => checks(ctx, &LIVEZ, &set("exclude"), verbose),
        "/readyz" => checks(ctx, &READYZ, &set("exclude"), verbose),
        "/version" => (
            "200 OK",
            "application/json",
            format!("{{\"etcdserver\":\"{0}\",\"etcdcluster\":\"{0}\",\"storage\":\"{0}\"}}", super::ETCD_COMPAT_VERSION),
        ),
        _ => {
            let (root, name) = path.strip_prefix('/')?.split_once('/')?;
            let list: &[&str] = match root {
                "livez" => &LIVEZ,
                "readyz" => &READYZ,
                _ => return None,
            };
            let one = list.iter().find(|c| **c == name)?;
            checks(ctx, std::slice::from_ref(one), &[], verbose)
        }
    })
}

/// etcd's /health: unhealthy (503) while an alarm is raised, naming the first
/// one, unless the query excludes it (`?exclude=NOSPACE`).
fn health(ctx: &Ctx, excluded: &[String]) -> (&'static str, &'static str, String) {
    let raised = ctx.store.alarms.get(crate::quota::ALARM_NONE).into_iter().map(|(_, t)| t).find(|t| !excluded.contains(&crate::quota::alarm_name(*t)));
    match raised {
        // etcd writes the JSON without a content type; Go's sniffing names it plain text.
        None => ("200 OK", TEXT, "{\"health\":\"true\",\"reason\":\"\"}".to_string()),
        Some(t) => {
            let reason = match t {
                crate::quota::ALARM_NOSPACE => "ALARM NOSPACE",
                crate::quota::ALARM_CORRUPT => "ALARM CORRUPT",
                _ => "ALARM UNKNOWN",
            };
            // http.Error's form: plain text, a newline after the JSON.
            ("503 Service Unavailable", TEXT, format!("{{\"health\":\"false\",\"reason\":\"{reason}\"}}\n"))
        }
    }
}

/// etcd's /livez and /readyz: every check not excluded, `[+]name ok` or
/// `[-]name failed: why` per line; 503 with the lines when one fails, else
/// "ok" (after the lines with ?verbose). Serializable reads cannot fail here
/// (memory). data_corruption fails on the CORRUPT alarm; in a group,
/// non_learner on a learner, and linearizable_read on a member that knows no
/// leader or is still catching up after a restart (its reads would wait, as a
/// partitioned etcd member's do: its readiness probe takes it out of the
/// client Service meanwhile).
fn checks(ctx: &Ctx, list: &[&str], excluded: &[String], verbose: bool) -> (&'static str, &'static str, String) {
    let mut lines = String::new();
    let mut failed = false;
    let st = ctx.replica.get().map(|r| r.status());
    for name in list.iter().filter(|c| !excluded.iter().any(|e| e == *c)) {
        let why = match (*name, &st) {
            ("data_corruption", _) if ctx.store.alarms.corrupt() => Some("alarm activated: CORRUPT"),
            ("non_learner", Some(st)) if st.is_learner() => Some("not supported for learner"),
            ("linearizable_read", Some(st)) if st.leader == 0 => Some("etcdserver: no leader"),
            ("linearizable_read", Some(st)) if st.catching_up || st.applied_index < st.commit_index.saturating_sub(CAUGHT_UP_SLACK) => {
                Some("catching up with the group's log")
            }
            _ => None,
        };
        match why {
            Some(why) => {
                failed = true;
                lines.push_str(&format!("[-]{name} failed: {why}\n"));
            }
            None => lines.push_str(&format!("[+]{name} ok\n")),
        }
    }
    if failed {
        // http.Error adds a newline.
        return ("503 Service Unavailable", TEXT, lines + "\n");
    }
    if verbose {
        lines.push_str("ok\n");
        ("200 OK", TEXT, lines)
    } else {
        ("200 OK", TEXT, "ok\n".to_string())
    }
}

/// etcd's CORS headers (its accessController, with the default `--cors=*`), on
/// every HTTP answer of the client URLs — these endpoints, the gateway's —
/// and never on gRPC's.
pub fn cors(h: &mut http::HeaderMap) {
    h.insert("access-control-allow-methods", http::HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"));
    h.insert("access-control-allow-origin", http::HeaderValue::from_static("*"));
    h.insert("access-control-allow-headers", http::HeaderValue::from_static("accept, content-type, authorization"));
}

/// etcd's answer to OPTIONS on any HTTP path (a CORS preflight): 200, empty.
pub fn preflight() -> http::Response<axum::body::Body> {
    let mut r = http::Response::new(axum::body::Body::empty());
    cors(r.headers_mut());
    r
}

fn endpoint(ctx: Arc<Ctx>) -> MethodRouter {
    let get = get(move |req: http::Request<axum::body::Body>| {
        let ctx = ctx.clone();
        async move {
            let uri = req.uri();
            let (status, ctype, body) = answer(&ctx, uri.path(), uri.query().unwrap_or(""))
                .unwrap_or(("404 Not Found", "text/plain", "not found\n".to_string()));
            let code = status.split(' ').next().and_then(|c| c.parse::<u16>().ok()).unwrap_or(500);
            let mut r = http::Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, ctype)
                .body(axum::body::Body::from(body))
                .expect("a valid status and header");
            cors(r.headers_mut());
            r
        }
    });
    get.options(|| async { preflight() })
}

/// Adds the endpoints to the gRPC routes of one client URL.
pub fn add(routes: &mut Routes, ctx: &Arc<Ctx>) {
    let mut r = std::mem::take(routes.axum_router_mut());
    let subpaths = LIVEZ.iter().map(|c| format!("/livez/{c}")).chain(READYZ.iter().map(|c| format!("/readyz/{c}")));
    for p in ["/metrics", "/health", "/livez", "/readyz", "/version"].into_iter().map(String::from).chain(subpaths) {
        r = r.route(&p, endpoint(ctx.clone()));
    }
    // Anything else: gRPC's Unimplemented to a gRPC call (what tonic's own
    // fallback answers), 404 to plain HTTP as etcd's.
    r = r.fallback(|req: http::Request<axum::body::Body>| async move {
        let grpc = req.headers().get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        if grpc {
            tonic::Status::unimplemented("").into_http::<axum::body::Body>()
        } else if req.method() == http::Method::OPTIONS {
            preflight()
        } else {
            let mut r = http::Response::builder()
                .status(404)
                .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(axum::body::Body::from("404 page not found\n"))
                .expect("a valid status and header");
            cors(r.headers_mut());
            r
        }
    });
    *routes.axum_router_mut() = r;
}
