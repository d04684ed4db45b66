"""The reference pipeline, end to end (`make demo`, or `python -m examples.pipeline.run`).

1. starts `ferrymq standalone` with its store in ./demo-output/store (short retry delays and
   3 reconsume attempts, so retries and dead letters happen within seconds);
2. produces order events to `orders` (JSON, one in 40 malformed);
3. runs a Spark Structured Streaming job (local[2], group `orders-pipeline`) that aggregates
   revenue per minute and product into Parquet and sends malformed rows to `orders-bad`;
4. meanwhile a push consumer (group `orders-audit`) audits every order: some audits fail
   once and pass on retry, malformed orders fail every time and end in %DLQ%orders-audit;
5. beside them, a second Spark query enriches every order into `orders-enriched` through the
   exactly-once sink; its first attempt runs as a child process whose driver is SIGKILLed
   right after it committed micro-batch 0 (enrich_job.py), and the demo restarts it from its
   checkpoint as soon as it is dead, beside the main query; a consumer of `orders-enriched`
   started with the stage then counts every order exactly once;
6. prints the counts, both groups' lag (0), a summary of the aggregates, and where the
   files are; then stops everything.

Options: --orders N (default 3000), --output DIR (default ./demo-output)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import ferrymq.spark  # sets Spark's environment before the session starts
from ferrymq import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferrymq.embedded import StandaloneProcess
from ferrymq.embedded import standalone as run_standalone

from . import enrich_job, events, spark_job, story

AUDIT_GROUP = "orders-audit"
DLQ_TOPIC = f"%DLQ%{AUDIT_GROUP}"
DELAY_LEVELS = "1s 1s 1s 1s 1s 2s 2s 2s 2s 2s 3s 3s 3s 3s 3s 5s 5s 5s"
MAX_RECONSUME = 3
console = Console()


@contextlib.contextmanager
def standalone(store: Path, log_path: Path) -> Iterator[StandaloneProcess]:
    """The broker, with short delay levels and few reconsumes so retries end within the demo."""
    with log_path.open("w") as log, run_standalone(
        store, "--message-delay-level", DELAY_LEVELS, "--max-reconsume-times", str(MAX_RECONSUME),
        log=log,
    ) as server:
        yield server


@dataclass
class AuditStats:
    consumed: set[int] = field(default_factory=set)
    retried: int = 0  # deliveries that failed and went back to the broker
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listener(self, msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        msg = msgs[0]
        try:
            order_id = events.audit(msg.body, msg.reconsume_times)
        except (ValueError, KeyError, events.TransientAuditError):
            with self.lock:
                self.retried += 1
            return ConsumeStatus.RECONSUME_LATER
        with self.lock:
            self.consumed.add(order_id)
        return ConsumeStatus.CONSUME_SUCCESS


def produce(namesrv: str, orders: list[events.Order], advance: Callable[[int], None]) -> None:
    with Producer("orders-producer", namesrv) as producer:
        for lo in range(0, len(orders), 100):
            chunk = orders[lo : lo + 100]
            producer.send_batch(
                [Message("orders", events.encode(o), keys=f"order-{o.order_id}") for o in chunk]
            )
            advance(len(chunk))


def topic_total(admin: AdminClient, topic: str) -> int:
    try:
        return sum(r.max_offset - r.min_offset for r in admin.topic_status(topic))
    except Exception:  # not created yet
        return 0


def group_lag(admin: AdminClient, group: str) -> int:
    return sum(r.lag for r in admin.consume_stats(group))


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f}s")
        time.sleep(0.2)  # polling a condition; the deadline bounds it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--output", type=Path, default=Path("demo-output"))
    args = parser.parse_args(argv)
    out: Path = args.output.resolve()
    shutil.rmtree(out, ignore_errors=True)  # each run starts from nothing
    store, aggregates, checkpoint = out / "store", out / "aggregates", out / "checkpoint"
    out.mkdir(parents=True)
    orders = events.make_orders(args.orders, int(time.time() * 1000) - 10 * 60_000)
    malformed = sum(events.is_malformed(o.order_id) for o in orders)
    valid = len(orders) - malformed
    started = time.monotonic()

    with standalone(store, out / "broker.log") as broker, AdminClient(broker.namesrv) as admin:
        story.say(console, story.intro(orders, MAX_RECONSUME, DLQ_TOPIC, spark_job.BAD_TOPIC))
        story.say(console, [f"ferrymq standalone started: name server {broker.namesrv}", f"store: {store}"])
        admin.create_topic("orders", 4)
        admin.create_topic(spark_job.BAD_TOPIC, 2)
        admin.create_topic(enrich_job.ENRICHED_TOPIC, 4)
        enrich_cp = out / "enrich-checkpoint"
        per_trigger = max(1, len(orders) // 3)
        stats = AuditStats()
        audit = PushConsumer(
            AUDIT_GROUP,
            broker.namesrv,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            max_reconsume_times=MAX_RECONSUME,
        )
        audit.subscribe("orders")
        audit.register_listener(stats.listener)
        audit.start()
        enrich: enrich_job.EnrichStage | None = None
        try:
            from pyspark.sql import SparkSession

            os.environ.update(enrich_job.short_lived_jvm())  # before the session's JVM starts
            with Progress(
                TextColumn("{task.description:<28}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                t_produce = progress.add_task("produce orders", total=len(orders))
                produce(broker.namesrv, orders, lambda n: progress.advance(t_produce, n))
                enrich = enrich_job.EnrichStage(
                    broker.namesrv, enrich_cp, per_trigger, out / "enrich-first-attempt.log")
                t_spark_start = progress.add_task("start Spark (local[2])", total=1)
                spark = (
                    SparkSession.builder.master("local[2]")
                    .appName("ferrymq-demo")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.ui.showConsoleProgress", "false")
                    .getOrCreate()
                )
                spark.sparkContext.setLogLevel("ERROR")
                ferrymq.spark.register(spark)
                progress.advance(t_spark_start)
                t_spark = progress.add_task("Spark: orders-pipeline", total=len(orders))
                t_audit = progress.add_task("audit: orders-audit", total=len(orders))
                query = spark_job.start(spark, broker.namesrv, aggregates, checkpoint, 1000)
                while query.isActive:
                    enrich.step(spark, len(orders))
                    done = sum(p["numInputRows"] for p in query.recentProgress)
                    progress.update(t_spark, completed=done)
                    progress.update(
                        t_audit, completed=len(stats.consumed) + topic_total(admin, DLQ_TOPIC)
                    )
                    query.awaitTermination(0.5)
                if query.exception() is not None:
                    raise RuntimeError(f"the Spark job failed: {query.exception()}")
                progress.update(t_spark, completed=len(orders))
                ferrymq.spark.wait_committed(query)  # the last batch's group offsets

                def audited() -> bool:
                    assert enrich is not None
                    enrich.step(spark, len(orders))  # its restart runs beside the audit's retries
                    dead = topic_total(admin, DLQ_TOPIC)
                    progress.update(t_audit, completed=len(stats.consumed) + dead)
                    return len(stats.consumed) >= valid and dead >= malformed

                wait_for(audited, 180, "the audit consumer")
                t_enrich = progress.add_task("Spark: orders-enriched (restart)", total=1)
                killed = enrich.finish(spark, len(orders), 180)
                progress.advance(t_enrich)
            audit.shutdown()  # persists the audit group's offsets
            wait_for(lambda: group_lag(admin, AUDIT_GROUP) == 0, 30, "the audit group's lag")
            arrivals = enrich.received(len(orders), 60)
        finally:
            audit.shutdown()  # a second call does nothing
            if enrich is not None:
                enrich.close()
        report(spark, admin, orders, stats, aggregates, out, time.monotonic() - started)
        report_enriched(admin, orders, arrivals, killed)
        spark.stop()
    console.print("[green]stopped:[/] Spark, the audit consumer and the broker")
    return 0


def report_enriched(admin: AdminClient, orders: list[events.Order], arrivals: Any, killed: int) -> None:
    keys = arrivals.keys
    table = Table(title=f"exactly-once sink: {enrich_job.ENRICHED_TOPIC}", show_header=False)
    table.add_row("first attempt", f"driver SIGKILLed after committing batch 0 (exit {killed})"
                  if killed == -9 else f"exit {killed} (expected -9: SIGKILL)")
    table.add_row("restarted from the checkpoint", "replayed batch 0: recognised, rolled back")
    table.add_row("orders produced", str(len(orders)))
    table.add_row("messages in orders-enriched", str(topic_total(admin, enrich_job.ENRICHED_TOPIC)))
    table.add_row("received by a consumer", str(len(keys)))
    table.add_row("distinct orders received", str(len(set(keys))))
    missing = {f"order-{o.order_id}" for o in orders} - set(keys)
    table.add_row("orders missing / duplicated", f"{len(missing)} / {len(keys) - len(set(keys))}")
    console.print(table)


def report(
    spark: Any,
    admin: AdminClient,
    orders: list[events.Order],
    stats: AuditStats,
    aggregates: Path,
    out: Path,
    seconds: float,
) -> None:
    malformed = sum(events.is_malformed(o.order_id) for o in orders)
    counts = Table(title="messages", show_header=False)
    counts.add_row("produced to orders", str(len(orders)))
    counts.add_row("consumed OK by orders-audit", str(len(stats.consumed)))
    counts.add_row("retried (sent back by the audit)", str(stats.retried))
    counts.add_row(f"dead-lettered ({DLQ_TOPIC})", str(topic_total(admin, DLQ_TOPIC)))
    counts.add_row("malformed sent to orders-bad by Spark", str(topic_total(admin, "orders-bad")))
    counts.add_row("malformed produced", str(malformed))
    console.print(counts)
    story.say(console, [story.failures_line(orders, MAX_RECONSUME)])

    lags = Table(title="consumer group lag")
    lags.add_column("group")
    lags.add_column("queues")
    lags.add_column("lag", justify="right")
    for group in (spark_job.GROUP, AUDIT_GROUP):
        rows = admin.consume_stats(group)
        lags.add_row(group, str(len(rows)), str(sum(r.lag for r in rows)))
    console.print(lags)

    agg = spark_job.read_aggregates(spark, aggregates)
    total = agg.agg({"revenue": "sum", "orders": "sum"}).first()
    assert total is not None  # an aggregate without groups has its one row, even over no rows
    expected = sum(o.revenue for o in orders if not events.is_malformed(o.order_id))
    by_product = (
        agg.groupBy("product").sum("revenue", "orders").orderBy("sum(revenue)", ascending=False)
    )
    windows = agg.select("minute").distinct().count()
    # Short enough not to wrap over the narrow table; the lines after it say what the minutes are.
    products = Table(title=f"revenue per product ({windows} minutes)")
    products.add_column("product")
    products.add_column("orders", justify="right")
    products.add_column("revenue", justify="right")
    for row in by_product.collect():
        products.add_row(row["product"], str(row["sum(orders)"]), f"{row['sum(revenue)']:.2f}")
    products.add_row("[bold]total[/]", str(total["sum(orders)"]), f"{total['sum(revenue)']:.2f}")
    console.print(products)
    console.print(f"expected total revenue from the producer's side: {expected:.2f}")
    story.say(console, story.span_lines(orders, windows))

    story.print_paths(console, "files", [
        ("aggregates (Parquet, per batch)", aggregates),
        ("Spark checkpoint", out / "checkpoint"),
        ("broker store", out / "store"),
        ("broker log", out / "broker.log"),
    ])
    console.print(f"pipeline finished in {seconds:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
