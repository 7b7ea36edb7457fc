"""The official Python Blob SDK (azure-storage-blob) against tablekit's server.

Run by tests/integration/serve_blob.rs with the server's connection string as
the only argument; every check asserts, and the last line says how many ran.
Small sizes keep it fast: 1 MiB blocks and ranges, so that uploads go in
blocks and downloads in ranges as they do for large blobs.
"""

import os
import sys

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobBlock, BlobServiceClient, ContentSettings

checks = 0


def check(condition, what):
    global checks
    if not condition:
        raise AssertionError(what)
    checks += 1


def fails(call, status, code):
    try:
        call()
    except HttpResponseError as e:
        check(e.status_code == status, f"status {e.status_code} != {status}")
        check(str(e.error_code) == code or getattr(e.error_code, "value", None) == code,
              f"code {e.error_code} != {code}")
        return
    raise AssertionError(f"expected {status} {code}")


MIB = 1024 * 1024
svc = BlobServiceClient.from_connection_string(
    sys.argv[1],
    max_single_put_size=MIB,
    max_block_size=MIB,
    max_single_get_size=MIB,
    max_chunk_get_size=MIB,
)

# Containers: create with metadata, conflict, properties, listing.
c = svc.get_container_client("sdk-blob")
c.create_container(metadata={"team": "hr"})
try:
    c.create_container()
    raise AssertionError("a second create succeeded")
except ResourceExistsError as e:
    check(str(getattr(e.error_code, "value", e.error_code)) == "ContainerAlreadyExists", e.error_code)
props = c.get_container_properties()
check(props.metadata == {"team": "hr"}, props.metadata)
check(props.lease.state == "available", props.lease.state)
listed = {x.name: x.metadata for x in svc.list_containers(include_metadata=True)}
check(listed.get("sdk-blob") == {"team": "hr"}, listed)

# A small blob: headers, metadata, MD5, ranges, conditions.
b = c.get_blob_client("dir/a.txt")
written = b.upload_blob(
    b"hello world",
    content_settings=ContentSettings(content_type="text/plain", cache_control="no-cache"),
    metadata={"k": "v"},
)
p = b.get_blob_properties()
check(p.etag == written["etag"], (p.etag, written["etag"]))
check(p.size == 11, p.size)
check(p.content_settings.content_type == "text/plain", p.content_settings.content_type)
check(p.content_settings.cache_control == "no-cache", p.content_settings.cache_control)
check(bytes(p.content_settings.content_md5).hex() == "5eb63bbbe01eeed093cb22bb8f5acdc3", "md5")
check(p.metadata == {"k": "v"}, p.metadata)
check(str(p.blob_type) in ("BlobType.BLOCKBLOB", "BlockBlob"), p.blob_type)
check(b.download_blob().readall() == b"hello world", "download")
check(b.download_blob(offset=6, length=5).readall() == b"world", "range")
check(b.download_blob(validate_content=True).readall() == b"hello world", "validated")
fails(lambda: b.download_blob(etag=p.etag, match_condition=MatchConditions.IfModified).readall(),
      304, "ConditionNotMet")
fails(lambda: b.upload_blob(b"x", overwrite=True, etag='"0x1"',
                            match_condition=MatchConditions.IfNotModified),
      412, "ConditionNotMet")
try:
    b.upload_blob(b"x", overwrite=False)
    raise AssertionError("overwrite=False replaced a blob")
except ResourceExistsError as e:
    check(str(getattr(e.error_code, "value", e.error_code)) == "BlobAlreadyExists", e.error_code)
b.set_blob_metadata({"x": "1"})
b.set_http_headers(ContentSettings(content_type="text/csv"))
p = b.get_blob_properties()
check(p.metadata == {"x": "1"} and p.content_settings.content_type == "text/csv", p)

# An empty blob reads back empty (the SDK's first ranged read is answered 416).
e = c.get_blob_client("empty")
e.upload_blob(b"")
check(e.download_blob().readall() == b"", "empty")

# Larger than a put: blocks with their MD5s, read back in ranges.
data = os.urandom(3 * MIB + 17)
big = c.get_blob_client("big.bin")
big.upload_blob(data, validate_content=True, max_concurrency=2)
check(big.download_blob(max_concurrency=2).readall() == data, "big")
check(big.download_blob(offset=1000, length=2 * MIB).readall() == data[1000:1000 + 2 * MIB],
      "big range")

# Blocks staged and committed by hand.
blocks = c.get_blob_client("blocks.bin")
ids = []
for i in range(3):
    bid = f"block-{i:04d}"
    blocks.stage_block(bid, bytes([i]) * 10)
    ids.append(BlobBlock(block_id=bid))
blocks.commit_block_list(list(reversed(ids)))
check(blocks.download_blob().readall() == b"\x02" * 10 + b"\x01" * 10 + b"\x00" * 10, "blocks")
fails(lambda: blocks.commit_block_list([BlobBlock(block_id="block-9999")]), 400, "InvalidBlockList")

# Listings, flat and by folder.
names = [x.name for x in c.list_blobs(include=["metadata"])]
check(names == ["big.bin", "blocks.bin", "dir/a.txt", "empty"], names)
walked = sorted(x.name for x in c.walk_blobs(delimiter="/"))
check(walked == ["big.bin", "blocks.bin", "dir/", "empty"], walked)

# Leases.
lease = b.acquire_lease(lease_duration=15)
fails(lambda: b.upload_blob(b"x", overwrite=True), 412, "LeaseIdMissing")
b.upload_blob(b"leased", overwrite=True, lease=lease)
lease.renew()
lease.release()
b.upload_blob(b"free", overwrite=True)
cl = c.acquire_lease(lease_duration=-1)
fails(lambda: c.delete_container(), 412, "LeaseIdMissing")
cl.release()

# A copy within the account.
copy = c.get_blob_client("copy.txt")
res = copy.start_copy_from_url(b.url)
check(res["copy_status"] == "success", res)
check(copy.download_blob().readall() == b"free", "copy")

# ACLs and the service's properties.
c.set_container_access_policy(signed_identifiers={})
acl = c.get_container_access_policy()
check(acl["signed_identifiers"] == [] and acl["public_access"] is None, acl)
sp = svc.get_service_properties()
check("cors" in sp, sp)

# Not found, and what the store does not do.
fails(lambda: c.get_blob_client("nope").get_blob_properties(), 404, "BlobNotFound")
check(not c.get_blob_client("nope").exists(), "exists")
fails(lambda: big.set_standard_blob_tier("Cool"), 501, "NotImplemented")

b.delete_blob()
check(not b.exists(), "deleted")
c.delete_container()
try:
    c.get_container_properties()
    raise AssertionError("a deleted container answered")
except ResourceNotFoundError:
    checks += 1
print(f"ok: {checks} checks")
