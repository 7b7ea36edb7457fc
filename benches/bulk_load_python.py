#!/usr/bin/env python3
"""The anchor of the bulk-load bench (issue 25): the same N workload entities
(WORKLOAD.md) loaded into Azurite with the Python SDK's batch API, grouped by
hand as a user would: for each partition p000..p099, its entities in RowKey
order cut into chunks of 100, one `submit_transaction` per chunk, 8 chunks in
flight (a thread pool). Entities are generated chunk by chunk, so memory is
the SDK's own. Then the table is read back out (`list_entities`, pages of
1,000): the read half of a copy, which has no command of its own there.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install azure-data-tables
    BULK_N=1000000 TABLEKIT_CONNECTION_STRING=... /tmp/venv/bin/python benches/bulk_load_python.py

One JSON line per step: wall time, entities/s, CPU (user + system, this
process) per entity, peak resident set (ru_maxrss).
"""

import datetime
import json
import os
import resource
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from azure.core.exceptions import ServiceResponseError
from azure.data.tables import EdmType, EntityProperty, TableServiceClient

N = int(os.environ.get("BULK_N", "100000"))
PARTITIONS = 100
IN_FLIGHT = int(os.environ.get("BULK_IN_FLIGHT", "8"))
EPOCH = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)


def entity(i):
    return {
        "PartitionKey": "p%03d" % (i % PARTITIONS),
        "RowKey": "%08d" % i,
        "FirstName": "First-%08d-abcdef" % i,
        "LastName": "Last-%08d-ghijklm" % i,
        "Email": "user%08d@example.com" % i,
        "Age": 18 + (7 * i + i // 100) % 50,
        "Salary": 30000.37 + i,
        "EmployeeId": EntityProperty(9_000_000_000 + i, EdmType.INT64),
        "HireDate": EPOCH + datetime.timedelta(minutes=i),
        "Id": uuid.UUID("00000000-0000-4000-8000-%012x" % i),
        "Active": i % 3 != 0,
        "Photo": bytes((i + j) & 0xFF for j in range(64)),
    }


def chunks():
    """Per partition, its entities in RowKey order, 100 at a time."""
    for p in range(PARTITIONS):
        chunk = []
        for i in range(p, N, PARTITIONS):
            chunk.append(i)
            if len(chunk) == 100:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def report(step, n, started, cpu0):
    wall = time.monotonic() - started
    used = cpu() - cpu0
    print(json.dumps({
        "step": step,
        "n": n,
        "wall_s": round(wall, 3),
        "entities_per_s": round(n / wall),
        "cpu_s": round(used, 3),
        "cpu_us_per_entity": round(used * 1e6 / n, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }), flush=True)


def submit(table, operations):
    """One transaction, sent again (up to 5 times) when the connection breaks:
    upserts only, so a resend is harmless. Without it a load of 100,000 died
    on one reset connection under Azurite (the SDK's own retries ran out)."""
    for attempt in range(5):
        try:
            return table.submit_transaction(operations)
        except ServiceResponseError:
            if attempt == 4:
                raise
            time.sleep(0.5 * (attempt + 1))


def bounded(pool, jobs):
    """Runs jobs with at most IN_FLIGHT submitted at once; returns how many."""
    pending, done = [], 0
    for job in jobs:
        pending.append(pool.submit(*job))
        if len(pending) >= IN_FLIGHT:
            pending.pop(0).result()
            done += 1
    for f in pending:
        f.result()
        done += 1
    return done


def main():
    conn = os.environ.get("TABLEKIT_CONNECTION_STRING") or os.environ["TABLEKIT_TEST_CONNECTION_STRING"]
    service = TableServiceClient.from_connection_string(conn)
    name = "PyBulk%d" % os.getpid()
    table = service.create_table(name)
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        started, cpu0 = time.monotonic(), cpu()
        bounded(pool, ((submit, table, [("upsert", entity(i)) for i in c]) for c in chunks()))
        report("python-load-azurite", N, started, cpu0)

    # The read half of a copy: every entity back out, decoded, in pages of 1,000.
    started, cpu0 = time.monotonic(), cpu()
    count = ages = 0
    for e in table.list_entities(results_per_page=1000):
        count += 1
        ages += e["Age"]
    assert count == N, count
    report("python-read-azurite", N, started, cpu0)
    service.delete_table(name)


if __name__ == "__main__":
    main()
