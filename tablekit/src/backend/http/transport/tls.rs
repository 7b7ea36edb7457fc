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

/// A certificate authority to trust besides the webpki roots
/// ([`HttpOptions::root_certificates`](crate::options::HttpOptions::root_certificates)):
/// a company's TLS-inspecting proxy, a private endpoint's own CA, an emulator
/// run with a self-signed certificate (Azurite's `--cert`).
///
/// ```
/// use tablekit::options::HttpOptions;
/// use tablekit::transport::RootCertificate;
///
/// let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
/// let roots = RootCertificate::from_pem(pem)?;
/// assert_eq!(roots.len(), 1);
/// let mut http = HttpOptions::default();
/// http.root_certificates.extend(roots);
/// # Ok::<(), tablekit::Error>(())
/// ```
///
/// The certificate itself is checked when a client is built: one that is not
/// a certificate fails there with a configuration error.
#[derive(Clone, PartialEq, Eq)]
pub struct RootCertificate(Arc<[u8]>);

impl RootCertificate {
    /// A certificate in DER form (`openssl x509 -outform DER`).
    pub fn from_der(der: impl Into<Vec<u8>>) -> Self {
        RootCertificate(Arc::from(der.into()))
    }

    /// Every `-----BEGIN CERTIFICATE-----` block of a PEM text (a CA bundle
    /// holds several).
    ///
    /// # Errors
    ///
    /// A configuration error if the text holds no certificate block, a block
    /// is not closed, or its body is not base64.
    pub fn from_pem(pem: &str) -> Result<Vec<RootCertificate>> {
        use base64::Engine as _;
        const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
        const END: &str = "-----END CERTIFICATE-----";
        let mut out = Vec::new();
        let mut rest = pem;
        while let Some(start) = rest.find(BEGIN) {
            let body = &rest[start + BEGIN.len()..];
            let end = body
                .find(END)
                .ok_or_else(|| Error::config("a PEM certificate block is not closed"))?;
            let text: String = body[..end].split_whitespace().collect();
            let der = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| Error::config("a PEM certificate block is not base64"))?;
            out.push(RootCertificate::from_der(der));
            rest = &body[end + END.len()..];
        }
        if out.is_empty() {
            return Err(Error::config("the PEM text holds no certificate"));
        }
        Ok(out)
    }

    /// The DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for RootCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootCertificate({} bytes)", self.0.len())
    }
}

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
    /// webpki roots, the options' `roots` and, for tests, `extra_roots` (DER
    /// certificates).
    pub(crate) fn new(
        host: &str,
        roots_of_options: &[RootCertificate],
        extra_roots: &[Vec<u8>],
    ) -> Result<Tls> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in extra_roots {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| Error::config(format!("a test root is not a certificate: {e}")))?;
        }
        for root in roots_of_options {
            roots
                .add(rustls::pki_types::CertificateDer::from(root.der().to_vec()))
                .map_err(|e| {
                    Error::config(format!(
                        "a root certificate of the HTTP options is not usable: {e}"
                    ))
                })?;
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
