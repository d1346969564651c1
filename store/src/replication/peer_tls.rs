//! How members reach each other: a peer URL's scheme decides the wire, as in
//! etcd. `http://` is TCP; `https://` is TLS over it, with etcd's peer flags:
//! `--peer-cert-file`/`--peer-key-file` (this member's certificate, offered as
//! a server and, when asked, as a client), `--peer-trusted-ca-file` (the CA a
//! peer's certificate must chain to; its name must match the URL's host), and
//! `--peer-client-cert-auth` (the listener asks every peer for a certificate of
//! that CA). `--peer-auto-tls` without certificate files makes a self-signed
//! one and, as etcd's self-signed peers do, does not check the peer's (the
//! handshake still proves the peer holds its key).
//!
//! Everything the peer port carries (raft frames, snapshots, forwarded calls,
//! the roster) goes over a `PeerStream`, so TLS is decided here once.
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A byte stream between two members.
pub trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> PeerIo for T {}

/// A connection between members: TCP, or TLS over TCP for an https:// peer URL.
pub type PeerStream = Box<dyn PeerIo>;

/// This member's peer TLS: how it dials https:// peer URLs and serves its
/// https:// --listen-peer-urls.
pub struct PeerTls {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
}

impl PeerTls {
    pub fn new(server: Arc<ServerConfig>, client: Arc<ClientConfig>) -> PeerTls {
        PeerTls { connector: TlsConnector::from(client), acceptor: TlsAcceptor::from(server) }
    }
}

/// The client side of peer TLS: this member's certificate, offered when the
/// peer asks for one, and the peer's checked against `ca_pem` (None, for
/// --peer-auto-tls: not checked, as etcd's self-signed peers).
pub fn client_config(cert_pem: &[u8], key_pem: &[u8], ca_pem: Option<&[u8]>) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>().map_err(|e| format!("--peer-cert-file: {e}"))?;
    if certs.is_empty() {
        return Err("--peer-cert-file: no certificate in it".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("--peer-key-file: {e}"))?;
    let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?;
    let builder = match ca_pem {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca) {
                roots.add(c.map_err(|e| format!("--peer-trusted-ca-file: {e}"))?).map_err(|e| format!("--peer-trusted-ca-file: {e}"))?;
            }
            if roots.is_empty() {
                return Err("--peer-trusted-ca-file: no certificate in it".into());
            }
            builder.with_root_certificates(roots)
        }
        None => builder.dangerous().with_custom_certificate_verifier(Arc::new(SelfSigned(provider))),
    };
    let config = builder.with_client_auth_cert(certs, key).map_err(|e| format!("--peer-cert-file/--peer-key-file: {e}"))?;
    Ok(Arc::new(config))
}

/// Accepts any peer certificate whose holder signs the handshake with its key
/// (--peer-auto-tls: every member's certificate is its own, self-signed).
#[derive(Debug)]
struct SelfSigned(Arc<CryptoProvider>);

impl ServerCertVerifier for SelfSigned {
    fn verify_server_cert(&self, _: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: &ServerName<'_>, _: &[u8], _: UnixTime) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A peer URL's host:port (not resolved) and whether it is https.
pub fn split_url(url: &str) -> Result<(&str, bool), String> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) => (r, true),
        _ => return Err(format!("peer URL {url:?}: want http://host:port or https://host:port")),
    };
    let hp = rest.trim_end_matches('/');
    match hp.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => Ok((hp, tls)),
        _ => Err(format!("peer URL {url:?}: want http://host:port or https://host:port")),
    }
}

/// The first address `host_port` resolves to, asked at each call without
/// blocking the runtime (a pod's name may point elsewhere after a restart).
pub async fn resolve(host_port: &str) -> io::Result<std::net::SocketAddr> {
    tokio::net::lookup_host(host_port)
        .await?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host_port}: no address")))
}

/// Connects to the member at peer URL `url`: its name resolved now, TLS for
/// https:// (this member's `tls`, which it must have).
pub async fn dial(tls: Option<&PeerTls>, url: &str) -> io::Result<PeerStream> {
    Ok(dial_with_socket(tls, url).await?.0)
}

/// `dial`, with a second handle on a plaintext connection's socket
/// (non-blocking, as the stream's): the raft thread writes to it directly
/// (peer.rs, `Direct`). None over TLS.
pub async fn dial_with_socket(tls: Option<&PeerTls>, url: &str) -> io::Result<(PeerStream, Option<std::net::TcpStream>)> {
    let (hp, secure) = split_url(url).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let addr = resolve(hp).await?;
    let s = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    s.set_nodelay(true)?;
    if !secure {
        use std::os::fd::AsFd;
        let dup = std::net::TcpStream::from(s.as_fd().try_clone_to_owned()?);
        return Ok((Box::new(s), Some(dup)));
    }
    let tls = tls.ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("peer URL {url} is https and this member has no peer TLS (--peer-cert-file and --peer-key-file, or --peer-auto-tls)"))
    })?;
    let host = hp.rsplit_once(':').map_or(hp, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("peer URL {url}: {e}")))?;
    let s = tokio::time::timeout(Duration::from_secs(2), tls.connector.connect(name, s))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok((Box::new(s), None))
}

/// The server side of a connection on a peer listener: TLS when the listener
/// is https (`tls`), its handshake bounded so a silent stranger holds nothing.
pub async fn accept(tls: Option<&PeerTls>, s: TcpStream) -> io::Result<PeerStream> {
    let _ = s.set_nodelay(true);
    let Some(tls) = tls else { return Ok(Box::new(s)) };
    let s = tokio::time::timeout(Duration::from_secs(5), tls.acceptor.accept(s))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(Box::new(s))
}

/// A peer stream read and written with std::io from a thread outside the
/// runtime's workers (a snapshot is written and read that way), each call
/// bounded by `timeout`: a peer that stops (its process hung, or cut off
/// mid-stream) must not hold the thread for ever.
pub struct Blocking {
    s: PeerStream,
    rt: tokio::runtime::Handle,
    timeout: Duration,
}

impl Blocking {
    pub fn new(s: PeerStream, rt: tokio::runtime::Handle, timeout: Duration) -> Blocking {
        Blocking { s, rt, timeout }
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }
}

fn bounded<T>(rt: &tokio::runtime::Handle, limit: Duration, f: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
    rt.block_on(async move { tokio::time::timeout(limit, f).await.map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "peer stream timed out"))? })
}

impl io::Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        bounded(&self.rt, self.timeout, self.s.read(buf))
    }
}

impl io::Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        bounded(&self.rt, self.timeout, self.s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        bounded(&self.rt, self.timeout, self.s.flush())
    }
}

impl Drop for Blocking {
    /// TLS ends with its close_notify, so the reader of a written snapshot sees
    /// its end rather than a cut connection.
    fn drop(&mut self) {
        let _ = bounded(&self.rt, self.timeout, self.s.shutdown());
    }
}
