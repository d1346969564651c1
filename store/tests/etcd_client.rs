//! The Rust `etcd-client` crate (0.21) against the store's Lock, Election and
//! Auth services, served in-process: its own integration tests `test_lock`,
//! `test_election`, `test_role` and `test_user` (tests/client.rs), step for
//! step, then contention through the same client, and a user's client under
//! auth.
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, ConnectOptions, LockOptions, Permission, PermissionType, ProclaimOptions, ResignOptions, RoleRevokePermissionOptions, UserAddOptions,
};
use meganode_store::config::Config;
use meganode_store::server::Ctx;
use meganode_store::Store;

type Result<T> = std::result::Result<T, etcd_client::Error>;

/// A store served by the lean transport (meganode_store::transport), as the binary
/// serves a plaintext port: KV through its hot path, Lock, Election, Auth, Lease and
/// Watch bridged to the tonic routes.
async fn serve() -> String {
    let ctx = Ctx::new(Arc::new(Store::new()), Config::default(), None);
    meganode_store::transport::serve_local(ctx).await.unwrap().to_string()
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

#[tokio::test]
async fn etcd_client_test_role() -> Result<()> {
    let mut client = client(&serve().await).await?;

    let role1 = "role1_";
    let role2 = "role2_";

    let _ = client.role_delete(role1).await;
    let _ = client.role_delete(role2).await;

    client.role_add(role1).await?;

    client.role_get(role1).await?;

    client.role_delete(role1).await?;
    client.role_get(role1).await.unwrap_err();

    client.role_add(role2).await?;
    client.role_get(role2).await?;

    {
        let resp = client.role_list().await?;
        assert!(resp.roles().contains(&role2.to_string()));
    }

    client.role_grant_permission(role2, Permission::read("123")).await?;
    client.role_grant_permission(role2, Permission::write("abc").with_from_key()).await?;
    client.role_grant_permission(role2, Permission::read_write("hi").with_range_end("hjj")).await?;
    client.role_grant_permission(role2, Permission::new(PermissionType::Write, "pp").with_prefix()).await?;
    client.role_grant_permission(role2, Permission::new(PermissionType::Read, "xyz").with_all_keys()).await?;

    {
        let resp = client.role_get(role2).await?;
        let permissions = resp.permissions();
        assert!(permissions.contains(&Permission::read("123")));
        assert!(permissions.contains(&Permission::write("abc").with_from_key()));
        assert!(permissions.contains(&Permission::read_write("hi").with_range_end("hjj")));
        assert!(permissions.contains(&Permission::write("pp").with_prefix()));
        assert!(permissions.contains(&Permission::read("xyz").with_all_keys()));
    }

    //revoke all permission
    client.role_revoke_permission(role2, "123", None).await?;
    client.role_revoke_permission(role2, "abc", Some(RoleRevokePermissionOptions::new().with_from_key())).await?;
    client.role_revoke_permission(role2, "hi", Some(RoleRevokePermissionOptions::new().with_range_end("hjj"))).await?;
    client.role_revoke_permission(role2, "pp", Some(RoleRevokePermissionOptions::new().with_prefix())).await?;
    client.role_revoke_permission(role2, "xyz", Some(RoleRevokePermissionOptions::new().with_all_keys())).await?;

    let resp = client.role_get(role2).await?;
    assert!(resp.permissions().is_empty());

    client.role_delete(role2).await?;

    Ok(())
}

#[tokio::test]
async fn etcd_client_test_user() -> Result<()> {
    let name1 = "usr1";
    let password1 = "pwd1";
    let name2 = "usr2";
    let password2 = "pwd2";
    let name3 = "usr3";
    let password3 = "pwd3";
    let role1 = "role1";

    let mut client = client(&serve().await).await?;

    // ignore result
    let _resp = client.user_delete(name1).await;
    let _resp = client.user_delete(name2).await;
    let _resp = client.user_delete(name3).await;
    let _resp = client.role_delete(role1).await;

    client.user_add(name1, password1, Some(UserAddOptions::new())).await?;

    client.user_add(name2, password2, Some(UserAddOptions::new().with_no_pwd())).await?;

    client.user_add(name3, password3, None).await?;

    client.user_get(name1).await?;

    {
        let resp = client.user_list().await?;
        assert!(resp.users().contains(&name1.to_string()));
    }

    client.user_delete(name2).await?;
    client.user_get(name2).await.unwrap_err();

    client.user_change_password(name1, password2).await?;
    client.user_get(name1).await?;

    client.role_add(role1).await?;
    client.user_grant_role(name1, role1).await?;
    client.user_get(name1).await?;

    client.user_revoke_role(name1, role1).await?;
    client.user_get(name1).await?;

    let _ = client.user_delete(name1).await;
    let _ = client.user_delete(name2).await;
    let _ = client.user_delete(name3).await;
    let _ = client.role_delete(role1).await;

    Ok(())
}

/// Auth on: the crate's client logs in with `with_user` (its token on every
/// call) and gets etcd's refusals where its roles do not reach.
#[tokio::test]
async fn etcd_client_user_under_auth() -> Result<()> {
    let addr = serve().await;
    let mut admin = client(&addr).await?;
    admin.user_add("root", "rootpw", None).await?;
    admin.user_grant_role("root", "root").await?;
    admin.role_add("ro").await?;
    admin.role_grant_permission("ro", Permission::read("/a/").with_prefix()).await?;
    admin.user_add("alice", "alicepw", None).await?;
    admin.user_grant_role("alice", "ro").await?;
    admin.auth_enable().await?;
    let err = admin.get("/a/1", None).await.unwrap_err();
    assert!(err.to_string().contains("etcdserver: user name is empty"), "{err}");

    let mut root = Client::connect([addr.as_str()], Some(ConnectOptions::new().with_user("root", "rootpw"))).await?;
    root.put("/a/1", "v", None).await?;
    assert!(root.user_list().await?.users().contains(&"alice".to_string()));

    let mut alice = Client::connect([addr.as_str()], Some(ConnectOptions::new().with_user("alice", "alicepw"))).await?;
    assert_eq!(alice.get("/a/1", None).await?.kvs().len(), 1);
    let err = alice.put("/a/1", "w", None).await.unwrap_err();
    assert!(err.to_string().contains("etcdserver: permission denied"), "{err}");
    let err = alice.user_list().await.unwrap_err();
    assert!(err.to_string().contains("etcdserver: permission denied"), "{err}");
    let bad = Client::connect([addr.as_str()], Some(ConnectOptions::new().with_user("alice", "wrong"))).await;
    assert!(bad.is_err(), "a wrong password connects");

    root.auth_disable().await?;
    admin.put("/a/2", "v", None).await?;
    Ok(())
}
