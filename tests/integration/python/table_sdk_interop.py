"""The official Python table SDK (azure-data-tables) against tablekit's
served Table service (tests/integration/serve_table.rs runs it with the
connection string of an in-process server in TABLEKIT_SERVED_CONNECTION_STRING).

Every call the SDK makes is answered as Azure answers it, in a form the SDK
reads: tables, entities of every type, updates and merges (the SDK's PATCH)
with and without ETags, queries in pages with $select, transactions and their
failure, policies, the service's properties and stats. Exits non-zero on the
first difference.
"""

import datetime
import os
import sys
import uuid

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError, HttpResponseError
from azure.data.tables import (
    EdmType,
    EntityProperty,
    TableAccessPolicy,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
)


def main():
    svc = TableServiceClient.from_connection_string(os.environ["TABLEKIT_SERVED_CONNECTION_STRING"])
    name = "Sdk" + uuid.uuid4().hex[:10]
    svc.create_table(name)
    try:
        svc.create_table(name)
        raise AssertionError("a second create succeeded")
    except ResourceExistsError:
        pass
    assert [t.name for t in svc.query_tables("TableName eq '%s'" % name)] == [name]
    assert name in [t.name for t in svc.list_tables()]

    table = svc.get_table_client(name)
    when = datetime.datetime(2020, 7, 23, 21, 20, 41, 666778, tzinfo=datetime.timezone.utc)
    entity = {
        "PartitionKey": "p",
        "RowKey": "it's é",
        "S": "x \"y\" 😀",
        "I": 7,
        "L": EntityProperty(2**40, EdmType.INT64),
        "D": 1.5,
        "B": True,
        "G": uuid.UUID(int=42),
        "T": when,
        "Bin": b"\x00\x01\xff",
    }
    written = table.create_entity(entity)
    assert written["etag"].startswith('W/"datetime\''), written
    try:
        table.create_entity(entity)
        raise AssertionError("a second insert succeeded")
    except ResourceExistsError:
        pass
    got = table.get_entity("p", "it's é")
    assert got.metadata["etag"] == written["etag"], (got.metadata, written)
    assert got["S"] == entity["S"] and got["I"] == 7 and got["D"] == 1.5 and got["B"] is True, got
    assert got["L"].value == 2**40 and got["L"].edm_type == EdmType.INT64, got["L"]
    assert got["G"] == uuid.UUID(int=42), got["G"]
    assert got["T"] == when, got["T"]
    assert got["Bin"] == b"\x00\x01\xff", got["Bin"]

    # Upserts (PUT, PATCH), a conditional merge, a stale one refused.
    table.upsert_entity({"PartitionKey": "p", "RowKey": "u", "X": 2}, mode=UpdateMode.MERGE)
    table.upsert_entity({"PartitionKey": "p", "RowKey": "u", "Y": 3}, mode=UpdateMode.REPLACE)
    current = table.get_entity("p", "u")
    assert dict(current) == {"PartitionKey": "p", "RowKey": "u", "Y": 3}, dict(current)
    table.update_entity(
        {"PartitionKey": "p", "RowKey": "u", "Z": 4},
        mode=UpdateMode.MERGE,
        etag=current.metadata["etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    assert dict(table.get_entity("p", "u")) == {"PartitionKey": "p", "RowKey": "u", "Y": 3, "Z": 4}
    try:
        table.update_entity(
            {"PartitionKey": "p", "RowKey": "u"},
            mode=UpdateMode.REPLACE,
            etag=current.metadata["etag"],
            match_condition=MatchConditions.IfNotModified,
        )
        raise AssertionError("a stale update succeeded")
    except HttpResponseError as e:
        assert e.status_code == 412, e

    # A query in pages, and a selection.
    for i in range(30):
        table.upsert_entity({"PartitionKey": "q", "RowKey": "%03d" % i, "N": i})
    pages = list(table.query_entities("N ge 5", results_per_page=7).by_page())
    rows = [e["RowKey"] for page in pages for e in page]
    assert rows == ["%03d" % i for i in range(5, 30)], rows
    selected = [dict(e) for e in table.query_entities("RowKey eq '001'", select=["N"])]
    assert selected == [{"N": 1}], selected

    # Transactions: applied whole, or refused whole with the failing index.
    result = table.submit_transaction(
        [
            ("create", {"PartitionKey": "b", "RowKey": "1"}),
            ("upsert", {"PartitionKey": "b", "RowKey": "2", "A": 1}),
            ("upsert", {"PartitionKey": "b", "RowKey": "3", "A": 2}, {"mode": "merge"}),
        ]
    )
    assert len(result) == 3 and all(r["etag"] for r in result), result
    try:
        table.submit_transaction(
            [
                ("create", {"PartitionKey": "b", "RowKey": "4"}),
                ("create", {"PartitionKey": "b", "RowKey": "1"}),
            ]
        )
        raise AssertionError("a transaction with a duplicate insert succeeded")
    except TableTransactionError as e:
        assert e.index == 1, e.index
        assert e.error_code == "EntityAlreadyExists", e.error_code
    try:
        table.get_entity("b", "4")
        raise AssertionError("a refused transaction left an entity")
    except ResourceNotFoundError:
        pass
    table.delete_entity("b", "1")

    # Policies, the service's properties and stats.
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    expiry = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    table.set_table_access_policy({"readers": TableAccessPolicy(permission="r", start=start, expiry=expiry)})
    policy = table.get_table_access_policy()["readers"]
    assert policy.permission == "r", policy.permission
    properties = svc.get_service_properties()
    assert "cors" in properties, properties
    stats = svc.get_service_stats()
    assert stats["geo_replication"]["status"] == "live", stats

    svc.delete_table(name)
    print("azure-data-tables: every call answered as the service answers it")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the test shows what differed
        print("FAILED: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        raise
