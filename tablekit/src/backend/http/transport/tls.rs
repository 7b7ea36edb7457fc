//! The inline transport's byte streams: plain TCP, or TLS through
//! tokio-rustls with SNI, certificates checked against the Mozilla roots of
//! `webpki-roots`, and ALPN offering only `http/1.1`.
//!
//! webpki-roots rather than the system store: it is what reqwest's
//! `rustls-tls` feature (tablekit's other transport) trusts, so both
//! transports accept the same certificates, and it needs no system files
//! (containers often ship without a CA bundle). The crypto provider is ring,
//! the one reqwest's rustls already builds.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};

/// A connection's bytes: plain or TLS.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Opens TLS sessions to one host.
#[derive(Clone)]
pub(crate) struct Tls {
    connector: TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

impl Tls {
    /// TLS to `host` (a DNS name or an IP address literal), trusting the
    /// webpki roots and, for tests, `extra_roots` (DER certificates).
    pub(crate) fn new(host: &str, extra_roots: &[Vec<u8>]) -> Result<Tls> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in extra_roots {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| Error::config(format!("a test root is not a certificate: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::config(format!("cannot set up TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|_| Error::config("the endpoint's host is not a valid TLS server name"))?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    /// The TLS handshake over `tcp`, with SNI for the host.
    pub(crate) async fn connect(&self, tcp: TcpStream) -> io::Result<Stream> {
        let tls = self.connector.connect(self.name.clone(), tcp).await?;
        Ok(Stream::Tls(Box::new(tls)))
    }
}
