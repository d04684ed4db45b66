"""Topic changes are journaled (config/topics.journal, one appended line each) instead of
rewriting topics.json whole on every change; the snapshot is rewritten once the journal holds
lines for half the topics (at least 1,000), and at a clean stop. Real files; a real broker
process SIGKILLed right after answering."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import start_standalone
from ferrymq import AdminClient
from ferrymq.broker.topic_journal import JOURNAL_NAME
from ferrymq.broker.topics import TopicConfig, TopicManager


def _journaling(config_dir: Path) -> TopicManager:
    topics = TopicManager(config_dir)
    topics.load()
    topics.on_dirty = lambda: None  # the broker's way: changes are journaled, not rewritten
    return topics


def _journal(topics: TopicManager) -> None:
    records, _version = topics.take_pending()
    topics.append_journal(records)


def test_changes_are_replayed_over_the_snapshot(tmp_path: Path) -> None:
    topics = _journaling(tmp_path)
    topics.persist()
    snapshot = (tmp_path / "topics.json").read_bytes()
    topics.upsert(TopicConfig("a", 2, 2))
    topics.upsert(TopicConfig("b", 3, 3))
    topics.delete("a")
    topics.upsert(TopicConfig("b", 5, 5))
    _journal(topics)
    assert (tmp_path / "topics.json").read_bytes() == snapshot  # not rewritten
    assert topics.journal_lines == 4
    again = TopicManager(tmp_path)
    again.load()
    assert "a" not in again.topics and again.topics["b"].write_queue_nums == 5
    assert again.data_version == topics.data_version


def test_a_torn_last_line_ends_the_replay(tmp_path: Path) -> None:
    topics = _journaling(tmp_path)
    topics.upsert(TopicConfig("kept", 1, 1))
    _journal(topics)
    with open(tmp_path / JOURNAL_NAME, "ab") as f:
        f.write(b'{"v":99,"ts":1,"topic":"torn","con')  # a crash mid-append
    again = TopicManager(tmp_path)
    again.load()
    assert "kept" in again.topics and "torn" not in again.topics
    assert again.version == topics.version


def test_a_snapshot_takes_the_journal_in_and_removes_it(tmp_path: Path) -> None:
    topics = _journaling(tmp_path)
    topics.upsert(TopicConfig("x", 1, 1))
    _journal(topics)
    topics.upsert(TopicConfig("y", 1, 1))  # not journaled yet: the snapshot holds it
    topics.persist()
    assert not (tmp_path / JOURNAL_NAME).exists() and topics.journal_lines == 0
    assert topics.take_pending()[0] == []
    on_disk = json.loads((tmp_path / "topics.json").read_bytes())
    assert {"x", "y"} <= set(on_disk["topicConfigTable"])
    # A journal left from before the snapshot (a crash before its removal) changes nothing.
    stale = TopicManager(tmp_path / "stale")
    stale.load()
    stale.on_dirty = lambda: None
    stale.upsert(TopicConfig("x", 9, 9))
    _journal(stale)
    (tmp_path / "stale" / JOURNAL_NAME).rename(tmp_path / JOURNAL_NAME)
    again = TopicManager(tmp_path)
    again.load()
    assert again.topics["x"].write_queue_nums == 1


def test_created_topics_survive_a_broker_kill_and_the_journal_is_compacted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            for i in range(1100):  # past the journal's compaction threshold (1,000 lines)
                admin.create_topic(f"t{i}", 1)
            admin.create_topic("last", 3)
    finally:
        server.kill()  # SIGKILL right after the answers: no snapshot at stop
    config = store / "config"
    assert 0 < len((config / JOURNAL_NAME).read_bytes().splitlines()) < 1000
    assert "t0" in json.loads((config / "topics.json").read_bytes())["topicConfigTable"]
    server = start_standalone(store)
    try:
        with AdminClient(server.namesrv) as admin:
            assert {f"t{i}" for i in range(1100)} | {"last"} <= set(admin.topic_list())
            assert admin.topic_route("last").queue_datas[0].write_queue_nums == 3
    finally:
        server.stop()
    assert not (config / JOURNAL_NAME).exists()  # the clean stop wrote the snapshot
