"""Publish, consume, confirm and reject with Python pika against a broker.

Usage: python3 pika_scenario.py amqp://guest:guest@127.0.0.1:5672/
Exits non-zero (with a message) when the broker behaves unexpectedly.
"""
import sys
import pika

url = sys.argv[1]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
q = ch.queue_declare(queue="", exclusive=True).method.queue
ch.exchange_declare(exchange="pika.topic", exchange_type="topic", auto_delete=True)
ch.queue_bind(queue=q, exchange="pika.topic", routing_key="orders.#")

props = pika.BasicProperties(
    content_type="application/json",
    delivery_mode=2,
    priority=3,
    correlation_id="corr-1",
    message_id="m-1",
    headers={"k": "v", "n": 7, "nested": {"a": [1, "two"]}},
)
for i in range(10):
    # With confirms on, basic_publish raises if the broker nacks.
    ch.basic_publish(exchange="pika.topic", routing_key="orders.eu.%d" % i,
                     body=("msg-%d" % i).encode(), properties=props, mandatory=True)

# An unroutable mandatory publish is returned (pika raises UnroutableError).
try:
    ch.basic_publish(exchange="pika.topic", routing_key="nowhere", body=b"x", mandatory=True)
    sys.exit("expected the unroutable message to be returned")
except pika.exceptions.UnroutableError:
    pass

# One message in flight at a time, so a requeued message must come back
# ahead of the ones not yet delivered.
ch.basic_qos(prefetch_count=1)
got = []
first_rejected = False
for method, properties, body in ch.consume(q, inactivity_timeout=5):
    if method is None:
        sys.exit("timed out after %d messages: %r" % (len(got), got))
    if properties.correlation_id != "corr-1" or properties.headers.get("n") != 7:
        sys.exit("properties lost: %r" % properties)
    if properties.headers["nested"] != {"a": [1, b"two"]} and properties.headers["nested"] != {"a": [1, "two"]}:
        sys.exit("nested header lost: %r" % properties.headers)
    if body == b"msg-0" and not first_rejected:
        first_rejected = True
        ch.basic_reject(method.delivery_tag, requeue=True)
        continue
    if body == b"msg-0" and not method.redelivered:
        sys.exit("requeued message not marked redelivered")
    if body == b"msg-9":
        ch.basic_nack(method.delivery_tag, requeue=False)
    else:
        ch.basic_ack(method.delivery_tag)
    got.append(body)
    if len(got) == 10:
        break
ch.cancel()

expected = sorted(("msg-%d" % i).encode() for i in range(10))
if sorted(got) != expected:
    sys.exit("got %r" % got)
if got[0] != b"msg-0":
    sys.exit("requeued message did not come back first: %r" % got)
if ch.queue_declare(queue=q, passive=True).method.message_count != 0:
    sys.exit("queue not empty")
conn.close()
print("pika scenario ok")
