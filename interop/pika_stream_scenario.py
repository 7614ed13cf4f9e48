"""A stream queue with Python pika, as RabbitMQ's stream tutorial uses it.

Usage: python3 pika_stream_scenario.py amqp://guest:guest@127.0.0.1:5672/
Exits non-zero (with a message) when the broker behaves unexpectedly.
"""
import sys
import pika

url = sys.argv[1]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.queue_declare(queue="pika-stream", durable=True,
                 arguments={"x-queue-type": "stream", "x-max-age": "1D"})
ch.confirm_delivery()
for i in range(20):
    ch.basic_publish(exchange="", routing_key="pika-stream", body=("s-%d" % i).encode(),
                     properties=pika.BasicProperties(headers={"i": i}))

# Consuming without a prefetch is refused, as RabbitMQ does: 406 on the channel.
try:
    bad = conn.channel()
    bad.basic_consume("pika-stream", lambda *a: None, arguments={"x-stream-offset": "first"})
    bad.start_consuming()
    sys.exit("consume without prefetch accepted")
except pika.exceptions.ChannelClosedByBroker as e:
    if e.reply_code != 406:
        sys.exit("consume without prefetch: %r" % e)


def read(offset, n):
    c = conn.channel()
    c.basic_qos(prefetch_count=5)
    got = []
    for method, props, body in c.consume("pika-stream", inactivity_timeout=5,
                                         arguments={"x-stream-offset": offset}):
        if method is None:
            sys.exit("timed out after %r from offset %r" % (got, offset))
        if props.headers.get("x-stream-offset") is None:
            sys.exit("no x-stream-offset header: %r" % props.headers)
        c.basic_ack(method.delivery_tag)
        got.append((props.headers["x-stream-offset"], body))
        if len(got) == n:
            break
    c.cancel()
    c.close()
    return got


first = read("first", 20)
if [b for _, b in first] != [("s-%d" % i).encode() for i in range(20)]:
    sys.exit("from first: %r" % first)
if [o for o, _ in first] != list(range(20)):
    sys.exit("offsets: %r" % [o for o, _ in first])
# Reading again from an offset: acknowledgements removed nothing.
again = read(15, 5)
if [o for o, _ in again] != [15, 16, 17, 18, 19]:
    sys.exit("from offset 15: %r" % again)
conn.close()
print("pika stream scenario ok")
