"""The Redis broker keeps no acknowledgement state of its own (settings: kombu's ack
emulation is off): a doorbell a worker reserved costs no round trip to record, and a
worker closing its connection cleanly puts it back on the queue."""

from __future__ import annotations

import uuid

import pytest
import redis
from django.conf import settings
from kombu import Consumer, Producer, Queue

from durableruns.celery import app

pytestmark = pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis"), reason="the Redis broker only"
)


def test_a_reserved_doorbell_is_not_recorded_in_redis_and_comes_back_on_a_clean_close():
    queue = Queue(f"acks-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    reserved = []
    try:
        with app.connection_for_write() as connection:
            Producer(connection).publish({"run": "r-1"}, routing_key=queue.name, declare=[queue])
        with app.connection_for_read() as connection:
            consumer = Consumer(connection, [queue], callbacks=[lambda _, m: reserved.append(m)])
            with consumer:
                connection.drain_events(timeout=5)
                assert [m.payload for m in reserved] == [{"run": "r-1"}]
                assert client.llen(queue.name) == 0
                # kombu's emulation wrote the message to this hash before the callback.
                assert client.hget("unacked", reserved[0].delivery_tag) is None
        assert client.llen(queue.name) == 1  # never acked: back on the queue
    finally:
        client.delete(queue.name)
