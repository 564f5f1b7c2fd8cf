'use strict';
// rig.js - real processes for the tests: a redis-server and dlockd daemons on free loopback
// ports, in a temporary directory that is removed unless a test failed (or DLOCK_KEEP is set).
// $DLOCKD names the daemon (default: the build's daemon/dlockd), $REDIS_SERVER redis-server.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');

const DLOCKD = process.env.DLOCKD || path.join(__dirname, '..', '..', '..', 'daemon', 'dlockd');
const REDIS = process.env.REDIS_SERVER || 'redis-server';
const ADMINPASS = 'rig-admin-pass';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Polls fn until it returns something truthy (or ms pass: then it throws, naming what).
async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** A plain line connection for what the library does not do (operator verbs, probes). */
class Raw {
  static open(port) {
    return new Promise((resolve, reject) => {
      const sock = net.connect(port, '127.0.0.1', () => resolve(new Raw(sock)));
      sock.on('error', reject);
    });
  }

  constructor(sock) {
    this.sock = sock;
    this.buf = '';
    this.waiting = [];
    sock.setEncoding('latin1');
    sock.on('data', (d) => {
      this.buf += d;
      for (let nl; (nl = this.buf.indexOf('\n')) >= 0;) {
        const line = this.buf.slice(0, nl).replace(/\r$/, '');
        this.buf = this.buf.slice(nl + 1);
        if (!line.startsWith('*') && this.waiting.length) this.waiting.shift()(line);
      }
    });
    sock.on('error', () => {});
  }

  /** Sends an untagged request; resolves with its reply (events are skipped). */
  request(line) {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.sock.write(`${line}\n`);
    });
  }

  close() {
    this.sock.destroy();
  }
}

class Rig {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-node.'));
    this.procs = [];
    this.failed = false;
    process.once('exit', () => this.procs.forEach((p) => p.kill('SIGKILL')));
  }

  /** A node:test test with a time limit, that marks the rig failed (to keep its logs). */
  test(name, fn, timeout = 30000) {
    test(name, { timeout }, async (t) => {
      try {
        await fn(t);
      } catch (e) {
        this.failed = true;
        throw e;
      }
    });
  }

  spawn(argv, log) {
    const out = fs.openSync(path.join(this.dir, log), 'a');
    const p = spawn(argv[0], argv.slice(1), { stdio: ['ignore', out, out] });
    fs.closeSync(out);
    this.procs.push(p);
    return p;
  }

  /** Starts a redis-server; resolves with {port, proc}. */
  async redis() {
    const port = await freePort();
    const proc = this.spawn([REDIS, '--port', `${port}`, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', this.dir], `redis-${port}.log`);
    await until('redis-server', () => probe(port, 'PING\r\n', '+PONG'));
    return { port, proc };
  }

  /** Starts a dlockd on redis with extra --key value args; resolves with {port, addr, proc}. */
  async dlockd(redis, ...args) {
    const port = await freePort();
    const proc = this.spawn([DLOCKD, '--listen', `127.0.0.1:${port}`, '--redis', `127.0.0.1:${redis.port}`,
      '--adminpass', ADMINPASS, '--log-level', 'debug', ...args], `dlockd-${port}.log`);
    await until(`dlockd on ${port}`, () => probe(port, 'PING\n', 'OK'));
    return { port, addr: `127.0.0.1:${port}`, proc };
  }

  /**
   * A TCP relay to port on a free port: {port, stall(), heal()}. stall() stops forwarding (the
   * bytes wait, as in a partition), for the connections open and those to come; heal() resumes.
   */
  async staller(port) {
    const socks = new Set();
    let stalled = false;
    const server = net.createServer((a) => {
      const b = net.connect(port, '127.0.0.1');
      for (const [from, to] of [[a, b], [b, a]]) {
        socks.add(from);
        if (stalled) from.pause();
        from.on('data', (d) => to.write(d));
        from.on('error', () => {}).on('close', () => {
          socks.delete(from);
          to.destroy();
        });
      }
    });
    server.unref();
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const set = (on) => {
      stalled = on;
      for (const x of socks) if (on) x.pause(); else x.resume();
    };
    return { port: server.address().port, stall: () => set(true), heal: () => set(false) };
  }

  /** A Raw connection authenticated as the operator. */
  async admin(port) {
    const raw = await Raw.open(port);
    const ok = await raw.request(`AUTH ${ADMINPASS}`);
    if (ok !== 'OK') throw new Error(`AUTH: ${ok}`);
    return raw;
  }

  /** Kills every process; keeps the logs if a test failed. */
  stop() {
    for (const p of this.procs) p.kill('SIGKILL');
    if (this.failed || process.env.DLOCK_KEEP) console.log(`logs kept in ${this.dir}`);
    else fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// Sends line to port; resolves true when the answer starts with want.
function probe(port, line, want) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1', () => sock.write(line));
    sock.setTimeout(1000, () => sock.destroy());
    sock.once('data', (d) => {
      resolve(String(d).startsWith(want));
      sock.destroy();
    });
    sock.on('error', () => resolve(false));
    sock.on('close', () => resolve(false));
  });
}

// The first event of emitter, within ms (else it rejects, naming the event).
function once(emitter, event, ms = 15000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no '${event}' event in ${ms} ms`)), ms);
    emitter.once(event, (v) => {
      clearTimeout(timer);
      resolve(v);
    });
  });
}

module.exports = { Rig, Raw, until, sleep, once, ADMINPASS };
