'use strict';

// A clustering (or broadcasting) push consumer built with ali-ons. Prints one JSON line per
// delivery and per lifecycle event; on SIGTERM/SIGINT it closes the consumer (which persists
// its offsets and unregisters) before exiting. See ../README.md for the settings.

const { Consumer } = require('ali-ons');
const common = require('./common');

const cfg = common.loadConfig({
  group: 'compat_consumer',
  subExpression: '*',
  consumeFromWhere: 'last',
  failPattern: null,
  failTimes: 1,
  failMode: 'throw',
  consumeDelayMs: 0,
  exitAfter: 0,
  idleExitMs: 0,
  readyTimeoutMs: 30000,
  closeTimeoutMs: 15000,
});
if (!cfg.topic) {
  common.fatal('config.topic is required');
}

const FROM_WHERE = {
  last: 'CONSUME_FROM_LAST_OFFSET',
  first: 'CONSUME_FROM_FIRST_OFFSET',
  timestamp: 'CONSUME_FROM_TIMESTAMP',
};

// ali-ons takes the start time as local-time "YYYYMMDDhhmmss".
function humanTime(ms) {
  const d = new Date(Number(ms));
  const pad = n => String(n).padStart(2, '0');
  return `${d.getFullYear()}${pad(d.getMonth() + 1)}${pad(d.getDate())}` +
    `${pad(d.getHours())}${pad(d.getMinutes())}${pad(d.getSeconds())}`;
}

function bodyText(msg) {
  if (!msg.body) {
    return '';
  }
  return Buffer.isBuffer(msg.body) ? msg.body.toString('utf8') : String(msg.body);
}

function userProperties(msg) {
  const system = new Set([ 'TAGS', 'KEYS', 'WAIT', 'DELAY', 'RETRY_TOPIC', 'REAL_TOPIC', 'REAL_QID',
    'ORIGIN_MESSAGE_ID', 'MIN_OFFSET', 'MAX_OFFSET', 'UNIQ_KEY', 'RECONSUME_TIME', 'MAX_RECONSUME_TIMES',
    'MSG_REGION', 'TRACE_ON', 'CONSUME_START_TIME', 'PGROUP', 'TRAN_MSG', '' ]);
  const out = {};
  for (const name of Object.keys(msg.properties || {})) {
    if (!system.has(name)) {
      out[name] = msg.properties[name];
    }
  }
  return out;
}

async function main() {
  const topics = Array.isArray(cfg.topic) ? cfg.topic : [ cfg.topic ];
  const options = Object.assign(common.clientOptions(cfg), {
    consumerGroup: cfg.group,
    consumeFromWhere: FROM_WHERE[cfg.consumeFromWhere] || cfg.consumeFromWhere,
    isBroadcast: !!cfg.broadcast,
  });
  if (cfg.consumeTimestamp !== undefined) {
    const ts = String(cfg.consumeTimestamp);
    options.consumeTimestamp = /^\d{14}$/.test(ts) ? ts : humanTime(Number(ts));
  }
  for (const name of [ 'maxReconsumeTimes', 'pullBatchSize', 'parallelConsumeLimit',
    'pullThresholdForQueue', 'brokerSuspendMaxTimeMillis', 'pullTimeDelayMillsWhenException' ]) {
    if (cfg[name] !== undefined) {
      options[name] = Number(cfg[name]);
    }
  }

  const consumer = new Consumer(options);
  consumer.on('error', err => common.emit('error', common.errorFields(err)));

  const failRegex = cfg.failPattern ? new RegExp(cfg.failPattern) : null;
  let succeeded = 0;
  let lastActivity = 0;
  let exiting = false;

  const shutdown = async (code, reason) => {
    if (exiting) {
      return;
    }
    exiting = true;
    common.emit('closing', { reason, succeeded });
    try {
      await common.withTimeout(consumer.close(), cfg.closeTimeoutMs, 'consumer.close()');
      common.emit('closed', { succeeded });
    } catch (err) {
      common.emit('close_error', common.errorFields(err));
      code = code || 1;
    }
    // ali-ons keeps a hidden inner producer with timers alive; leave explicitly.
    process.exit(code);
  };
  process.on('SIGTERM', () => shutdown(0, 'SIGTERM'));
  process.on('SIGINT', () => shutdown(0, 'SIGINT'));

  const handler = async msg => {
    if (cfg.exitAfter > 0 && succeeded >= cfg.exitAfter) {
      // Enough: leave this message unacknowledged (its offset is not committed, so the group's
      // next consumer gets it) and wait for the process to exit.
      return new Promise(() => {});
    }
    lastActivity = Date.now();
    const body = bodyText(msg);
    const reconsumeTimes = Number(msg.reconsumeTimes || 0);
    // Fail a matching message while it has been re-consumed fewer than failTimes times: its
    // first failTimes deliveries fail, the next one succeeds (stateless, so it also holds
    // across consumer restarts).
    const fail = failRegex !== null && failRegex.test(body) && reconsumeTimes < cfg.failTimes;
    const action = fail ? (cfg.failMode === 'throw' ? 'throw' : 'retry') : 'success';
    common.emit('received', {
      msgId: msg.msgId,
      topic: msg.topic,
      queueId: Number(msg.queueId),
      queueOffset: msg.queueOffset,
      commitLogOffset: msg.commitLogOffset,
      body,
      tags: msg.tags === undefined ? null : msg.tags,
      keys: msg.keys === undefined ? null : msg.keys,
      reconsumeTimes,
      retryTopic: msg.retryTopic || null,
      originMsgId: msg.originMessageId || null,
      bornTimestamp: msg.bornTimestamp,
      storeTimestamp: msg.storeTimestamp,
      bornHost: msg.bornHost,
      storeHost: msg.storeHost,
      properties: userProperties(msg),
      action,
    });
    if (cfg.consumeDelayMs > 0) {
      await new Promise(resolve => setTimeout(resolve, cfg.consumeDelayMs));
    }
    if (action === 'throw') {
      throw new Error(`compat consumer: failing ${msg.msgId} on purpose (reconsumeTimes=${reconsumeTimes})`);
    }
    if (action === 'retry') {
      return Consumer.ACTION_RETRY;
    }
    succeeded++;
    if (cfg.exitAfter > 0 && succeeded >= cfg.exitAfter) {
      // Let ali-ons record this message's offset before closing.
      setImmediate(() => shutdown(0, 'exitAfter'));
    }
    return undefined;
  };

  for (const topic of topics) {
    consumer.subscribe(topic, cfg.subExpression, handler);
  }

  try {
    await common.withTimeout(consumer.ready(), cfg.readyTimeoutMs, 'consumer.ready()');
  } catch (err) {
    common.fatal(`consumer did not start: ${err.message}`);
  }
  common.emit('ready', { group: cfg.group, clientId: consumer.clientId, topics });

  if (cfg.idleExitMs > 0) {
    lastActivity = Date.now();
    setInterval(() => {
      if (Date.now() - lastActivity >= cfg.idleExitMs) {
        shutdown(0, 'idle');
      }
    }, Math.min(500, cfg.idleExitMs)).unref();
  }
}

process.on('unhandledRejection', err => common.emit('error', Object.assign({ unhandled: true }, common.errorFields(err))));
main().catch(err => common.fatal(err && err.stack ? err.stack : err));
