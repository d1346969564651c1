//! TLS listeners: the handshake here (rustls), then the same split as on a
//! plaintext listener — an HTTP/2 connection to the lean transport (`conn`), any
//! other (HTTP/1.1: etcd's endpoints, the gateway) to tonic's server.
//!
//! Why not tonic's own TLS: tonic does the handshake inside its server and keeps
//! the client's certificate in a connect-info type only it can build, so with
//! TLS on (as kube-apiserver runs against etcd in production) every call took
//! the tonic path, at the cost the lean transport exists to avoid. Here the
//! connection's verified client name (`ClientCert`) travels with it: hot calls
//! read it from the connection, bridged and tonic-served requests from their
//! extensions (`Ctx::creds`, the gateway's common-name check).
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{accept, conn, frame, unary, PREFACE_WAIT};
use crate::server::Ctx;

/// How long a client may take over its handshake (a connection that opens and
/// says nothing holds a task and a descriptor until then).
const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);

pub use crate::server::ClientCert;

/// The listener's TLS: our certificate, and with a client CA every client must
/// present a certificate it signed (etcd: --trusted-ca-file makes client
/// certificates required; --client-cert-auth makes their names the users).
/// ALPN offers h2 and http/1.1: etcd offers h2 and serves a client that offers
/// only http/1.1 without ALPN, which comes to the same.
pub fn server_config(cert_pem: &[u8], key_pem: &[u8], client_ca_pem: Option<&[u8]>) -> Result<Arc<ServerConfig>, String> {
    server_config_of("", cert_pem, key_pem, client_ca_pem)
}

/// `server_config` for the flags named with `prefix` ("peer-" for the peer
/// listener's --peer-cert-file, --peer-key-file and --peer-trusted-ca-file).
pub fn server_config_of(prefix: &str, cert_pem: &[u8], key_pem: &[u8], client_ca_pem: Option<&[u8]>) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>().map_err(|e| format!("--{prefix}cert-file: {e}"))?;
    if certs.is_empty() {
        return Err(format!("--{prefix}cert-file: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("--{prefix}key-file: {e}"))?;
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca) {
                roots.add(c.map_err(|e| format!("--{prefix}trusted-ca-file: {e}"))?).map_err(|e| format!("--{prefix}trusted-ca-file: {e}"))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots.into(), provider).build().map_err(|e| format!("--{prefix}trusted-ca-file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| format!("--{prefix}cert-file/--{prefix}key-file: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS connection after its handshake, with the bytes read to tell HTTP/2
/// from HTTP/1.1 put back in front of the rest.
pub struct TlsConn {
    head: Bytes,
    io: TlsStream<TcpStream>,
    client: ClientCert,
}

impl TlsConn {
    pub fn client(&self) -> &ClientCert {
        &self.client
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.head.is_empty() {
            let n = self.head.len().min(buf.remaining());
            buf.put_slice(&self.head[..n]);
            self.head.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// tonic puts this into every request it serves from the connection.
impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = ClientCert;
    fn connect_info(&self) -> ClientCert {
        self.client.clone()
    }
}

/// The verified client's common name, if it presented a certificate.
fn client_cert(s: &TlsStream<TcpStream>) -> ClientCert {
    let (_, session) = s.get_ref();
    let common_name = session.peer_certificates().and_then(|c| c.first()).and_then(|c| crate::auth::cn::common_name(c.as_ref())).map(Arc::from);
    ClientCert { common_name }
}

/// Reads up to the 24 bytes of the HTTP/2 preface, stopping at the first byte
/// that differs: what was read, and whether it is the preface. The first byte
/// may take as long as the client likes (a connection opened ahead of its use,
/// as on a plaintext listener); the rest of the preface must follow within
/// PREFACE_WAIT.
async fn read_head(io: &mut TlsStream<TcpStream>) -> io::Result<(Bytes, bool)> {
    let mut head = Vec::with_capacity(frame::PREFACE.len());
    let mut buf = [0u8; 24];
    let mut deadline = None;
    while head.len() < frame::PREFACE.len() {
        let want = frame::PREFACE.len() - head.len();
        let n = match deadline {
            None => io.read(&mut buf[..want]).await?,
            Some(d) => tokio::time::timeout_at(d, io.read(&mut buf[..want])).await.map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??,
        };
        deadline.get_or_insert_with(|| tokio::time::Instant::now() + PREFACE_WAIT);
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head[..] != frame::PREFACE[..head.len()] {
            return Ok((head.into(), false));
        }
    }
    let h2 = head.len() == frame::PREFACE.len();
    Ok((head.into(), h2))
}

/// Serves a TLS listener: after the handshake, HTTP/2 to the lean transport when
/// `lean` carries its services (else to tonic too), every other connection to
/// tonic's server through `others`.
pub async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    lean: Option<(Arc<Ctx>, tonic::service::Routes)>,
    others: mpsc::UnboundedSender<TlsConn>,
) -> io::Result<()> {
    let acceptor = TlsAcceptor::from(config);
    let lean = lean.map(|(ctx, routes)| {
        let max_message = ctx.cfg.max_request_bytes + crate::server::GRPC_OVERHEAD;
        (unary::Services::new(ctx), super::bridge::routes(routes), max_message)
    });
    loop {
        let (s, remote) = accept(&listener).await;
        let (acceptor, lean, others) = (acceptor.clone(), lean.clone(), others.clone());
        tokio::spawn(async move {
            let local = s.local_addr().ok();
            let Ok(Ok(mut io)) = tokio::time::timeout(HANDSHAKE_WAIT, acceptor.accept(s)).await else {
                return;
            };
            let client = client_cert(&io);
            let http1 = io.get_ref().1.alpn_protocol() == Some(b"http/1.1");
            let Some((services, routes, max_message)) = lean.filter(|_| !http1) else {
                super::count_connection(false, true);
                let _ = others.send(TlsConn { head: Bytes::new(), io, client });
                return;
            };
            let Ok((head, h2)) = read_head(&mut io).await else {
                return;
            };
            let tc = TlsConn { head, io, client };
            super::count_connection(h2, true);
            if h2 {
                // The name is the caller only under --client-cert-auth (as `Ctx::creds`);
                // with --trusted-ca-file alone the certificate is checked, not used.
                let cn = tc.client.common_name.clone().filter(|_| services.ctx.cfg.client_cert_auth);
                let _ = conn::Conn::new(tc, services, routes, max_message, local, Some(remote)).with_client_cn(cn).await;
            } else {
                let _ = others.send(tc);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::server_config;

    #[test]
    fn bad_files_are_named_in_the_error() {
        let err = server_config(b"", b"", None).unwrap_err();
        assert!(err.starts_with("--cert-file"), "{err}");
        let not_pem = b"-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
        let err = server_config(not_pem, b"", None).unwrap_err();
        assert!(err.starts_with("--cert-file"), "{err}");
    }
}
