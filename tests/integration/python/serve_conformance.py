"""The official Python SDKs against a storage emulator: `tablekit-cli serve`
(tests/integration/serve_python.rs runs this against an in-process server)
or Azurite.

    python serve_conformance.py <connection string> [case ...]
    python serve_conformance.py --list

Runs the named cases (all of them without names), each checking what the
SDK got back with asserts, and prints `ok <case>` or `FAIL <case>: why` for
each, then a closing count line; the exit code is 1 if any
case failed. Every case makes names of its own (a random suffix), so a run
can follow another on the same server.

The SDKs are azure-data-tables, azure-storage-queue and azure-storage-blob at
the versions of tools/python/serve-requirements.txt. Retries are off: an
error answer shows as the case's failure at once.
"""

import datetime
import sys
import traceback
import uuid

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (
    EdmType,
    EntityProperty,
    TableClient,
    TableSasPermissions,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
    generate_table_sas,
)
from azure.storage.blob import (
    BlobBlock,
    BlobClient,
    BlobSasPermissions,
    BlobServiceClient,
    ContentSettings,
    generate_blob_sas,
)
from azure.storage.queue import (
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    generate_queue_sas,
)

# No retries: a wrong answer fails the case at once, not after backoffs.
NO_RETRY = {"retry_total": 0}


def parse_connection_string(cs):
    parts = {}
    for item in cs.split(";"):
        if "=" in item:
            k, v = item.split("=", 1)
            parts[k.strip()] = v.strip()
    return parts


class Run:
    """What every case gets: the connection string and its parts."""

    def __init__(self, cs):
        self.cs = cs
        parts = parse_connection_string(cs)
        self.account = parts["AccountName"]
        self.key = parts["AccountKey"]
        self.table_endpoint = parts["TableEndpoint"].rstrip("/")
        self.queue_endpoint = parts["QueueEndpoint"].rstrip("/")
        self.blob_endpoint = parts["BlobEndpoint"].rstrip("/")
        self.credential = AzureNamedKeyCredential(self.account, self.key)

    def tables(self):
        return TableServiceClient.from_connection_string(self.cs, **NO_RETRY)

    def queues(self):
        return QueueServiceClient.from_connection_string(self.cs, **NO_RETRY)

    def blobs(self):
        return BlobServiceClient.from_connection_string(self.cs, **NO_RETRY)


def unique(prefix):
    return prefix + uuid.uuid4().hex[:10]


def status_of(error):
    return getattr(error, "status_code", None)


def code_of(error):
    """The service's error code, as each SDK keeps it."""
    code = getattr(error, "error_code", None)
    if code is None and getattr(error, "error", None) is not None:
        code = getattr(error.error, "code", None)
    response = getattr(error, "response", None)
    if code is None and response is not None:
        # (Azurite answers a refused table SAS in XML, which the tables SDK
        # does not read: the header says it all the same.)
        code = response.headers.get("x-ms-error-code")
    return code


def expect_error(kind, status, f, *args, **kwargs):
    """Calls f, which must raise `kind` with HTTP status `status`: the error."""
    try:
        f(*args, **kwargs)
    except kind as e:
        assert status_of(e) == status, f"expected {status}, got {status_of(e)}: {e}"
        return e
    raise AssertionError(f"expected {kind.__name__} ({status}), got success")


def quietly(f, *args, **kwargs):
    """A clean-up that must not hide the case's own failure (an exception in
    a `finally` would replace it): errors are ignored."""
    try:
        f(*args, **kwargs)
    except Exception:  # noqa: BLE001
        pass


def soon(minutes=30):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=minutes)


CASES = []


def case(f):
    CASES.append(f)
    return f


# --- tables ---------------------------------------------------------------


@case
def table_create_list_delete(run):
    svc = run.tables()
    name = unique("Conf")
    created = svc.create_table(name)
    assert created.table_name == name
    expect_error(ResourceExistsError, 409, svc.create_table, name)
    listed = [t.name for t in svc.list_tables()]
    assert name in listed, listed
    found = [t.name for t in svc.query_tables("TableName eq @n", parameters={"n": name})]
    assert found == [name], found
    svc.delete_table(name)
    listed = [t.name for t in svc.query_tables("TableName eq @n", parameters={"n": name})]
    assert listed == [], listed
    # Deleting a table that is not there is no error in this SDK (it swallows 404).
    svc.delete_table(name)


@case
def table_crud_with_etags(run):
    svc = run.tables()
    table = svc.create_table(unique("Crud"))
    try:
        entity = {"PartitionKey": "p", "RowKey": "r1", "Name": "Ann", "Age": 30}
        meta = table.create_entity(entity)
        assert meta.get("etag"), meta
        expect_error(ResourceExistsError, 409, table.create_entity, entity)
        got = table.get_entity("p", "r1")
        assert got["Name"] == "Ann" and got["Age"] == 30, got
        etag = got.metadata["etag"]
        assert etag == meta["etag"], (etag, meta)
        assert isinstance(got.metadata["timestamp"], datetime.datetime), got.metadata
        # A merge with the current ETag succeeds and changes it.
        merged = table.update_entity(
            {"PartitionKey": "p", "RowKey": "r1", "City": "Oslo"},
            mode=UpdateMode.MERGE,
            etag=etag,
            match_condition=MatchConditions.IfNotModified,
        )
        assert merged["etag"] != etag
        got = table.get_entity("p", "r1")
        assert got["Name"] == "Ann" and got["City"] == "Oslo", got
        # The old ETag is refused: 412.
        expect_error(
            ResourceModifiedError,
            412,
            table.update_entity,
            {"PartitionKey": "p", "RowKey": "r1", "Name": "Bob"},
            mode=UpdateMode.REPLACE,
            etag=etag,
            match_condition=MatchConditions.IfNotModified,
        )
        # A replace drops the properties it does not name.
        table.update_entity({"PartitionKey": "p", "RowKey": "r1", "Name": "Bob"}, mode=UpdateMode.REPLACE)
        got = table.get_entity("p", "r1")
        assert got["Name"] == "Bob" and "City" not in got and "Age" not in got, got
        # Upserts: insert-or-merge and insert-or-replace.
        table.upsert_entity({"PartitionKey": "p", "RowKey": "r2", "A": 1}, mode=UpdateMode.MERGE)
        table.upsert_entity({"PartitionKey": "p", "RowKey": "r2", "B": 2}, mode=UpdateMode.MERGE)
        got = table.get_entity("p", "r2")
        assert got["A"] == 1 and got["B"] == 2, got
        table.upsert_entity({"PartitionKey": "p", "RowKey": "r2", "C": 3}, mode=UpdateMode.REPLACE)
        got = table.get_entity("p", "r2")
        assert got["C"] == 3 and "A" not in got, got
        # An update of a missing entity: 404.
        expect_error(
            ResourceNotFoundError,
            404,
            table.update_entity,
            {"PartitionKey": "p", "RowKey": "missing", "A": 1},
            mode=UpdateMode.MERGE,
        )
        # A delete with a stale ETag: 412; with the current one it goes.
        current = table.get_entity("p", "r1").metadata["etag"]
        expect_error(
            ResourceModifiedError,
            412,
            table.delete_entity,
            "p",
            "r1",
            etag=etag,
            match_condition=MatchConditions.IfNotModified,
        )
        table.delete_entity("p", "r1", etag=current, match_condition=MatchConditions.IfNotModified)
        expect_error(ResourceNotFoundError, 404, table.get_entity, "p", "r1")
    finally:
        quietly(svc.delete_table, table.table_name)


@case
def table_edm_types_round_trip(run):
    svc = run.tables()
    table = svc.create_table(unique("Edm"))
    try:
        when = datetime.datetime(2026, 11, 25, 22, 2, 10, 515735, tzinfo=datetime.timezone.utc)
        guid = uuid.UUID("12345678-1234-5678-1234-567812345678")
        entity = {
            "PartitionKey": "p",
            "RowKey": "edm",
            "Text": "héllo 'quoted' ✓",
            "Empty": "",
            "Int32": 2147483647,
            "Negative": -5,
            "Int64": EntityProperty(2**53 + 1, EdmType.INT64),
            "Double": 2.5,
            "WholeDouble": EntityProperty(3.0, EdmType.DOUBLE),
            "Bool": True,
            "When": when,
            "Guid": guid,
            "Binary": b"\x00\x01\xfe\xff",
        }
        table.create_entity(entity)
        got = table.get_entity("p", "edm")
        assert got["Text"] == "héllo 'quoted' ✓", got["Text"]
        assert got["Empty"] == "", got
        assert got["Int32"] == 2147483647 and isinstance(got["Int32"], int), got["Int32"]
        assert got["Negative"] == -5
        int64 = got["Int64"]
        assert isinstance(int64, EntityProperty) and int64.edm_type == EdmType.INT64, repr(int64)
        assert int64.value == 2**53 + 1, repr(int64)
        assert got["Double"] == 2.5 and isinstance(got["Double"], float), got["Double"]
        assert got["WholeDouble"] == 3.0 and isinstance(got["WholeDouble"], float), repr(got["WholeDouble"])
        assert got["Bool"] is True
        assert got["When"] == when, (got["When"], when)
        assert got["Guid"] == guid, repr(got["Guid"])
        assert got["Binary"] == b"\x00\x01\xfe\xff", repr(got["Binary"])
        # The same types through a query.
        [queried] = list(table.query_entities(f"Int64 eq {2**53 + 1}L"))
        assert queried["Guid"] == guid and queried["When"] == when, queried
        [by_guid] = list(table.query_entities("Guid eq @g", parameters={"g": guid}))
        assert by_guid["RowKey"] == "edm"
        [by_date] = list(table.query_entities("When eq @w", parameters={"w": when}))
        assert by_date["RowKey"] == "edm"
    finally:
        quietly(svc.delete_table, table.table_name)


def fill(table, partition, count):
    """`count` entities (N = 0..count-1) in transactions of 100."""
    for start in range(0, count, 100):
        ops = [
            ("create", {"PartitionKey": partition, "RowKey": f"r{n:05d}", "N": n, "Even": n % 2 == 0, "Pad": "x" * 20})
            for n in range(start, min(start + 100, count))
        ]
        table.submit_transaction(ops)


@case
def table_query_filter_select_top_continuation(run):
    svc = run.tables()
    table = svc.create_table(unique("Query"))
    try:
        fill(table, "p", 1100)
        fill(table, "q", 5)
        # Over 1000 entities: the service pages by 1000 with continuation tokens.
        pages = list(table.list_entities().by_page())
        sizes = [len(list(page)) for page in pages]
        assert sum(sizes) == 1105, sizes
        assert len(sizes) >= 2 and max(sizes) <= 1000, sizes
        everything = [e["RowKey"] for e in table.query_entities("PartitionKey eq 'p'")]
        assert everything == [f"r{n:05d}" for n in range(1100)], (len(everything), everything[:3])
        # Filter on a property, with parameters.
        found = list(table.query_entities("PartitionKey eq @pk and N ge @n and Even eq true", parameters={"pk": "p", "n": 1090}))
        assert [e["N"] for e in found] == [1090, 1092, 1094, 1096, 1098], found
        # $select: only the named properties (and the keys the SDK asks for).
        [one] = list(table.query_entities("PartitionKey eq 'q' and RowKey eq 'r00003'", select=["N"]))
        assert one["N"] == 3 and "Pad" not in one and "Even" not in one, one
        # $top: pages of 7, the first one read.
        first = next(table.query_entities("PartitionKey eq 'p'", results_per_page=7).by_page())
        assert [e["N"] for e in first] == list(range(7)), first
        # Paging by 7 with continuation tokens, resumed from a token.
        pager = table.query_entities("PartitionKey eq 'q'", results_per_page=2).by_page()
        page_sizes = [len(list(p)) for p in pager]
        assert page_sizes == [2, 2, 1], page_sizes
        pager = table.list_entities(results_per_page=500).by_page()
        next(pager)
        token = pager.continuation_token
        assert token, "a continuation token after the first page"
        resumed = table.list_entities(results_per_page=500).by_page(continuation_token=token)
        rest = sum(len(list(p)) for p in resumed)
        assert rest == 1105 - 500, rest
        # Nothing found is an empty result, not an error.
        assert list(table.query_entities("N gt 100000")) == []
    finally:
        quietly(svc.delete_table, table.table_name)


@case
def table_batch_success_and_failure(run):
    svc = run.tables()
    table = svc.create_table(unique("Batch"))
    try:
        table.create_entity({"PartitionKey": "b", "RowKey": "existing", "V": 1})
        table.create_entity({"PartitionKey": "b", "RowKey": "doomed", "V": 1})
        result = table.submit_transaction(
            [
                ("create", {"PartitionKey": "b", "RowKey": "new", "V": 1}),
                ("update", {"PartitionKey": "b", "RowKey": "existing", "V": 2}, {"mode": UpdateMode.MERGE}),
                ("upsert", {"PartitionKey": "b", "RowKey": "upserted", "V": 3}, {"mode": UpdateMode.REPLACE}),
                ("delete", {"PartitionKey": "b", "RowKey": "doomed"}),
            ]
        )
        assert len(result) == 4, result
        assert all("etag" in r for r in result[:3]), result
        assert table.get_entity("b", "new")["V"] == 1
        assert table.get_entity("b", "existing")["V"] == 2
        assert table.get_entity("b", "upserted")["V"] == 3
        expect_error(ResourceNotFoundError, 404, table.get_entity, "b", "doomed")
        # A failing batch: its second operation inserts an entity that exists.
        # Nothing of it is applied, and the error names the operation.
        try:
            table.submit_transaction(
                [
                    ("create", {"PartitionKey": "b", "RowKey": "not-applied", "V": 1}),
                    ("create", {"PartitionKey": "b", "RowKey": "existing", "V": 9}),
                ]
            )
            raise AssertionError("the failing batch succeeded")
        except TableTransactionError as e:
            assert e.status_code == 409, (e.status_code, e)
            assert e.index == 1, (e.index, e)
            assert code_of(e) == "EntityAlreadyExists", (code_of(e), e)
        expect_error(ResourceNotFoundError, 404, table.get_entity, "b", "not-applied")
        assert table.get_entity("b", "existing")["V"] == 2
        # Two partitions in one batch are refused by the SDK before sending;
        # a batch of a missing entity's update fails with 404.
        try:
            table.submit_transaction([("update", {"PartitionKey": "b", "RowKey": "missing", "V": 1}, {"mode": UpdateMode.MERGE})])
            raise AssertionError("the failing batch succeeded")
        except TableTransactionError as e:
            assert e.status_code == 404, (e.status_code, e)
            assert code_of(e) == "ResourceNotFound", (code_of(e), e)
    finally:
        quietly(svc.delete_table, table.table_name)


@case
def table_sas_read_only_refuses_a_write(run):
    svc = run.tables()
    name = unique("Sas")
    table = svc.create_table(name)
    try:
        table.create_entity({"PartitionKey": "p", "RowKey": "r", "V": 1})
        sas = generate_table_sas(
            run.credential,
            name,
            permission=TableSasPermissions(read=True),
            expiry=soon(),
        )
        reader = TableClient(run.table_endpoint, name, credential=AzureSasCredential(sas), **NO_RETRY)
        assert reader.get_entity("p", "r")["V"] == 1
        assert [e["RowKey"] for e in reader.list_entities()] == ["r"]
        e = expect_error(HttpResponseError, 403, reader.create_entity, {"PartitionKey": "p", "RowKey": "w"})
        assert code_of(e) in ("AuthorizationPermissionMismatch", "AuthorizationFailure"), code_of(e)
        expect_error(ResourceNotFoundError, 404, table.get_entity, "p", "w")
        # An expired SAS is refused.
        expired = generate_table_sas(
            run.credential,
            name,
            permission=TableSasPermissions(read=True),
            expiry=soon(-5),
        )
        late = TableClient(run.table_endpoint, name, credential=AzureSasCredential(expired), **NO_RETRY)
        expect_error(HttpResponseError, 403, late.get_entity, "p", "r")
    finally:
        quietly(svc.delete_table, name)


# --- queues ---------------------------------------------------------------


def new_queue(run, prefix):
    q = QueueClient.from_connection_string(run.cs, unique(prefix), **NO_RETRY)
    q.create_queue()
    return q


@case
def queue_send_receive_peek_delete(run):
    q = new_queue(run, "conf-q-")
    try:
        sent = q.send_message("hello <queue> & co")
        assert sent.id and sent.pop_receipt, sent
        q.send_message("second")
        peeked = q.peek_messages(max_messages=5)
        assert [m.content for m in peeked] == ["hello <queue> & co", "second"], peeked
        assert peeked[0].dequeue_count == 0, peeked[0]
        msg = q.receive_message(visibility_timeout=60)
        assert msg.content == "hello <queue> & co" and msg.dequeue_count == 1, msg
        assert msg.id == sent.id
        # Received: invisible, so a peek sees the other one only.
        assert [m.content for m in q.peek_messages(max_messages=5)] == ["second"]
        q.delete_message(msg.id, msg.pop_receipt)
        rest = q.receive_messages(messages_per_page=10, visibility_timeout=60)
        assert [m.content for m in rest] == ["second"]
        props = q.get_queue_properties()
        assert props.approximate_message_count == 1, props.approximate_message_count
        q.clear_messages()
        assert q.peek_messages() == []
    finally:
        quietly(q.delete_queue)


@case
def queue_visibility_timeout_via_update(run):
    q = new_queue(run, "conf-vis-")
    try:
        q.send_message("first version")
        msg = q.receive_message(visibility_timeout=60)
        assert q.peek_messages() == []
        # Visible again at once, with new content and a new pop receipt.
        updated = q.update_message(msg.id, msg.pop_receipt, content="second version", visibility_timeout=0)
        assert updated.pop_receipt and updated.pop_receipt != msg.pop_receipt, updated
        [peeked] = q.peek_messages()
        assert peeked.content == "second version", peeked
        again = q.receive_message(visibility_timeout=60)
        assert again.content == "second version" and again.dequeue_count == 2, again
        # A message sent invisible is not received.
        q.send_message("later", visibility_timeout=60)
        assert q.receive_message() is None
    finally:
        quietly(q.delete_queue)


@case
def queue_delete_needs_the_current_pop_receipt(run):
    q = new_queue(run, "conf-pop-")
    try:
        q.send_message("m")
        first = q.receive_message(visibility_timeout=60)
        moved = q.update_message(first.id, first.pop_receipt, visibility_timeout=60)
        # The first receipt is stale after the update: 400 PopReceiptMismatch.
        e = expect_error(HttpResponseError, 400, q.delete_message, first.id, first.pop_receipt)
        assert code_of(e) == "PopReceiptMismatch", code_of(e)
        q.delete_message(first.id, moved.pop_receipt)
        # Gone: 404 MessageNotFound.
        e = expect_error(ResourceNotFoundError, 404, q.delete_message, first.id, moved.pop_receipt)
        assert code_of(e) == "MessageNotFound", code_of(e)
    finally:
        quietly(q.delete_queue)


@case
def queue_metadata_and_listing(run):
    svc = run.queues()
    name = unique("conf-meta-")
    q = svc.create_queue(name, metadata={"owner": "conformance"})
    try:
        props = q.get_queue_properties()
        assert props.metadata == {"owner": "conformance"}, props.metadata
        q.set_queue_metadata({"a": "1", "b": "two"})
        assert q.get_queue_properties().metadata == {"a": "1", "b": "two"}
        listed = list(svc.list_queues(name_starts_with=name, include_metadata=True))
        assert [x.name for x in listed] == [name], listed
        assert listed[0].metadata == {"a": "1", "b": "two"}, listed[0].metadata
        expect_error(ResourceExistsError, 409, svc.create_queue, name, metadata={"other": "x"})
        q.delete_queue()
        e = expect_error(ResourceNotFoundError, 404, q.get_queue_properties)
        assert code_of(e) == "QueueNotFound", code_of(e)
    finally:
        quietly(q.delete_queue)


@case
def queue_sas(run):
    q = new_queue(run, "conf-sas-")
    try:
        q.send_message("for the reader")
        sas = generate_queue_sas(
            run.account,
            q.queue_name,
            run.key,
            permission=QueueSasPermissions(read=True),
            expiry=soon(),
        )
        reader = QueueClient(run.queue_endpoint, q.queue_name, credential=sas, **NO_RETRY)
        assert [m.content for m in reader.peek_messages()] == ["for the reader"]
        expect_error(HttpResponseError, 403, reader.send_message, "refused")
        processor = QueueClient(
            run.queue_endpoint,
            q.queue_name,
            credential=generate_queue_sas(
                run.account, q.queue_name, run.key, permission=QueueSasPermissions(process=True, add=True), expiry=soon()
            ),
            **NO_RETRY,
        )
        processor.send_message("added")
        got = processor.receive_message(visibility_timeout=60)
        assert got.content == "for the reader", got
        processor.delete_message(got)
        assert [m.content for m in q.peek_messages()] == ["added"]
    finally:
        quietly(q.delete_queue)


# --- blobs ----------------------------------------------------------------


def new_container(run, prefix):
    c = run.blobs().get_container_client(unique(prefix))
    c.create_container()
    return c


@case
def blob_upload_and_download(run):
    c = new_container(run, "conf-up-")
    try:
        b = c.get_blob_client("dir/hello.txt")
        data = b"hello, blob \x00\xff" * 1000
        uploaded = b.upload_blob(data)
        assert uploaded["etag"] and uploaded["last_modified"], uploaded
        assert b.download_blob().readall() == data
        # A range.
        assert b.download_blob(offset=7, length=4).readall() == b"blob"
        # Overwrite is refused unless asked for.
        expect_error(ResourceExistsError, 409, b.upload_blob, b"other")
        b.upload_blob(b"other", overwrite=True)
        assert b.download_blob().readall() == b"other"
        # An empty blob.
        empty = c.get_blob_client("empty")
        empty.upload_blob(b"")
        assert empty.download_blob().readall() == b""
        e = expect_error(ResourceNotFoundError, 404, c.get_blob_client("missing").download_blob)
        assert code_of(e) == "BlobNotFound", code_of(e)
        b.delete_blob()
        assert not b.exists()
        c.delete_container()
        e = expect_error(ResourceNotFoundError, 404, c.get_container_properties)
        assert code_of(e) == "ContainerNotFound", code_of(e)
    finally:
        quietly(c.delete_container)


@case
def blob_staged_blocks_and_commit(run):
    c = new_container(run, "conf-blk-")
    try:
        b = c.get_blob_client("blocks")
        ids = ["YmxvY2stMDA=", "YmxvY2stMDE=", "YmxvY2stMDI="]
        parts = [b"a" * 1000, b"b" * 2000, b"c" * 3]
        for block_id, part in zip(ids, parts):
            b.stage_block(block_id, part)
        # Staged only: no blob yet.
        assert not b.exists()
        # Committed in another order, one left out.
        b.commit_block_list([BlobBlock(ids[2]), BlobBlock(ids[0])])
        assert b.download_blob().readall() == parts[2] + parts[0]
        assert b.get_blob_properties().size == 1003
        # A block that was never staged is refused, and the blob stays as it was.
        e = expect_error(HttpResponseError, 400, b.commit_block_list, [BlobBlock("bmV2ZXItc3RhZ2Vk")])
        assert code_of(e) == "InvalidBlockList", code_of(e)
        assert b.download_blob().readall() == parts[2] + parts[0]
        # A larger upload the SDK sends in blocks.
        data = bytes(range(256)) * 4096  # 1 MiB
        client = BlobClient.from_connection_string(
            run.cs, c.container_name, "big", max_single_put_size=256 * 1024, max_block_size=256 * 1024, **NO_RETRY
        )
        client.upload_blob(data)
        assert c.get_blob_client("big").download_blob().readall() == data
    finally:
        quietly(c.delete_container)


@case
def blob_commit_keeps_committed_blocks(run):
    """Put Block List takes a committed block again (its id, as `Latest`):
    how a block blob is changed without uploading it whole."""
    c = new_container(run, "conf-keep-")
    try:
        b = c.get_blob_client("blocks")
        b.stage_block("YmxvY2stMDA=", b"a" * 1000)
        b.stage_block("YmxvY2stMDE=", b"b" * 2000)
        b.commit_block_list([BlobBlock("YmxvY2stMDA="), BlobBlock("YmxvY2stMDE=")])
        b.stage_block("YmxvY2stMDI=", b"c" * 10)
        b.commit_block_list([BlobBlock("YmxvY2stMDA="), BlobBlock("YmxvY2stMDI=")])
        assert b.download_blob().readall() == b"a" * 1000 + b"c" * 10
    finally:
        quietly(c.delete_container)


@case
def blob_get_block_list(run):
    c = new_container(run, "conf-bl-")
    try:
        b = c.get_blob_client("blocks")
        ids = ["YmxvY2stMDA=", "YmxvY2stMDE=", "YmxvY2stMDI="]
        parts = [b"a" * 1000, b"b" * 2000, b"c" * 3]
        for block_id, part in zip(ids, parts):
            b.stage_block(block_id, part)
        committed, uncommitted = b.get_block_list("uncommitted")
        assert committed == [] and sorted(x.id for x in uncommitted) == sorted(ids), (committed, uncommitted)
        b.commit_block_list([BlobBlock(ids[2]), BlobBlock(ids[0])])
        committed, _ = b.get_block_list("committed")
        assert [x.id for x in committed] == [ids[2], ids[0]], committed
        assert [x.size for x in committed] == [3, 1000], committed
        # The SDK's upload in blocks: four of 256 KiB.
        client = BlobClient.from_connection_string(
            run.cs, c.container_name, "big", max_single_put_size=256 * 1024, max_block_size=256 * 1024, **NO_RETRY
        )
        client.upload_blob(bytes(range(256)) * 4096)
        committed, _ = client.get_block_list("committed")
        assert [x.size for x in committed] == [256 * 1024] * 4, committed
    finally:
        quietly(c.delete_container)


@case
def blob_list_with_prefix_and_delimiter(run):
    c = new_container(run, "conf-list-")
    try:
        for name in ["a/1", "a/2", "a/sub/3", "b/1", "c"]:
            c.upload_blob(name, name.encode())
        assert [b.name for b in c.list_blobs()] == ["a/1", "a/2", "a/sub/3", "b/1", "c"]
        assert [b.name for b in c.list_blobs(name_starts_with="a/")] == ["a/1", "a/2", "a/sub/3"]
        top = sorted((x.name, type(x).__name__) for x in c.walk_blobs(delimiter="/"))
        assert top == [("a/", "BlobPrefix"), ("b/", "BlobPrefix"), ("c", "BlobProperties")], top
        # (The SDK puts a page's prefixes before its blobs.)
        under_a = sorted(x.name for x in c.walk_blobs(name_starts_with="a/", delimiter="/"))
        assert under_a == ["a/1", "a/2", "a/sub/"], under_a
        sizes = {b.name: b.size for b in c.list_blobs()}
        assert sizes["a/sub/3"] == 7, sizes
        # Pages of 2 with markers.
        pages = [[b.name for b in p] for p in c.list_blobs(results_per_page=2).by_page()]
        assert pages == [["a/1", "a/2"], ["a/sub/3", "b/1"], ["c"]], pages
        names = [x.name for x in run.blobs().list_containers(name_starts_with=c.container_name)]
        assert names == [c.container_name], names
    finally:
        quietly(c.delete_container)


@case
def blob_metadata_and_properties(run):
    c = new_container(run, "conf-props-")
    try:
        b = c.get_blob_client("props")
        b.upload_blob(
            b"<p>x</p>",
            metadata={"owner": "conformance"},
            content_settings=ContentSettings(content_type="text/html", cache_control="no-cache"),
        )
        p = b.get_blob_properties()
        assert p.size == 8 and p.metadata == {"owner": "conformance"}, p
        assert p.content_settings.content_type == "text/html", p.content_settings
        assert p.content_settings.cache_control == "no-cache", p.content_settings
        assert p.blob_type == "BlockBlob", p.blob_type
        assert p.etag and p.last_modified, p
        assert p.creation_time, "no creation time (x-ms-creation-time)"
        etag = p.etag
        b.set_blob_metadata({"a": "1", "b": "2"})
        p = b.get_blob_properties()
        assert p.metadata == {"a": "1", "b": "2"}, p.metadata
        assert p.etag != etag, "metadata changes the ETag"
        b.set_http_headers(ContentSettings(content_type="application/json"))
        p = b.get_blob_properties()
        assert p.content_settings.content_type == "application/json", p.content_settings
        assert p.metadata == {"a": "1", "b": "2"}, "headers keep the metadata"
        # Conditional requests on the ETag.
        expect_error(
            ResourceModifiedError, 412, b.set_blob_metadata, {"c": "3"}, etag=etag, match_condition=MatchConditions.IfNotModified
        )
        download = b.download_blob()
        assert download.properties.metadata == {"a": "1", "b": "2"}
        c.set_container_metadata({"kind": "test"})
        assert c.get_container_properties().metadata == {"kind": "test"}
    finally:
        quietly(c.delete_container)


@case
def blob_leases(run):
    c = new_container(run, "conf-lease-")
    try:
        b = c.get_blob_client("leased")
        b.upload_blob(b"v1")
        lease = b.acquire_lease(lease_duration=15)
        assert lease.id
        assert b.get_blob_properties().lease.state == "leased"
        # A write without the lease is refused; with it, it goes.
        e = expect_error(HttpResponseError, 412, b.upload_blob, b"v2", overwrite=True)
        assert code_of(e) == "LeaseIdMissing", code_of(e)
        expect_error(HttpResponseError, 412, b.set_blob_metadata, {"a": "1"})
        b.upload_blob(b"v2", overwrite=True, lease=lease)
        assert b.download_blob().readall() == b"v2"
        # A second acquire with another id conflicts.
        expect_error(HttpResponseError, 409, b.acquire_lease, lease_duration=15)
        lease.renew()
        lease.release()
        assert b.get_blob_properties().lease.state == "available"
        b.upload_blob(b"v3", overwrite=True)
        # Acquire again, then break at once: writes without a lease go again.
        lease = b.acquire_lease(lease_duration=-1)
        left = lease.break_lease(lease_break_period=0)
        assert left == 0, left
        assert b.get_blob_properties().lease.state == "broken"
        b.upload_blob(b"v4", overwrite=True)
        assert b.download_blob().readall() == b"v4"
        # A container lease keeps the container from being deleted without it.
        container_lease = c.acquire_lease(lease_duration=15)
        expect_error(HttpResponseError, 412, c.delete_container)
        container_lease.release()
    finally:
        quietly(c.delete_container)


@case
def blob_sas(run):
    c = new_container(run, "conf-bsas-")
    try:
        c.upload_blob("readable", b"secret stuff")
        sas = generate_blob_sas(
            run.account,
            c.container_name,
            "readable",
            account_key=run.key,
            permission=BlobSasPermissions(read=True),
            expiry=soon(),
        )
        url = f"{run.blob_endpoint}/{c.container_name}/readable?{sas}"
        reader = BlobClient.from_blob_url(url, **NO_RETRY)
        assert reader.download_blob().readall() == b"secret stuff"
        expect_error(HttpResponseError, 403, reader.upload_blob, b"overwritten", overwrite=True)
        # A SAS for one blob does not reach another.
        other = BlobClient.from_blob_url(f"{run.blob_endpoint}/{c.container_name}/other?{sas}", **NO_RETRY)
        expect_error(HttpResponseError, 403, other.upload_blob, b"x")
        # A tampered signature is refused.
        tampered = url.replace("sig=", "sig=AA")
        expect_error(HttpResponseError, 403, BlobClient.from_blob_url(tampered, **NO_RETRY).download_blob)
        writer = BlobClient.from_blob_url(
            f"{run.blob_endpoint}/{c.container_name}/written?"
            + generate_blob_sas(
                run.account, c.container_name, "written", account_key=run.key, permission=BlobSasPermissions(create=True, write=True), expiry=soon()
            ),
            **NO_RETRY,
        )
        writer.upload_blob(b"by sas")
        assert c.get_blob_client("written").download_blob().readall() == b"by sas"
    finally:
        quietly(c.delete_container)


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        for f in CASES:
            print(f.__name__)
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = Run(argv[1])
    names = argv[2:]
    by_name = {f.__name__: f for f in CASES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"unknown cases: {unknown}; --list names them", file=sys.stderr)
        return 2
    selected = [by_name[n] for n in names] if names else CASES
    passed = failed = 0
    for f in selected:
        try:
            f(run)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            why = f"{type(e).__name__}: {e}".replace("\n", " | ")
            print(f"FAIL {f.__name__}: {why} (line {where.lineno})", flush=True)
        else:
            passed += 1
            print(f"ok {f.__name__}", flush=True)
    print(f"serve_conformance: {passed + failed} cases, {passed} ok, {failed} FAIL", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
