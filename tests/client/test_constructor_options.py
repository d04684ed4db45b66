"""The client constructors take their options as keyword-only parameters with types and
defaults: a misspelt option fails at the call, help() and an IDE show the options, and the
blocking and async constructors of a client take the same ones."""

from __future__ import annotations

import dataclasses
import inspect
import pydoc
from typing import Any

import pytest

from ferrymq import LitePullConsumer, Producer, PushConsumer, SimpleConsumer, TransactionProducer, aio
from ferrymq.client.consumer.options import CONSUMER_DEFAULTS, ConsumerOptions
from ferrymq.client.consumer.push import PUSH_PULL_BATCH_SIZE
from ferrymq.client.producer_options import PRODUCER_DEFAULTS, ProducerOptions
from ferrymq.client.transaction_async import LocalTransactionState


class Listener:
    def execute_local_transaction(self, msg: object, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


TX = {"listener": Listener()}
# (blocking, async, keyword arguments every call needs)
PAIRS: list[tuple[type, type, dict[str, Any]]] = [
    (Producer, aio.Producer, {}),
    (TransactionProducer, aio.TransactionProducer, TX),
    (PushConsumer, aio.PushConsumer, {}),
    (LitePullConsumer, aio.LitePullConsumer, {}),
    (SimpleConsumer, aio.SimpleConsumer, {}),
]
CLASSES = [(cls, required) for blocking, core, required in PAIRS for cls in (blocking, core)]
IDS = [f"{cls.__module__}.{cls.__name__}" for cls, _ in CLASSES]


def options(cls: type) -> dict[str, inspect.Parameter]:
    return {
        name: p for name, p in inspect.signature(cls, eval_str=True).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }


@pytest.mark.parametrize(("cls", "required"), CLASSES, ids=IDS)
def test_a_misspelt_option_fails_at_the_call(cls: type, required: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'route_refresh_intervall'"):
        cls("typo-group", "127.0.0.1:9876", route_refresh_intervall=1.0, **required)


@pytest.mark.parametrize(("cls", "required"), CLASSES, ids=IDS)
def test_the_signature_lists_the_options_and_takes_no_catch_all(cls: type, required: dict[str, Any]) -> None:
    params = inspect.signature(cls).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    opts = options(cls)
    for name in ("route_refresh_interval", "heartbeat_interval", "access_key", "secret_key", "tls"):
        assert name in opts, name
        assert opts[name].annotation is not inspect.Parameter.empty, name


def test_help_shows_the_options_with_their_defaults() -> None:
    text = pydoc.render_doc(Producer, renderer=pydoc.plaintext).replace("'", "")
    assert "send_timeout: float = 3.0" in text and "auto_batch: bool = True" in text
    text = pydoc.render_doc(PushConsumer, renderer=pydoc.plaintext).replace("'", "")
    assert f"pull_batch_size: int = {PUSH_PULL_BATCH_SIZE}" in text and "consume_threads: int = 20" in text


@pytest.mark.parametrize(("blocking", "core", "required"), PAIRS, ids=[b.__name__ for b, _, _ in PAIRS])
def test_blocking_and_async_constructors_take_the_same_options(
    blocking: type, core: type, required: dict[str, Any]
) -> None:
    theirs = options(blocking)
    theirs.pop("check_threads", None)  # the blocking TransactionProducer's own thread pool
    assert theirs == options(core)


@pytest.mark.parametrize("cls", [Producer, aio.Producer, TransactionProducer, aio.TransactionProducer])
def test_producer_options_are_the_producer_options_dataclass(cls: type) -> None:
    opts = options(cls)
    opts.pop("listener", None)
    opts.pop("check_threads", None)
    fields = {f.name for f in dataclasses.fields(ProducerOptions)}
    assert set(opts) == fields
    for name, p in opts.items():
        assert p.default == getattr(PRODUCER_DEFAULTS, name), name


@pytest.mark.parametrize("cls", [PushConsumer, aio.PushConsumer, LitePullConsumer, aio.LitePullConsumer])
def test_push_and_lite_consumer_options_are_the_consumer_options_dataclass(cls: type) -> None:
    opts = options(cls)
    opts.pop("auto_commit", None)
    opts.pop("auto_commit_interval", None)
    assert set(opts) == {f.name for f in dataclasses.fields(ConsumerOptions)}
    own = {"pull_batch_size": PUSH_PULL_BATCH_SIZE} if "Push" in cls.__name__ else {"persist_interval": None}
    for name, p in opts.items():
        assert p.default == own.get(name, getattr(CONSUMER_DEFAULTS, name)), name


def test_options_given_reach_the_core() -> None:
    producer = Producer("opts-producer", send_timeout=1.5, auto_batch=False, secret_key="s3cret", access_key="ak")
    assert producer._impl.options == dataclasses.replace(
        PRODUCER_DEFAULTS, send_timeout=1.5, auto_batch=False, access_key="ak", secret_key="s3cret")
    assert producer._impl.send_timeout == 1.5 and not producer._impl.auto_batch.enabled
    assert "s3cret" not in repr(producer._impl.options)
    tx = TransactionProducer("opts-tx", listener=Listener(), check_threads=2, retry_times_when_send_failed=5)
    assert tx._impl.retry_times_when_send_failed == 5
    tx.shutdown()

    push = PushConsumer("opts-push", consume_threads=3, offset_store_dir="offsets-here")
    assert push._impl.options.consume_threads == 3
    assert push._impl.options.pull_batch_size == PUSH_PULL_BATCH_SIZE
    assert str(push._impl.options.offsets_dir()) == "offsets-here"

    lite = LitePullConsumer("opts-lite", auto_commit=False, auto_commit_interval=2.0)
    assert not lite._impl.auto_commit
    assert lite._impl.options.persist_interval == 2.0  # the auto-commit cadence
    assert lite._impl.options.pull_batch_size == CONSUMER_DEFAULTS.pull_batch_size
    explicit = aio.LitePullConsumer("opts-lite", auto_commit_interval=2.0, persist_interval=0.5)
    assert explicit.options.persist_interval == 0.5

    simple = SimpleConsumer("opts-simple", await_duration=1.0, orderly=True)
    assert simple._impl.await_duration == 1.0


def test_option_values_are_still_checked() -> None:
    with pytest.raises(ValueError, match="consume_threads"):
        PushConsumer("opts-push", consume_threads=0)
    with pytest.raises(ValueError, match="await_duration"):
        SimpleConsumer("opts-simple", await_duration=-1.0)
