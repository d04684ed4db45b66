'use strict';

// Shared helpers for the ali-ons compatibility scripts.
//
// Every script reads one JSON object of settings (argv[2], else the FERRYMQ_COMPAT_CONFIG
// environment variable), writes one JSON object per line to stdout for each event, and writes
// ali-ons's own log lines to stderr, so stdout stays machine-readable.

const os = require('os');
const util = require('util');

function loadConfig(defaults) {
  let raw = process.argv[2];
  if (raw === undefined || raw === '') {
    raw = process.env.FERRYMQ_COMPAT_CONFIG || '{}';
  }
  let cfg;
  try {
    cfg = JSON.parse(raw);
  } catch (err) {
    fatal(`config is not JSON: ${err.message}`);
  }
  if (cfg === null || typeof cfg !== 'object' || Array.isArray(cfg)) {
    fatal('config must be a JSON object');
  }
  cfg = Object.assign({}, defaults, cfg);
  if (!cfg.namesrv) {
    // Never let ali-ons fall back to its HTTP name-server lookup.
    fatal('config.namesrv (HOST:PORT) is required');
  }
  return cfg;
}

function emit(event, fields) {
  const line = Object.assign({ event, ts: Date.now() }, fields || {});
  process.stdout.write(JSON.stringify(line) + '\n');
}

function fatal(message, extra) {
  emit('fatal', Object.assign({ error: String(message) }, extra || {}));
  process.exit(2);
}

// ali-ons asserts that an HTTP client is given even when `nameSrv` is set (then it never uses
// it). This one refuses every request, so no address outside the test can ever be contacted.
const noHttpClient = {
  async request(url) {
    throw new Error(`HTTP access is disabled in ferrymq compat tests (asked for ${url})`);
  },
};

// ali-ons logs through options.logger; keep stdout for events only.
function makeLogger(verbose) {
  const write = level => (...args) => {
    const text = args.map(a => (a instanceof Error ? a.stack : a)).length ?
      util.format(...args.map(a => (a instanceof Error ? a.stack : a))) : '';
    process.stderr.write(`[ali-ons ${level}] ${text}\n`);
  };
  return {
    debug: verbose ? write('debug') : () => {},
    info: verbose ? write('info') : () => {},
    warn: write('warn'),
    error: write('error'),
  };
}

// Options shared by producer and consumer: the name server, no HTTP, quiet logs, and the
// client timers (tests shorten them to avoid waiting 10-30 s for a rebalance or route poll).
function clientOptions(cfg) {
  const opts = {
    nameSrv: cfg.namesrv,
    httpclient: noHttpClient,
    logger: makeLogger(!!cfg.verbose),
  };
  const timers = {
    pollNameServerIntervalMs: 'pollNameServerInteval', // sic: ali-ons's spelling
    heartbeatIntervalMs: 'heartbeatBrokerInterval',
    rebalanceIntervalMs: 'rebalanceInterval',
    persistIntervalMs: 'persistConsumerOffsetInterval',
  };
  for (const key of Object.keys(timers)) {
    if (cfg[key] !== undefined) {
      opts[timers[key]] = Number(cfg[key]);
    }
  }
  if (cfg.instanceName) {
    opts.instanceName = String(cfg.instanceName);
  }
  // ACL (RocketMQ's plain_acl.yml accounts): ali-ons signs every request with these.
  if (cfg.accessKey) {
    opts.accessKey = String(cfg.accessKey);
    opts.secretKey = String(cfg.secretKey);
  }
  return opts;
}

function errorFields(err) {
  return {
    name: err && err.name,
    code: err && err.code !== undefined ? err.code : undefined,
    error: err && err.message ? err.message : String(err),
  };
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([ promise, timeout ]).finally(() => clearTimeout(timer));
}

function template(text, index) {
  return String(text).replace(/\{i\}/g, String(index)).replace(/\{pid\}/g, String(process.pid));
}

function pick(value, index) {
  if (Array.isArray(value)) {
    return value.length ? value[index % value.length] : undefined;
  }
  return value;
}

module.exports = {
  loadConfig,
  emit,
  fatal,
  noHttpClient,
  makeLogger,
  clientOptions,
  errorFields,
  withTimeout,
  template,
  pick,
  hostname: os.hostname(),
};
