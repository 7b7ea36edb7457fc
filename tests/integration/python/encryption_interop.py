"""Client-side encryption across SDKs: the legacy Python table library
(azure-cosmosdb-table 1.0.6, the .NET library's wire format) reads what
tablekit wrote, and writes what tablekit then reads.

Run by tests/integration/encryption_interop.rs with the path of a JSON file:

  {"table": ..., "aes": {"kid": ..., "key": base64}, "rsa": {"kid": ..., "pem": ...},
   "rust_wrote": [{"PartitionKey", "RowKey", "kid", "props": {...}}],
   "python_writes": [{"PartitionKey", "RowKey", "kid", "encrypt": [...], "props": {...}}]}

and TABLEKIT_TEST_CONNECTION_STRING naming the Azurite account. Exits non-zero
with a message on the first mismatch. The key-encryption-key objects follow the
library's documented interface (wrap_key, unwrap_key, get_key_wrap_algorithm,
get_kid), as its own tests implement them.
"""

import base64
import json
import os
import sys

from azure.common import AzureException
from azure.cosmosdb.table.models import EdmType, EntityProperty
from azure.cosmosdb.table.tableservice import TableService
from cryptography.hazmat.backends import default_backend
from cryptography.hazmat.primitives.asymmetric.padding import MGF1, OAEP
from cryptography.hazmat.primitives.hashes import SHA1
from cryptography.hazmat.primitives.keywrap import aes_key_unwrap, aes_key_wrap
from cryptography.hazmat.primitives.serialization import load_pem_private_key


class AesKeyWrapper:
    """A256KW: the AES key wrap of RFC 3394."""

    def __init__(self, kid, key):
        self.kid = kid
        self.key = key

    def wrap_key(self, key, algorithm="A256KW"):
        if algorithm != "A256KW":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return aes_key_wrap(self.key, key, default_backend())

    def unwrap_key(self, key, algorithm):
        if algorithm != "A256KW":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return aes_key_unwrap(self.key, key, default_backend())

    def get_key_wrap_algorithm(self):
        return "A256KW"

    def get_kid(self):
        return self.kid


class RsaKeyWrapper:
    """RSA-OAEP: OAEP with SHA-1 and MGF1(SHA-1), as Key Vault means it."""

    def __init__(self, kid, pem):
        self.kid = kid
        self.private_key = load_pem_private_key(pem.encode(), None, default_backend())
        self.public_key = self.private_key.public_key()

    def _padding(self):
        return OAEP(mgf=MGF1(algorithm=SHA1()), algorithm=SHA1(), label=None)

    def wrap_key(self, key, algorithm="RSA-OAEP"):
        if algorithm != "RSA-OAEP":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return self.public_key.encrypt(key, self._padding())

    def unwrap_key(self, key, algorithm):
        if algorithm != "RSA-OAEP":
            raise ValueError("unknown key wrap algorithm " + algorithm)
        return self.private_key.decrypt(key, self._padding())

    def get_key_wrap_algorithm(self):
        return "RSA-OAEP"

    def get_kid(self):
        return self.kid


def value(entity, name):
    """A property's value (the library wraps Int32 values in EntityProperty)."""
    v = entity.get(name)
    return v.value if isinstance(v, EntityProperty) else v


def fail(message):
    print("encryption_interop.py: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    conn = os.environ["TABLEKIT_TEST_CONNECTION_STRING"]
    aes = AesKeyWrapper(spec["aes"]["kid"], base64.b64decode(spec["aes"]["key"]))
    rsa = RsaKeyWrapper(spec["rsa"]["kid"], spec["rsa"]["pem"])
    keys = {aes.get_kid(): aes, rsa.get_kid(): rsa}
    table = spec["table"]

    # Reads: a key resolver by key id, and encryption required.
    reader = TableService(connection_string=conn)
    reader.key_resolver_function = lambda kid: keys.get(kid)
    reader.require_encryption = True
    for want in spec["rust_wrote"]:
        got = reader.get_entity(table, want["PartitionKey"], want["RowKey"])
        for name, want_value in want["props"].items():
            if value(got, name) != want_value:
                fail("%s/%s: %s is %r, not %r" % (want["PartitionKey"], want["RowKey"], name, value(got, name), want_value))
        for reserved in ("_ClientEncryptionMetadata1", "_ClientEncryptionMetadata2"):
            if reserved in got:
                fail("the library left %s in the decrypted entity" % reserved)
    # One key, no resolver: the library checks the key id itself.
    for kek in (aes, rsa):
        single = TableService(connection_string=conn)
        single.key_encryption_key = kek
        for want in spec["rust_wrote"]:
            if want["kid"] != kek.get_kid():
                continue
            got = single.get_entity(table, want["PartitionKey"], want["RowKey"])
            for name, want_value in want["props"].items():
                if value(got, name) != want_value:
                    fail("with key_encryption_key %s: %s is %r" % (kek.get_kid(), name, value(got, name)))
    # A query: every entity tablekit wrote decrypts in one page.
    read = {(e["PartitionKey"], e["RowKey"]) for e in reader.query_entities(table)}
    for want in spec["rust_wrote"]:
        if (want["PartitionKey"], want["RowKey"]) not in read:
            fail("the query did not return %s/%s" % (want["PartitionKey"], want["RowKey"]))
    # The wrong key is refused, not turned into garbage.
    wrong = TableService(connection_string=conn)
    wrong.key_resolver_function = lambda kid: None
    try:
        want = spec["rust_wrote"][0]
        wrong.get_entity(table, want["PartitionKey"], want["RowKey"])
        fail("an entity read without its key did not fail")
    except AzureException:
        pass

    # Writes: an encryption resolver picks the properties, per key.
    for item in spec["python_writes"]:
        writer = TableService(connection_string=conn)
        writer.key_encryption_key = keys[item["kid"]]
        encrypted = set(item["encrypt"])
        writer.encryption_resolver_function = lambda pk, rk, name, encrypted=encrypted: name in encrypted
        entity = dict(item["props"])
        # Python writes an int as Edm.Int64; tablekit's Age is an Int32.
        entity["Age"] = EntityProperty(EdmType.INT32, entity["Age"])
        entity["PartitionKey"] = item["PartitionKey"]
        entity["RowKey"] = item["RowKey"]
        writer.insert_or_replace_entity(table, entity)
    print("encryption_interop.py: read %d entities of tablekit, wrote %d" % (len(spec["rust_wrote"]), len(spec["python_writes"])))


if __name__ == "__main__":
    main()
