'use strict';

// Sends `count` messages with ali-ons's producer (sync sends, one after another) and prints one
// JSON line per event. See ../README.md for the settings and the output lines.

const { Producer, Message } = require('ali-ons');
const common = require('./common');

const cfg = common.loadConfig({
  group: 'compat_producer',
  count: 1,
  startIndex: 0,
  body: 'msg-{i}',
  tags: 'TagA',
  keys: 'key-{i}',
  intervalMs: 0,
  stopOnError: true,
  readyTimeoutMs: 30000,
  closeTimeoutMs: 10000,
});
if (!cfg.topic) {
  common.fatal('config.topic is required');
}

let stopping = false;
let exiting = false;

function buildMessage(index) {
  const topic = common.pick(cfg.topic, index);
  let body = common.template(common.pick(cfg.body, index), index);
  if (cfg.bodyPadTo && Buffer.byteLength(body) < cfg.bodyPadTo) {
    body += 'x'.repeat(cfg.bodyPadTo - Buffer.byteLength(body));
  }
  const tagsValue = common.pick(cfg.tags, index);
  // ali-ons writes a missing tag as the text "null"; pass "" for "no tag" explicitly.
  const tags = tagsValue === null || tagsValue === undefined ? '' : common.template(tagsValue, index);
  const msg = new Message(topic, tags, body);
  const keysValue = common.pick(cfg.keys, index);
  let keys = [];
  if (keysValue !== null && keysValue !== undefined && keysValue !== '') {
    keys = common.template(keysValue, index).split(' ').filter(Boolean);
    msg.keys = keys; // ali-ons's setter takes an array and joins it with spaces
  }
  const delayLevel = common.pick(cfg.delayLevel, index);
  if (delayLevel) {
    msg.delayTimeLevel = Number(delayLevel);
  }
  const shardingKey = common.pick(cfg.shardingKey, index);
  if (shardingKey) {
    msg.shardingKey = common.template(shardingKey, index);
  }
  if (cfg.properties) {
    for (const name of Object.keys(cfg.properties)) {
      msg.properties[name] = common.template(cfg.properties[name], index);
    }
  }
  return { msg, topic, body, tags, keys: keys.join(' ') };
}

async function main() {
  const producer = new Producer(Object.assign(common.clientOptions(cfg), {
    producerGroup: cfg.group,
    sendMsgTimeout: cfg.sendMsgTimeout || 3000,
  }));
  producer.on('error', err => common.emit('error', common.errorFields(err)));

  let sending = false;
  const shutdown = async (code, reason) => {
    if (exiting) {
      return;
    }
    exiting = true;
    common.emit('closing', { reason });
    try {
      await common.withTimeout(producer.close(), cfg.closeTimeoutMs, 'producer.close()');
      common.emit('closed');
    } catch (err) {
      common.emit('close_error', common.errorFields(err));
      code = code || 1;
    }
    // ali-ons keeps a hidden inner producer with timers alive; leave explicitly.
    process.exit(code);
  };
  const onSignal = signal => {
    stopping = true;
    if (!sending) {
      shutdown(0, signal);
    }
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));

  try {
    await common.withTimeout(producer.ready(), cfg.readyTimeoutMs, 'producer.ready()');
  } catch (err) {
    common.fatal(`producer did not start: ${err.message}`);
  }
  common.emit('ready', { group: cfg.group, clientId: producer.clientId });

  let sent = 0;
  let failed = 0;
  sending = true;
  for (let n = 0; n < cfg.count && !stopping; n++) {
    const index = cfg.startIndex + n;
    const { msg, topic, body, tags, keys } = buildMessage(index);
    try {
      const result = await producer.send(msg);
      sent++;
      common.emit('sent', {
        index,
        topic,
        msgId: result.msgId,
        queueId: Number(result.messageQueue.queueId),
        brokerName: result.messageQueue.brokerName,
        queueOffset: result.queueOffset,
        sendStatus: result.sendStatus,
        body: body.length > 4096 ? undefined : body,
        bodyLength: Buffer.byteLength(body),
        tags,
        keys,
      });
    } catch (err) {
      failed++;
      common.emit('send_error', Object.assign({ index, topic }, common.errorFields(err)));
      if (cfg.stopOnError) {
        break;
      }
    }
    if (cfg.intervalMs > 0 && n + 1 < cfg.count) {
      await new Promise(resolve => setTimeout(resolve, cfg.intervalMs));
    }
  }
  sending = false;
  common.emit('done', { sent, failed });
  await shutdown(failed ? 1 : 0, 'done');
}

process.on('unhandledRejection', err => common.emit('error', Object.assign({ unhandled: true }, common.errorFields(err))));
main().catch(err => common.fatal(err && err.stack ? err.stack : err));
