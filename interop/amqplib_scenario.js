// Publish, consume, confirm and reject with Node amqplib against a broker.
// Usage: node amqplib_scenario.js amqp://guest:guest@127.0.0.1:5672/
'use strict';
const amqp = require('amqplib');

function fail(msg) {
  console.error(msg);
  process.exit(1);
}

async function main() {
  const conn = await amqp.connect(process.argv[2]);
  const ch = await conn.createConfirmChannel();
  const { queue } = await ch.assertQueue('', { exclusive: true });
  await ch.assertExchange('node.fanout', 'fanout', { autoDelete: true });
  await ch.bindQueue(queue, 'node.fanout', '');

  const returned = [];
  ch.on('return', (m) => returned.push(m.content.toString()));

  for (let i = 0; i < 20; i++) {
    ch.publish('node.fanout', 'k', Buffer.from('msg-' + i), {
      contentType: 'text/plain',
      headers: { seq: i, tags: ['a', 'b'] },
      timestamp: 1700000000,
      appId: 'interop',
    });
  }
  ch.publish('', 'no-such-queue', Buffer.from('lost'), { mandatory: true });
  await ch.waitForConfirms();
  if (returned.length !== 1 || returned[0] !== 'lost') fail('expected one return, got ' + JSON.stringify(returned));

  await ch.prefetch(5);
  const seen = [];
  let rejectedOnce = false;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout after ' + seen.length)), 10000);
    ch.consume(queue, (m) => {
      const body = m.content.toString();
      if (m.properties.headers.tags[1] !== 'b' || m.properties.appId !== 'interop') {
        reject(new Error('properties lost: ' + JSON.stringify(m.properties)));
        return;
      }
      if (body === 'msg-3' && !rejectedOnce) {
        rejectedOnce = true;
        ch.nack(m, false, true);
        return;
      }
      if (body === 'msg-3' && !m.fields.redelivered) {
        reject(new Error('requeued message not redelivered'));
        return;
      }
      if (body === 'msg-19') ch.reject(m, false);
      else ch.ack(m);
      seen.push(body);
      if (seen.length === 20) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  const sorted = [...seen].sort();
  const want = Array.from({ length: 20 }, (_, i) => 'msg-' + i).sort();
  if (JSON.stringify(sorted) !== JSON.stringify(want)) fail('got ' + JSON.stringify(seen));
  const check = await ch.checkQueue(queue);
  if (check.messageCount !== 0) fail('queue not empty: ' + check.messageCount);
  await ch.close();
  await conn.close();
  console.log('amqplib scenario ok');
}

main().catch((e) => fail(e.stack || String(e)));
