//! Key-encryption keys: the trait, its two local implementations (AES key
//! wrap, RSA-OAEP) and the resolver of keys by key id that reads use.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use zeroize::Zeroizing;

use crate::error::{Error, Result, ValidationError};

/// A key-encryption key (KEK): wraps the content key of each encrypted
/// entity, and unwraps it to read the entity. Its [`key_id`](Self::key_id)
/// and [`algorithm`](Self::algorithm) are stored beside the wrapped key
/// (`_ClientEncryptionMetadata1`), so a reader finds the key again through a
/// [`KeyResolver`].
///
/// Local keys: [`AesKeyWrap`] (`A256KW`, preferred) and [`RsaOaepKey`]
/// (`RSA-OAEP`). A key held by a key vault implements this trait with the
/// vault's wrap and unwrap calls (hence `async`).
#[async_trait::async_trait]
pub trait KeyEncryptionKey: Send + Sync {
    /// The key's id, as stored on the wire (`KeyId`); for a key vault, the key's URL.
    fn key_id(&self) -> &str;

    /// The name of the wrapping algorithm, as stored on the wire
    /// (`Algorithm`): `A256KW`, `RSA-OAEP`, ...
    fn algorithm(&self) -> &str;

    /// Wraps a 32-byte content key.
    async fn wrap_key(&self, content_key: &[u8]) -> Result<Vec<u8>>;

    /// Unwraps a content key wrapped with `algorithm` (the name stored with it).
    async fn unwrap_key(&self, wrapped: &[u8], algorithm: &str) -> Result<Zeroizing<Vec<u8>>>;
}

/// Finds the key-encryption key of a key id, for reads: the key an entity
/// names may be an older one (see [`EncryptedTable::rotate_keys`](super::EncryptedTable::rotate_keys)).
/// [`KeyRing`] is the map of local keys; a closure
/// `Fn(&str) -> Option<Arc<dyn KeyEncryptionKey>>` is one too.
#[async_trait::async_trait]
pub trait KeyResolver: Send + Sync {
    /// The key of `key_id`, or `None` when there is none (the read then fails
    /// with an error naming the key id).
    async fn resolve(&self, key_id: &str) -> Result<Option<Arc<dyn KeyEncryptionKey>>>;
}

#[async_trait::async_trait]
impl<F> KeyResolver for F
where
    F: Fn(&str) -> Option<Arc<dyn KeyEncryptionKey>> + Send + Sync,
{
    async fn resolve(&self, key_id: &str) -> Result<Option<Arc<dyn KeyEncryptionKey>>> {
        Ok(self(key_id))
    }
}

/// Local key-encryption keys by key id: a [`KeyResolver`].
#[derive(Clone, Default)]
pub struct KeyRing {
    keys: HashMap<String, Arc<dyn KeyEncryptionKey>>,
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        KeyRing::default()
    }

    /// Adds a key under its own key id; returns the ring for chaining.
    pub fn with(mut self, key: impl KeyEncryptionKey + 'static) -> Self {
        self.insert(Arc::new(key));
        self
    }

    /// Adds a shared key under its own key id (replacing one of the same id).
    pub fn insert(&mut self, key: Arc<dyn KeyEncryptionKey>) {
        self.keys.insert(key.key_id().to_owned(), key);
    }

    /// The key ids in the ring, sorted.
    pub fn key_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.keys.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }
}

/// The key ids only: key material is never shown.
impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("key_ids", &self.key_ids())
            .finish()
    }
}

#[async_trait::async_trait]
impl KeyResolver for KeyRing {
    async fn resolve(&self, key_id: &str) -> Result<Option<Arc<dyn KeyEncryptionKey>>> {
        Ok(self.keys.get(key_id).cloned())
    }
}

/// Fills `out` from the system's generator.
pub(super) fn random(out: &mut [u8]) -> Result<()> {
    use rand_core::RngCore;
    rand_core::OsRng
        .try_fill_bytes(out)
        .map_err(|e| key_error(format!("the system's random generator failed: {e}")))
}

pub(super) fn key_error(reason: String) -> Error {
    Error::invalid(ValidationError::Encryption { reason })
}

fn wrong_algorithm(key_id: &str, expected: &str, stored: &str) -> Error {
    key_error(format!(
        "the content key was wrapped with {stored:?}, but the key {key_id:?} unwraps {expected:?}"
    ))
}

/// A local AES-256 key that wraps content keys with the AES key wrap of
/// RFC 3394 (`A256KW` on the wire), through RustCrypto's `aes-kw`.
///
/// The 32 key bytes are a secret: they are wiped when the key is dropped,
/// and neither `Debug` nor any error shows them.
pub struct AesKeyWrap {
    key_id: String,
    key: Zeroizing<[u8; 32]>,
}

impl AesKeyWrap {
    /// The algorithm's name on the wire.
    pub const ALGORITHM: &'static str = "A256KW";

    /// A key with this id and these 32 bytes.
    pub fn new(key_id: impl Into<String>, key: [u8; 32]) -> Self {
        AesKeyWrap {
            key_id: key_id.into(),
            key: Zeroizing::new(key),
        }
    }

    /// A key with this id and 32 bytes given as a slice; fails (without
    /// showing them) for any other length.
    pub fn from_slice(key_id: impl Into<String>, key: &[u8]) -> Result<Self> {
        let key: [u8; 32] = key.try_into().map_err(|_| {
            key_error(format!(
                "an A256KW key has 32 bytes, not {} (the bytes are not shown)",
                key.len()
            ))
        })?;
        Ok(AesKeyWrap::new(key_id, key))
    }

    /// A new key of 32 random bytes from the system's generator.
    pub fn generate(key_id: impl Into<String>) -> Result<Self> {
        let mut key = Zeroizing::new([0u8; 32]);
        random(&mut key[..])?;
        Ok(AesKeyWrap {
            key_id: key_id.into(),
            key,
        })
    }

    fn kek(&self) -> aes_kw::KekAes256 {
        aes_kw::KekAes256::from(*self.key)
    }
}

/// The key id only.
impl fmt::Debug for AesKeyWrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AesKeyWrap")
            .field("key_id", &self.key_id)
            .field("key", &"<redacted>")
            .finish()
    }
}

#[async_trait::async_trait]
impl KeyEncryptionKey for AesKeyWrap {
    fn key_id(&self) -> &str {
        &self.key_id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    async fn wrap_key(&self, content_key: &[u8]) -> Result<Vec<u8>> {
        self.kek().wrap_vec(content_key).map_err(|_| {
            key_error(format!(
                "the key {:?} could not wrap the content key",
                self.key_id
            ))
        })
    }

    async fn unwrap_key(&self, wrapped: &[u8], algorithm: &str) -> Result<Zeroizing<Vec<u8>>> {
        if algorithm != Self::ALGORITHM {
            return Err(wrong_algorithm(&self.key_id, Self::ALGORITHM, algorithm));
        }
        self.kek().unwrap_vec(wrapped).map(Zeroizing::new).map_err(|_| {
            key_error(format!(
                "the key {:?} could not unwrap the content key (another key of the same id, or damaged metadata)",
                self.key_id
            ))
        })
    }
}

/// A local RSA key that wraps content keys with RSA-OAEP (SHA-1 and MGF1
/// with SHA-1: `RSA-OAEP` on the wire, as the .NET and Python libraries and
/// Azure Key Vault mean it), through RustCrypto's `rsa`.
///
/// With only the public key it wraps (writes) but cannot unwrap (read).
///
/// # Security: prefer [`AesKeyWrap`] or a key vault
///
/// The `rsa` crate's private-key operation is subject to the Marvin attack
/// (RUSTSEC-2023-0071: a timing side channel; no fixed release of the
/// crate exists). Unwrapping here is blinded, but an attacker who can time
/// many unwraps (a service that unwraps keys it is sent, and answers) may
/// learn enough to decrypt. Use a local RSA key only where no one can time
/// its unwraps: reading your own tables from your own machines. Otherwise
/// prefer `A256KW`, or an RSA key held by a key vault (whose unwrap runs in
/// the vault).
pub struct RsaOaepKey {
    key_id: String,
    public: rsa::RsaPublicKey,
    private: Option<rsa::RsaPrivateKey>,
}

impl RsaOaepKey {
    /// The algorithm's name on the wire.
    pub const ALGORITHM: &'static str = "RSA-OAEP";

    /// A key that wraps and unwraps, from a private key.
    pub fn new(key_id: impl Into<String>, private: rsa::RsaPrivateKey) -> Self {
        RsaOaepKey {
            key_id: key_id.into(),
            public: private.to_public_key(),
            private: Some(private),
        }
    }

    /// A key that only wraps (writes), from a public key.
    pub fn public_only(key_id: impl Into<String>, public: rsa::RsaPublicKey) -> Self {
        RsaOaepKey {
            key_id: key_id.into(),
            public,
            private: None,
        }
    }

    /// A key from a private key in PEM (PKCS#8, `BEGIN PRIVATE KEY`, or
    /// PKCS#1, `BEGIN RSA PRIVATE KEY`). The error does not show the text.
    pub fn from_pem(key_id: impl Into<String>, pem: &str) -> Result<Self> {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        use rsa::pkcs8::DecodePrivateKey;
        let private = rsa::RsaPrivateKey::from_pkcs8_pem(pem)
            .or_else(|_| rsa::RsaPrivateKey::from_pkcs1_pem(pem))
            .map_err(|_| {
                key_error(
                    "the RSA private key is not PEM of PKCS#8 or PKCS#1 (its text is not shown)"
                        .into(),
                )
            })?;
        Ok(RsaOaepKey::new(key_id, private))
    }

    /// A new private key of `bits` bits (2048 or more) from the system's generator.
    pub fn generate(key_id: impl Into<String>, bits: usize) -> Result<Self> {
        if bits < 2048 {
            return Err(key_error(format!(
                "an RSA key has at least 2048 bits, not {bits}"
            )));
        }
        let private = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, bits)
            .map_err(|e| key_error(format!("could not generate an RSA key: {e}")))?;
        Ok(RsaOaepKey::new(key_id, private))
    }

    /// The public key (not a secret): for [`public_only`](Self::public_only) writers.
    pub fn public_key(&self) -> &rsa::RsaPublicKey {
        &self.public
    }

    /// The private key in PEM (PKCS#8), to keep or to hand to another
    /// reader; wiped on drop. `None` for a public-only key.
    pub fn private_key_pem(&self) -> Option<Zeroizing<String>> {
        use rsa::pkcs8::EncodePrivateKey;
        let pem = self
            .private
            .as_ref()?
            .to_pkcs8_pem(rsa::pkcs8::LineEnding::LF)
            .ok()?;
        Some(Zeroizing::new(pem.as_str().to_owned()))
    }
}

/// The key id and the modulus size only.
impl fmt::Debug for RsaOaepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use rsa::traits::PublicKeyParts;
        f.debug_struct("RsaOaepKey")
            .field("key_id", &self.key_id)
            .field("bits", &(self.public.size() * 8))
            .field("private", &self.private.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[async_trait::async_trait]
impl KeyEncryptionKey for RsaOaepKey {
    fn key_id(&self) -> &str {
        &self.key_id
    }

    fn algorithm(&self) -> &str {
        Self::ALGORITHM
    }

    async fn wrap_key(&self, content_key: &[u8]) -> Result<Vec<u8>> {
        self.public
            .encrypt(
                &mut rand_core::OsRng,
                rsa::Oaep::new::<sha1::Sha1>(),
                content_key,
            )
            .map_err(|_| {
                key_error(format!(
                    "the key {:?} could not wrap the content key",
                    self.key_id
                ))
            })
    }

    async fn unwrap_key(&self, wrapped: &[u8], algorithm: &str) -> Result<Zeroizing<Vec<u8>>> {
        if algorithm != Self::ALGORITHM {
            return Err(wrong_algorithm(&self.key_id, Self::ALGORITHM, algorithm));
        }
        let Some(private) = &self.private else {
            return Err(key_error(format!(
                "the key {:?} has no private key: it wraps, but cannot unwrap",
                self.key_id
            )));
        };
        private
            .decrypt_blinded(
                &mut rand_core::OsRng,
                rsa::Oaep::new::<sha1::Sha1>(),
                wrapped,
            )
            .map(Zeroizing::new)
            .map_err(|_| {
                key_error(format!(
                    "the key {:?} could not unwrap the content key (another key of the same id, or damaged metadata)",
                    self.key_id
                ))
            })
    }
}
