//! etcd's --auto-tls (and --peer-auto-tls, the same for https:// peer URLs,
//! under fixtures/peer): an https:// client listener given no --cert-file serves a
//! self-signed certificate for the hosts of --listen-client-urls. As etcd's
//! (`transport.SelfCert`): an ECDSA P-256 key, organisation "etcd", server and
//! client use, valid --self-signed-cert-validity years, kept in
//! `<data-dir>/fixtures/client/{cert,key}.pem` and reused by the next start while
//! both files are there. Clients skip verification (`etcdctl --insecure-skip-tls-verify`),
//! as they do with etcd's.
use std::path::{Path, PathBuf};

/// The certificate and key (PEM) for `hosts`, made once under `dir`.
pub fn self_cert(dir: &Path, hosts: &[String], years: u32) -> Result<(Vec<u8>, Vec<u8>), String> {
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert_path.exists() && key_path.exists() {
        return Ok((read(&cert_path)?, read(&key_path)?));
    }
    let (cert, key) = make(hosts, years)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("auto-tls: {}: {e}", dir.display()))?;
    write_private(&key_path, key.as_bytes())?;
    std::fs::write(&cert_path, cert.as_bytes()).map_err(|e| format!("auto-tls: {}: {e}", cert_path.display()))?;
    Ok((cert.into_bytes(), key.into_bytes()))
}

/// Where --auto-tls keeps the client listener's certificate (etcd's place).
pub fn client_dir(data_dir: &str) -> PathBuf {
    Path::new(data_dir).join("fixtures").join("client")
}

/// Where --peer-auto-tls keeps the peer listener's certificate (etcd's place).
pub fn peer_dir(data_dir: &str) -> PathBuf {
    Path::new(data_dir).join("fixtures").join("peer")
}

/// The hosts of the listen URLs: IP addresses and names, without ports.
pub fn hosts_of(urls: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = urls
        .iter()
        .filter_map(|u| u.split_once("://").map(|(_, r)| r.trim_end_matches('/')))
        .map(|hp| match hp.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6).to_string(),
            None => hp.rsplit_once(':').map_or(hp, |(h, _)| h).to_string(),
        })
        .filter(|h| !h.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

fn make(hosts: &[String], years: u32) -> Result<(String, String), String> {
    let err = |e: rcgen::Error| format!("auto-tls: {e}");
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(err)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "etcd");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = now + time::Duration::days(365 * i64::from(years));
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth, rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().map_err(err)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("auto-tls: {}: {e}", p.display()))
}

/// The key is readable by its owner only (etcd writes it 0600).
fn write_private(p: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p)
        .map_err(|e| format!("auto-tls: {}: {e}", p.display()))?;
    f.write_all(bytes).map_err(|e| format!("auto-tls: {}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_come_from_the_listen_urls() {
        let urls = ["https://127.0.0.1:2379", "https://localhost:2379/", "http://[::1]:2379", "https://127.0.0.1:22379"];
        let urls: Vec<String> = urls.iter().map(|s| s.to_string()).collect();
        assert_eq!(hosts_of(&urls), vec!["127.0.0.1", "::1", "localhost"]);
    }

    #[test]
    fn a_certificate_is_made_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("auto-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let (cert, key) = self_cert(&dir, &hosts, 1).unwrap();
        assert!(String::from_utf8_lossy(&cert).starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(String::from_utf8_lossy(&key).contains("PRIVATE KEY"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.join("key.pem")).unwrap().permissions().mode() & 0o777, 0o600);
        // A server config takes it (the listener's own check).
        crate::transport::tls::server_config(&cert, &key, None).unwrap();
        let again = self_cert(&dir, &hosts, 1).unwrap();
        assert_eq!(again, (cert, key), "the next start reuses the files");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
