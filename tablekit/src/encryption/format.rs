//! The wire format of the .NET storage library's and the legacy Python table
//! library's (`azure-cosmosdb-table` 1.0.6, `_encryption.py`) client-side
//! encryption of table entities, protocol `1.0`:
//!
//! - a random 32-byte content key (CEK) and a random 16-byte IV per entity;
//! - each encrypted property: its UTF-8 text, PKCS#7-padded, AES-256-CBC
//!   under the CEK with the IV `SHA-256(entity IV ‖ RowKey ‖ PartitionKey ‖
//!   name)[..16]`, stored as `Edm.Binary`;
//! - `_ClientEncryptionMetadata2`: the JSON list of the encrypted
//!   properties' names, encrypted the same way (its own name as the name);
//! - `_ClientEncryptionMetadata1`: a JSON string with the CEK wrapped by
//!   the key-encryption key, the key's id and algorithm, the entity IV and
//!   the agent (`AES_CBC_256`, protocol `1.0`).
//!
//! Entities of the Java library's first protocol (PartitionKey before
//! RowKey in the IV, a `[a, b]` list) are read too.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::keys::{key_error, random, KeyEncryptionKey};
use crate::edm::EdmValue;
use crate::entity::DynamicEntity;
use crate::error::{Error, Result};

/// The JSON string of the wrapped key and IV.
pub(crate) const METADATA1: &str = "_ClientEncryptionMetadata1";
/// The encrypted list of encrypted properties.
pub(crate) const METADATA2: &str = "_ClientEncryptionMetadata2";

const PROTOCOL: &str = "1.0";
const ALGORITHM: &str = "AES_CBC_256";

type Aes256CbcEnc = cbc::Encryptor<aes::Aes256>;
type Aes256CbcDec = cbc::Decryptor<aes::Aes256>;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// `_ClientEncryptionMetadata1`, field for field (the order is the one the
/// libraries write; Java's reader needs it).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct EncryptionData {
    #[serde(rename = "WrappedContentKey")]
    pub(crate) wrapped_content_key: WrappedContentKey,
    #[serde(rename = "EncryptionAgent")]
    pub(crate) encryption_agent: EncryptionAgent,
    #[serde(rename = "ContentEncryptionIV")]
    pub(crate) content_encryption_iv: String,
    #[serde(
        rename = "KeyWrappingMetadata",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) key_wrapping_metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WrappedContentKey {
    #[serde(rename = "KeyId")]
    pub(crate) key_id: String,
    #[serde(rename = "EncryptedKey")]
    pub(crate) encrypted_key: String,
    #[serde(rename = "Algorithm")]
    pub(crate) algorithm: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct EncryptionAgent {
    #[serde(rename = "Protocol")]
    pub(crate) protocol: String,
    #[serde(rename = "EncryptionAlgorithm")]
    pub(crate) encryption_algorithm: String,
}

impl EncryptionData {
    /// The metadata of `entity`, parsed; `None` when it has neither
    /// reserved property (an entity written without encryption).
    pub(crate) fn of(entity: &DynamicEntity) -> Result<Option<(EncryptionData, Vec<u8>)>> {
        let m1 = entity.properties.get(METADATA1);
        let m2 = entity.properties.get(METADATA2);
        let (m1, m2) = match (m1, m2) {
            (None, None) => return Ok(None),
            (Some(EdmValue::String(m1)), Some(EdmValue::Binary(m2))) => (m1, m2.clone()),
            // The Python library writes Metadata2 as Edm.Binary; without
            // type annotations it arrives as base64 text.
            (Some(EdmValue::String(m1)), Some(EdmValue::String(m2))) => (
                m1,
                b64()
                    .decode(m2)
                    .map_err(|_| damaged(entity, "Metadata2 is not base64"))?,
            ),
            _ => return Err(damaged(
                entity,
                "it has one of the two metadata properties without the other, or of another type",
            )),
        };
        let data: EncryptionData = serde_json::from_str(m1)
            .map_err(|e| damaged(entity, &format!("Metadata1 is not the expected JSON ({e})")))?;
        if data.encryption_agent.protocol != PROTOCOL {
            return Err(damaged(
                entity,
                &format!(
                    "protocol {:?} (tablekit reads {PROTOCOL:?})",
                    data.encryption_agent.protocol
                ),
            ));
        }
        if data.encryption_agent.encryption_algorithm != ALGORITHM {
            return Err(damaged(
                entity,
                &format!(
                    "algorithm {:?} (tablekit reads {ALGORITHM:?})",
                    data.encryption_agent.encryption_algorithm
                ),
            ));
        }
        Ok(Some((data, m2)))
    }

    /// The entity IV.
    pub(crate) fn iv(&self, entity: &DynamicEntity) -> Result<[u8; 16]> {
        b64()
            .decode(&self.content_encryption_iv)
            .ok()
            .and_then(|v| <[u8; 16]>::try_from(v).ok())
            .ok_or_else(|| damaged(entity, "ContentEncryptionIV is not 16 bytes of base64"))
    }

    /// The wrapped content key.
    pub(crate) fn wrapped_key(&self, entity: &DynamicEntity) -> Result<Vec<u8>> {
        b64()
            .decode(&self.wrapped_content_key.encrypted_key)
            .map_err(|_| damaged(entity, "EncryptedKey is not base64"))
    }

    /// Whether the Java library's first protocol wrote it: no
    /// KeyWrappingMetadata, or a Java EncryptionLibrary.
    pub(crate) fn is_java_v1(&self) -> bool {
        match &self.key_wrapping_metadata {
            None => true,
            Some(m) => m
                .get("EncryptionLibrary")
                .and_then(|v| v.as_str())
                .is_some_and(|l| l.contains("Java")),
        }
    }
}

fn damaged(entity: &DynamicEntity, why: &str) -> Error {
    Error::decode(format!(
        "entity {}/{}: its client-side encryption metadata cannot be read: {why}",
        entity.partition_key, entity.row_key
    ))
}

/// The IV of one property.
fn property_iv(entity_iv: &[u8; 16], pk: &str, rk: &str, name: &str, java_v1: bool) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(entity_iv);
    if java_v1 {
        h.update(pk.as_bytes());
        h.update(rk.as_bytes());
    } else {
        h.update(rk.as_bytes());
        h.update(pk.as_bytes());
    }
    h.update(name.as_bytes());
    let digest = h.finalize();
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&digest[..16]);
    iv
}

fn cbc_encrypt(cek: &[u8; 32], iv: &[u8; 16], plain: &[u8]) -> Vec<u8> {
    use aes::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
    Aes256CbcEnc::new(cek.into(), iv.into()).encrypt_padded_vec_mut::<Pkcs7>(plain)
}

fn cbc_decrypt(cek: &[u8; 32], iv: &[u8; 16], cipher: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
    Aes256CbcDec::new(cek.into(), iv.into())
        .decrypt_padded_vec_mut::<Pkcs7>(cipher)
        .ok()
        .map(Zeroizing::new)
}

/// What tablekit writes as `KeyWrappingMetadata.EncryptionLibrary`.
fn library() -> String {
    format!("Rust tablekit {}", env!("CARGO_PKG_VERSION"))
}

/// Encrypts the properties of `entity` that `encrypt` names (each must be a
/// string) under a fresh content key wrapped by `kek`, and adds the two
/// metadata properties, as the Python library's `_encrypt_entity` does
/// (metadata even when no property is encrypted). The IV and key are
/// random; `fixed` gives them instead (for tests against known vectors).
pub(crate) async fn encrypt_entity(
    entity: &mut DynamicEntity,
    encrypt: &(dyn Fn(&str) -> bool + Sync),
    kek: &dyn KeyEncryptionKey,
    fixed: Option<(&[u8; 32], &[u8; 16])>,
) -> Result<()> {
    for reserved in [METADATA1, METADATA2] {
        if entity.properties.get(reserved).is_some() {
            return Err(key_error(format!(
                "entity {}/{} already has the reserved property {reserved}",
                entity.partition_key, entity.row_key
            )));
        }
    }
    let mut cek = Zeroizing::new([0u8; 32]);
    let mut iv = [0u8; 16];
    match fixed {
        Some((k, i)) => {
            cek.copy_from_slice(k);
            iv = *i;
        }
        None => {
            random(&mut cek[..])?;
            random(&mut iv)?;
        }
    }
    let (pk, rk) = (entity.partition_key.clone(), entity.row_key.clone());
    let names: Vec<String> = entity
        .properties
        .iter()
        .filter(|(name, _)| encrypt(name))
        .map(|(name, _)| name.to_owned())
        .collect();
    for name in &names {
        let Some(EdmValue::String(plain)) = entity.properties.get(name) else {
            return Err(key_error(format!(
                "property {name} of {pk}/{rk} is not a string: the format encrypts strings only"
            )));
        };
        let cipher = cbc_encrypt(
            &cek,
            &property_iv(&iv, &pk, &rk, name, false),
            plain.as_bytes(),
        );
        entity
            .properties
            .insert(name.as_str(), EdmValue::Binary(cipher));
    }
    let list = serde_json::to_string(&names).map_err(|e| Error::decode(e.to_string()))?;
    // The Python library's `json.dumps` separates items with ", ".
    let list = list.replace("\",\"", "\", \"");
    let m2 = cbc_encrypt(
        &cek,
        &property_iv(&iv, &pk, &rk, METADATA2, false),
        list.as_bytes(),
    );
    let wrapped = kek.wrap_key(&cek[..]).await?;
    let mut km = serde_json::Map::new();
    km.insert("EncryptionLibrary".into(), library().into());
    let data = EncryptionData {
        wrapped_content_key: WrappedContentKey {
            key_id: kek.key_id().to_owned(),
            encrypted_key: b64().encode(wrapped),
            algorithm: kek.algorithm().to_owned(),
        },
        encryption_agent: EncryptionAgent {
            protocol: PROTOCOL.into(),
            encryption_algorithm: ALGORITHM.into(),
        },
        content_encryption_iv: b64().encode(iv),
        key_wrapping_metadata: Some(km),
    };
    let m1 = serde_json::to_string(&data).map_err(|e| Error::decode(e.to_string()))?;
    entity.properties.insert(METADATA2, EdmValue::Binary(m2));
    entity.properties.insert(METADATA1, EdmValue::String(m1));
    Ok(())
}

/// Unwraps the content key of `data` with `kek`: the key id must match.
pub(crate) async fn unwrap_cek(
    entity: &DynamicEntity,
    data: &EncryptionData,
    kek: &dyn KeyEncryptionKey,
) -> Result<Zeroizing<[u8; 32]>> {
    if kek.key_id() != data.wrapped_content_key.key_id {
        return Err(key_error(format!(
            "entity {}/{} was encrypted under the key {:?}, and the key given is {:?}: add a key resolver that knows it",
            entity.partition_key,
            entity.row_key,
            data.wrapped_content_key.key_id,
            kek.key_id()
        )));
    }
    let wrapped = data.wrapped_key(entity)?;
    let cek = kek
        .unwrap_key(&wrapped, &data.wrapped_content_key.algorithm)
        .await?;
    let mut out = Zeroizing::new([0u8; 32]);
    if cek.len() != 32 {
        return Err(damaged(entity, "the unwrapped content key is not 32 bytes"));
    }
    out.copy_from_slice(&cek);
    Ok(out)
}

/// Decrypts the properties the (decrypted) list names, in place, and
/// removes the two metadata properties. A listed property the entity lacks
/// (not selected) is skipped.
pub(crate) fn decrypt_entity(
    entity: &mut DynamicEntity,
    data: &EncryptionData,
    metadata2: &[u8],
    cek: &[u8; 32],
) -> Result<()> {
    let iv = data.iv(entity)?;
    let java = data.is_java_v1();
    let (pk, rk) = (entity.partition_key.clone(), entity.row_key.clone());
    let failed = |what: &str| {
        Error::decode(format!(
            "entity {pk}/{rk}: {what} does not decrypt with its content key (damaged, or written with another key under the same id)"
        ))
    };
    let list = cbc_decrypt(cek, &property_iv(&iv, &pk, &rk, METADATA2, java), metadata2)
        .ok_or_else(|| failed("the list of encrypted properties"))?;
    let list =
        std::str::from_utf8(&list).map_err(|_| failed("the list of encrypted properties"))?;
    let names: Vec<String> = if java {
        let inner = list
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .unwrap_or(list);
        inner
            .split(", ")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    } else {
        serde_json::from_str(list).map_err(|_| failed("the list of encrypted properties"))?
    };
    for name in &names {
        let cipher = match entity.properties.get(name) {
            None => continue,
            Some(EdmValue::Binary(c)) => c,
            Some(_) => {
                return Err(Error::decode_property(
                    name,
                    format!("entity {pk}/{rk} lists it as encrypted, but it is not Edm.Binary"),
                ))
            }
        };
        let plain = cbc_decrypt(cek, &property_iv(&iv, &pk, &rk, name, java), cipher)
            .ok_or_else(|| failed(&format!("property {name}")))?;
        let text =
            String::from_utf8(plain.to_vec()).map_err(|_| failed(&format!("property {name}")))?;
        entity
            .properties
            .insert(name.as_str(), EdmValue::String(text));
    }
    entity.properties.remove(METADATA1);
    entity.properties.remove(METADATA2);
    Ok(())
}

/// Rewraps the content key of `m1` (the metadata JSON) from `old` to `new`,
/// keeping everything else.
pub(crate) async fn rewrap(
    entity: &DynamicEntity,
    mut data: EncryptionData,
    old: &dyn KeyEncryptionKey,
    new: &dyn KeyEncryptionKey,
) -> Result<String> {
    let cek = unwrap_cek(entity, &data, old).await?;
    let wrapped = new.wrap_key(&cek[..]).await?;
    data.wrapped_content_key = WrappedContentKey {
        key_id: new.key_id().to_owned(),
        encrypted_key: b64().encode(wrapped),
        algorithm: new.algorithm().to_owned(),
    };
    serde_json::to_string(&data).map_err(|e| Error::decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::AesKeyWrap;

    /// Made by the Python library itself (azure-cosmosdb-table 1.0.6,
    /// `_encrypt_entity` with `os.urandom` giving 0x11 × 32 for the content
    /// key and 0x22 × 16 for the IV, an A256KW key of the bytes 0 to 31 with
    /// the id `local:vector`, and an encryption resolver picking Ssn and Note).
    const PY_SSN: &str = "ZEqqBezMFdcwlldALCk7TQ==";
    const PY_NOTE: &str = "rwz4eUfHIzpG++L7tDl7gA==";
    const PY_METADATA2: &str = "5iB/ihKKfe/UFW0ZdvotSw==";
    const PY_METADATA1: &str = r#"{"WrappedContentKey": {"KeyId": "local:vector", "EncryptedKey": "gBtSHZV+WjYCvRijsRUSzJ+wgi3Q00lpEj2osdq36AcqW+Vuybf0yQ==", "Algorithm": "A256KW"}, "EncryptionAgent": {"Protocol": "1.0", "EncryptionAlgorithm": "AES_CBC_256"}, "ContentEncryptionIV": "IiIiIiIiIiIiIiIiIiIiIg==", "KeyWrappingMetadata": {"EncryptionLibrary": "Python 1.4.2"}}"#;

    fn vector_key() -> AesKeyWrap {
        AesKeyWrap::new("local:vector", std::array::from_fn(|i| i as u8))
    }

    fn plain() -> DynamicEntity {
        DynamicEntity::new("Sales", "empid_000223")
            .with("Name", "Jones")
            .with("Ssn", "123-45-6789")
            .with("Note", "Grüße 🦀")
    }

    fn bin(b: &str) -> EdmValue {
        EdmValue::Binary(b64().decode(b).unwrap())
    }

    #[tokio::test]
    async fn encrypts_byte_for_byte_as_the_python_library() {
        let mut e = plain();
        let choose = |n: &str| n == "Ssn" || n == "Note";
        let fixed = ([0x11u8; 32], [0x22u8; 16]);
        encrypt_entity(&mut e, &choose, &vector_key(), Some((&fixed.0, &fixed.1)))
            .await
            .unwrap();
        assert_eq!(e.get("Ssn"), Some(&bin(PY_SSN)));
        assert_eq!(e.get("Note"), Some(&bin(PY_NOTE)));
        assert_eq!(e.get(METADATA2), Some(&bin(PY_METADATA2)));
        assert_eq!(e.get("Name"), Some(&EdmValue::String("Jones".into())));
        let Some(EdmValue::String(m1)) = e.get(METADATA1) else {
            panic!()
        };
        let ours: serde_json::Value = serde_json::from_str(m1).unwrap();
        let theirs: serde_json::Value = serde_json::from_str(PY_METADATA1).unwrap();
        assert_eq!(ours["WrappedContentKey"], theirs["WrappedContentKey"]);
        assert_eq!(ours["EncryptionAgent"], theirs["EncryptionAgent"]);
        assert_eq!(ours["ContentEncryptionIV"], theirs["ContentEncryptionIV"]);
        // The field order of the libraries (Java's reader needs it).
        assert!(
            m1.starts_with(r#"{"WrappedContentKey":{"KeyId":"local:vector","EncryptedKey":"#),
            "{m1}"
        );
    }

    #[tokio::test]
    async fn decrypts_what_the_python_library_wrote() {
        let mut e = plain()
            .with("Ssn", bin(PY_SSN))
            .with("Note", bin(PY_NOTE))
            .with(METADATA2, bin(PY_METADATA2))
            .with(METADATA1, PY_METADATA1);
        let (data, m2) = EncryptionData::of(&e).unwrap().unwrap();
        assert!(!data.is_java_v1());
        let cek = unwrap_cek(&e, &data, &vector_key()).await.unwrap();
        assert_eq!(*cek, [0x11; 32]);
        decrypt_entity(&mut e, &data, &m2, &cek).unwrap();
        assert_eq!(e, plain());
        // One flipped bit of a property: an error, never garbage.
        let mut bad = plain()
            .with("Ssn", {
                let mut b = b64().decode(PY_SSN).unwrap();
                b[15] ^= 1;
                EdmValue::Binary(b)
            })
            .with("Note", bin(PY_NOTE))
            .with(METADATA2, bin(PY_METADATA2))
            .with(METADATA1, PY_METADATA1);
        let err = decrypt_entity(&mut bad, &data, &m2, &cek).unwrap_err();
        assert!(
            err.to_string().contains("property Ssn does not decrypt"),
            "{err}"
        );
        // Metadata1 alone is damaged metadata.
        let half = plain().with(METADATA1, PY_METADATA1);
        assert!(EncryptionData::of(&half).is_err());
        assert!(EncryptionData::of(&plain()).unwrap().is_none());
    }

    #[test]
    fn property_iv_follows_the_python_library() {
        // _generate_property_iv(b"\x01"*16, "pk", "rk", "Name", False):
        // sha256(iv + ("rk" + "pk" + "Name").encode())[:16]
        let iv = property_iv(&[1u8; 16], "pk", "rk", "Name", false);
        let mut h = Sha256::new();
        h.update([1u8; 16]);
        h.update(b"rkpkName");
        assert_eq!(iv[..], h.finalize()[..16]);
        let java = property_iv(&[1u8; 16], "pk", "rk", "Name", true);
        let mut h = Sha256::new();
        h.update([1u8; 16]);
        h.update(b"pkrkName");
        assert_eq!(java[..], h.finalize()[..16]);
    }
}
