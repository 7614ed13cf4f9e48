// A stream queue with Node amqplib, as RabbitMQ's stream tutorial uses it.
// Usage: node amqplib_stream_scenario.js amqp://guest:guest@127.0.0.1:5672
'use strict';
const amqp = require('amqplib');

function fail(msg) {
  console.error(msg);
  process.exit(1);
}

async function main() {
  const conn = await amqp.connect(process.argv[2]);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue('amqplib-stream', { durable: true, arguments: { 'x-queue-type': 'stream' } });
  for (let i = 0; i < 20; i++) {
    ch.sendToQueue('amqplib-stream', Buffer.from('s-' + i), { headers: { i } });
  }
  await ch.waitForConfirms();

  const c = await conn.createChannel();
  await c.prefetch(5);
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out after ' + JSON.stringify(got))), 5000);
    c.consume('amqplib-stream', (m) => {
      const off = m.properties.headers['x-stream-offset'];
      if (off === undefined) reject(new Error('no x-stream-offset header'));
      got.push([Number(off), m.content.toString()]);
      c.ack(m);
      if (got.length === 10) {
        clearTimeout(timer);
        resolve();
      }
    }, { arguments: { 'x-stream-offset': 10 } });
  }).catch((e) => fail(e.message));
  const want = Array.from({ length: 10 }, (_, i) => [10 + i, 's-' + (10 + i)]);
  if (JSON.stringify(got) !== JSON.stringify(want)) fail('got ' + JSON.stringify(got));

  // basic.get is not supported on streams: 540 NOT_IMPLEMENTED, a connection
  // error, closes the connection (as RabbitMQ does).
  const closed = new Promise((resolve) => conn.on('error', (e) => resolve(e)));
  const g = await conn.createChannel();
  g.on('error', () => {});
  g.get('amqplib-stream').catch(() => {});
  const err = await closed;
  if (!String(err.message).includes('540')) fail('basic.get on a stream: ' + err.message);
  console.log('amqplib stream scenario ok');
}

main().catch((e) => fail(e.stack || String(e)));
