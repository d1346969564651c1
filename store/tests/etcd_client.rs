//! The Rust `etcd-client` crate (0.21) against the store's Lock and Election
//! services, served in-process: its own integration tests `test_lock` and
//! `test_election` (tests/client.rs), step for step, then contention through
//! the same client.
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbLeaseServer, PbWatchServer};
use etcd_client::{Client, ConnectOptions, LockOptions, ProclaimOptions, ResignOptions};
use meganode_store::config::Config;
use meganode_store::server::{self, election, kv, lease, lock, watch, Ctx};
use meganode_store::Store;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;

type Result<T> = std::result::Result<T, etcd_client::Error>;

async fn serve() -> String {
    let ctx = Ctx::new(Arc::new(Store::new()), Config::default(), None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limit = server::decode_limit(ctx.cfg.max_request_bytes);
    let router = Server::builder()
        .add_service(kv::KvRouter::new(ctx.clone(), limit))
        .add_service(PbLeaseServer::new(lease::LeaseService(ctx.clone())))
        .add_service(PbWatchServer::new(watch::WatchService(ctx.clone())))
        .add_service(lock::LockRouter::new(ctx.clone(), limit))
        .add_service(election::ElectionRouter::new(ctx.clone(), limit));
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr.to_string()
}

async fn client(addr: &str) -> Result<Client> {
    Client::connect([addr], Some(ConnectOptions::default().with_require_leader(true))).await
}

#[tokio::test]
async fn etcd_client_test_lock() -> Result<()> {
    let mut client = client(&serve().await).await?;
    let resp = client.lock("lock-test", None).await?;
    let key = resp.key();
    let key_str = std::str::from_utf8(key).unwrap();
    assert!(key_str.starts_with("lock-test/"));

    client.unlock(key).await?;
    Ok(())
}

#[tokio::test]
async fn etcd_client_test_election() -> Result<()> {
    let mut client = client(&serve().await).await?;
    let resp = client.lease_grant(10, None).await?;
    let lease_id = resp.id();
    assert_eq!(resp.ttl(), 10);

    let resp = client.campaign("myElection", "123", lease_id).await?;
    let leader = resp.leader().unwrap();
    assert_eq!(leader.name(), b"myElection");
    assert_eq!(leader.lease(), lease_id);

    let resp = client.proclaim("123", Some(ProclaimOptions::new().with_leader(leader.clone()))).await?;
    assert!(resp.header().is_some());

    let mut msg = client.observe(leader.name()).await?;
    loop {
        if let Some(resp) = msg.message().await? {
            assert!(resp.kv().is_some());
            if resp.kv().is_some() {
                break;
            }
        }
    }

    let resp = client.leader("myElection").await?;
    let kv = resp.kv().unwrap();
    assert_eq!(kv.value(), b"123");
    assert_eq!(kv.key(), leader.key());

    let resp = client.resign(Some(ResignOptions::new().with_leader(leader.clone()))).await?;
    assert!(resp.header().is_some());
    Ok(())
}

#[tokio::test]
async fn etcd_client_lock_contention_and_observe() -> Result<()> {
    let addr = serve().await;
    let mut a = client(&addr).await?;
    let la = a.lease_grant(60, None).await?.id();
    let lb = a.lease_grant(60, None).await?.id();
    let held = a.lock("job", Some(LockOptions::new().with_lease(la))).await?;
    assert_eq!(held.key(), format!("job/{la:x}").as_bytes());
    let mut b = client(&addr).await?;
    let waiter = tokio::spawn(async move { b.lock("job", Some(LockOptions::new().with_lease(lb))).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let unlocked = a.unlock(held.key()).await?;
    let got = waiter.await.unwrap()?;
    assert_eq!(got.key(), format!("job/{lb:x}").as_bytes());
    assert_eq!(got.header().unwrap().revision(), unlocked.header().unwrap().revision());

    // Observe follows leaders in order.
    let mut obs = a.observe("e").await?;
    let first = a.campaign("e", "one", la).await?;
    let m = obs.message().await?.unwrap();
    assert_eq!(m.kv().unwrap().value(), b"one");
    let mut c = client(&addr).await?;
    let second = tokio::spawn(async move { c.campaign("e", "two", lb).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.proclaim("one-b", Some(ProclaimOptions::new().with_leader(first.leader().unwrap().clone()))).await?;
    assert_eq!(obs.message().await?.unwrap().kv().unwrap().value(), b"one-b");
    a.resign(Some(ResignOptions::new().with_leader(first.leader().unwrap().clone()))).await?;
    second.await.unwrap()?;
    assert_eq!(obs.message().await?.unwrap().kv().unwrap().value(), b"two");
    Ok(())
}
