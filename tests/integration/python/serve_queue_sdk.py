"""The official Python queue SDK (azure-storage-queue) against `tablekit::server`.

Run by tests/integration/serve_queue.rs with the connection string of an
in-process server as its one argument. Every case is checked; the script
prints one line per case and exits non-zero if any failed.
"""

import datetime
import sys

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.queue import (
    AccessPolicy,
    CorsRule,
    QueueAnalyticsLogging,
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    RetentionPolicy,
    TextBase64DecodePolicy,
    TextBase64EncodePolicy,
    generate_queue_sas,
)

FAILED = []


def check(name, got, want):
    ok = got == want
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": got {got!r}, want {want!r}"))
    if not ok:
        FAILED.append(name)


def error_code(call):
    try:
        call()
    except HttpResponseError as e:
        return (e.status_code, e.error_code)
    return None


conn = sys.argv[1]
svc = QueueServiceClient.from_connection_string(conn)
q = svc.get_queue_client("pyjobs")

# Create, with metadata; the same again is answered 204 (which the SDK
# raises as "already exists"), other metadata 409.
q.create_queue(metadata={"owner": "ops"})
check(
    "create with the same metadata: 204",
    error_code(lambda: q.create_queue(metadata={"owner": "ops"})),
    (204, "QueueAlreadyExists"),
)
check(
    "create with other metadata: 409",
    error_code(lambda: q.create_queue(metadata={"owner": "dev"})),
    (409, "QueueAlreadyExists"),
)

text = "hello <b>&'\" Grüße 🦀"
sent = q.send_message(text, time_to_live=-1)
check("a never-expiring message's expiry is year 9999", sent.expires_on.year, 9999)
check("a sent message has a receipt", bool(sent.pop_receipt), True)
check("a sent message is visible at once", sent.next_visible_on, sent.inserted_on)
q.send_message("second", visibility_timeout=0, time_to_live=60)
q.send_message("hidden", visibility_timeout=3600)

peeked = q.peek_messages(max_messages=32)
check("peek: texts in order, hidden left out", [p.content for p in peeked], [text, "second"])
check("peek: no receipt", [p.pop_receipt for p in peeked], [None, None])
check("peek: dequeue counts", [p.dequeue_count for p in peeked], [0, 0])

received = list(q.receive_messages(messages_per_page=32, visibility_timeout=30))
check("receive: both visible ones", [m.content for m in received], [text, "second"])
check("receive: counted", [m.dequeue_count for m in received], [1, 1])
check("receive: none left visible", list(q.receive_messages()), [])

first = received[0]
updated = q.update_message(first, pop_receipt=first.pop_receipt, content="updated", visibility_timeout=0)
check("update: a new receipt", updated.pop_receipt != first.pop_receipt, True)
again = q.receive_message()
check("update: the new text", again.content, "updated")
check("update: counted again", again.dequeue_count, 2)
check(
    "update: the old receipt is stale",
    error_code(lambda: q.delete_message(first.id, first.pop_receipt)),
    (400, "PopReceiptMismatch"),
)
q.delete_message(again)
try:
    q.delete_message(again)
    check("a deleted message is gone", None, "MessageNotFound")
except ResourceNotFoundError as e:
    check("a deleted message is gone", e.error_code, "MessageNotFound")

props = q.get_queue_properties()
check("properties: metadata", props.metadata, {"owner": "ops"})
check("properties: count (held and hidden)", props.approximate_message_count, 2)
q.set_queue_metadata({"a": "1", "b": "2"})
check("metadata replaced", q.get_queue_properties().metadata, {"a": "1", "b": "2"})

start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
expiry = datetime.datetime(2099, 1, 1, tzinfo=datetime.timezone.utc)
q.set_queue_access_policy(
    {"readers": AccessPolicy(permission=QueueSasPermissions(read=True, process=True), start=start, expiry=expiry)}
)
acl = q.get_queue_access_policy()
check("acl: the policy", list(acl), ["readers"])
check("acl: its letters", acl["readers"].permission, "rp")

svc.get_queue_client("pyother").create_queue()
listed = list(svc.list_queues(name_starts_with="py", include_metadata=True, results_per_page=1))
check("list: by prefix across pages", [x.name for x in listed], ["pyjobs", "pyother"])
check("list: with metadata", listed[0].metadata, {"a": "1", "b": "2"})

svc.set_service_properties(
    cors=[CorsRule(["http://a.example"], ["GET"], max_age_in_seconds=60)],
    analytics_logging=QueueAnalyticsLogging(read=True, retention_policy=RetentionPolicy(enabled=True, days=3)),
)
sp = svc.get_service_properties()
check("service properties: logging", (sp["analytics_logging"].read, sp["analytics_logging"].retention_policy.days), (True, 3))
check("service properties: cors", [c.allowed_origins for c in sp["cors"]], ["http://a.example"])

b64 = QueueClient.from_connection_string(
    conn, "pyjobs", message_encode_policy=TextBase64EncodePolicy(), message_decode_policy=TextBase64DecodePolicy()
)
q.clear_messages()
b64.send_message("base64 ✓")
check("base64 messages round trip", b64.peek_messages()[0].content, "base64 ✓")

q.send_message("z" * 65536)
check("one byte over 64 KiB is refused", error_code(lambda: q.send_message("y" * 65537)), (413, "RequestBodyTooLarge"))
check(
    "visibility over 7 days is refused",
    error_code(lambda: q.send_message("x", visibility_timeout=604801)),
    (400, "OutOfRangeQueryParameterValue"),
)

# A SAS of the queue's stored policy: peek and receive with it.
account_key = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)["AccountKey"]
sas = generate_queue_sas(svc.account_name, "pyjobs", account_key, policy_id="readers")
by_sas = QueueClient.from_queue_url(q.url, credential=sas)
check("a policy SAS peeks", len(by_sas.peek_messages(max_messages=32)), 2)

q.clear_messages()
check("cleared", q.get_queue_properties().approximate_message_count, 0)
q.delete_queue()
try:
    q.get_queue_properties()
    check("a deleted queue is gone", None, "QueueNotFound")
except ResourceNotFoundError as e:
    check("a deleted queue is gone", e.error_code, "QueueNotFound")

print(f"{len(FAILED)} failed")
sys.exit(1 if FAILED else 0)
