'use strict';
// client.js - one dlockd session: its connection, heartbeats, reconnects and tagged requests.
//
// The session is alive until (send time of the last answered heartbeat) + ttl, on the monotonic
// clock. Its holds are trusted for less when the server tells its lock-lease (HELLO lease=): a
// dlockd that died or lost Redis renews nothing, so holds that no answer confirmed in time are
// reported lost ("jeopardy") before their Redis lease could run out. libdlock(3) does the same.

const { EventEmitter } = require('node:events');
const { parseAddresses } = require('./address');
const { DlockError, BusyError, TimeoutError, LostError } = require('./errors');
const { LockHold, SemaphoreHold } = require('./holds');
const { tlsOptions, dial, readLines } = require('./link');
const w = require('./wire');

const BACKOFF_MIN = 50; // ms between rounds of reconnection attempts, doubling
const BACKOFF_MAX = 2000;
const TIMER_MAX = 2 ** 31 - 1;
const J_CONN = 1;       // jeopardy: disconnected
const J_HB = 2;         //   no heartbeat answered in time (or not yet, after a resume)
const J_BACKEND = 4;    //   the server said * JEOPARDY
const QUIT = '#bye QUIT\n';

const now = () => performance.now();
const closedError = () => new DlockError('CLOSED', 'dlock: the client is closed');
const ownerArg = (owner) => (owner ? ` owner=${owner}` : '');

// How long holds outlive a confirmation on a server whose lock-lease is lease ms (0: not told).
// It renews every lease/3, so whenever it answers a hold has 2/3 of the lease left; the margin
// (a tenth of the lease, at least 500 ms, at most half of the rest) covers the clocks and the
// time it takes to tell the application.
function trustOf(lease) {
  const left = (lease * 2) / 3;
  return lease > 0 ? left - Math.min(Math.max(lease / 10, 500), left / 2) : 0;
}

// The failure of one connection attempt; _connectRound gathers the CONN ones in one message.
function attemptError(code, addr, why) {
  return new DlockError(code, `${code === 'CONN' ? '' : 'dlock: '}${addr.text}: ${why}`);
}

// The n numbers of key= (one name) or keys= (several names) of a reply.
function numbers(r, key, n) {
  const s = n === 1 ? r.fields[key] : r.fields[`${key}s`];
  const v = s === undefined ? [] : s.split(',').map(Number);
  if (v.length !== n || !v.every(Number.isSafeInteger)) {
    throw new DlockError('PROTO', `dlock: bad ${key} in reply`);
  }
  return v;
}

function json(r) {
  try {
    return JSON.parse(r.text);
  } catch {
    throw new DlockError('PROTO', 'dlock: reply without a JSON object');
  }
}

// What reply r means for req: null for a success, else the error to reject with.
function replyError(req, r) {
  switch (r.status) {
    case 'OK':
      return null;
    case 'BUSY': // with a wait: sent again after a reconnect, with no wait left
      return req.wait > 0 ? new TimeoutError() : new BusyError(r.fields);
    case 'TIMEOUT':
      return new TimeoutError();
    case 'ERR':
      if (r.code === 'NOTHELD' && req.hold && req.hold.lost) return new LostError(req.hold);
      if (r.code === 'NOTHELD' && req.hold && req.resent) return null; // the first send did it
      return new DlockError(r.code, `dlock: ${r.code} ${r.text}`);
    default:
      return new DlockError('PROTO', `dlock: unexpected reply ${r.status}`);
  }
}

/**
 * A client of dlockd with one session; made by dlock.connect(). Emits 'lost' ({name, token,
 * reason, hold}), 'jeopardy' (reason), 'safe' and 'connect' ({address, session, resumed}).
 */
class Client extends EventEmitter {
  constructor(addrs, opts = {}) {
    super();
    this.addresses = parseAddresses(addrs);
    this._opts = {
      name: opts.name === undefined ? undefined : w.checkValue('client name', opts.name),
      ttl: opts.ttl === undefined ? undefined : w.checkDuration('ttl', opts.ttl),
      password: opts.password === undefined ? undefined : w.checkValue('password', opts.password),
      // one connection attempt with its HELLO; a reply, beyond the request's own wait
      connectTimeout: w.checkDuration('connectTimeout', opts.connectTimeout ?? 5000),
      requestTimeout: w.checkDuration('requestTimeout', opts.requestTimeout ?? 5000),
    };
    this._tls = this.addresses.some((a) => a.tls) ? tlsOptions(opts.tls) : undefined;
    this.session = null;      // session id, null before the first HELLO
    this._secret = null;      // what resumes the session
    this._dead = false;       // the session is gone: the next HELLO starts a new one
    this._ttl = 0;            // session ttl granted, ms
    this._trust = 0;          // ms the holds outlive a confirmation (0: the ttl bounds them)
    this._confirmed = 0;      // send time of the last answer that showed the holds well
    this._safeUntil = 0;      // send time of the last answered heartbeat + ttl
    this._jeopardy = 0;       // J_* reasons in force
    this._link = null;        // the connection in use, once its HELLO is answered
    this._cur = 0;            // index of the address the session lives on
    this._connecting = false; // a round of connection attempts runs
    this._backoff = BACKOFF_MIN;
    this._reqs = new Map();   // tag -> request waiting for its reply
    this._seq = 0;            // request tags
    this._owners = 0;         // owners made up for holds
    this._hbSent = new Map(); // heartbeat number -> send time
    this._hbSeq = 0;
    this._holds = new Set();  // holds not released (lost ones too)
    this._closing = false;
    this._closed = null;      // the promise of close()
    this._timers = { hb: null, due: null, retry: null };
  }

  /** True while a connection is up and its HELLO answered. */
  get connected() {
    return this._link !== null;
  }

  // ---------------------------------------------------------------- connecting

  async _start() {
    const err = await this._connectRound();
    if (err) {
      this._closing = true;
      throw err;
    }
  }

  // One attempt per address, from the session's own server on: null once connected, else the
  // error to report (a server's refusal says more than an address that does not answer).
  async _connectRound() {
    const n = this.addresses.length;
    const unreachable = [];
    let refusal = null;
    for (let i = 0; i < n && !this._closing; i++) {
      const err = await this._attempt((this._cur + i) % n);
      if (!err) return null;
      if (err.code === 'CONN') unreachable.push(err.message);
      else refusal = refusal || err;
    }
    if (this._closing) return closedError();
    return refusal || new DlockError('CONN', `dlock: cannot connect to dlockd: ${unreachable.join('; ')}`);
  }

  // Connects to address idx and says HELLO, resuming the session while it may be alive.
  // Resolves null once the connection is in use, else a DlockError.
  async _attempt(idx) {
    const addr = this.addresses[idx];
    const limit = now() + this._opts.connectTimeout;
    let sock;
    try {
      sock = await dial(addr, this._tls, this._helloDeadline(this._resumable(), limit) - now());
    } catch (e) {
      return attemptError('CONN', addr, e.code || e.message);
    }
    return new Promise((resolve) => this._hello(sock, idx, limit, resolve));
  }

  _resumable() {
    return this.session !== null && !this._dead;
  }

  // A resume must be answered before the session may end: after that, its holds were told lost.
  _helloDeadline(resume, limit) {
    return resume ? Math.min(limit, this._sessionEnd()) : limit;
  }

  // The HELLO that resumes the session (when resume) or opens a new one.
  _helloLine(resume) {
    const o = this._opts;
    let line = '#hello HELLO';
    if (resume) line += ` session=${this.session}${this._secret ? ` secret=${this._secret}` : ''}`;
    if (o.ttl) line += ` ttl=${o.ttl}`;
    if (o.name) line += ` name=${o.name}`;
    if (o.password) line += ` auth=${o.password}`;
    return `${line}\n`;
  }

  // Says HELLO on sock and installs the connection once it is answered OK; done(err) after.
  _hello(sock, idx, limit, done) {
    const link = { sock, addr: this.addresses[idx], idx, up: false };
    let resume = this._resumable();
    let sent = 0;
    let timer = null;
    const fail = (code, why, destroy = true) => {
      clearTimeout(timer);
      if (destroy) sock.destroy();
      done(attemptError(code, link.addr, why));
      done = () => {};
    };
    const send = () => {
      clearTimeout(timer);
      timer = setTimeout(fail, this._helloDeadline(resume, limit) - now(), 'CONN', 'no answer');
      sent = now();
      sock.write(this._helloLine(resume));
    };
    sock.on('error', () => {}); // 'close' follows
    sock.on('close', () => (link.up ? this._onClose(link) : fail('CONN', 'closed')));
    readLines(sock, (line) => {
      if (link.up) return this._onLine(link, line);
      const r = w.parseLine(line);
      if (!r.tag && r.status === 'ERR') return fail(r.code, `${r.code} ${r.text}`); // refused at once
      if (r.tag !== 'hello') return undefined; // events before the OK are not for the session
      if (resume && this._dead) {
        sock.end(QUIT); // answered too late: its holds were told lost, so they must go
        return fail('CONN', 'resumed too late', false);
      }
      if (resume && r.code === 'NOSESSION') {
        this._sessionGone('expired');
        resume = false;
        return send(); // a new session, on this connection
      }
      if (r.status !== 'OK') return fail(r.code || 'PROTO', `${r.code} ${r.text}`);
      if (!r.fields.session || !(Number(r.fields.ttl) > 0)) return fail('PROTO', 'bad HELLO reply');
      if (this._closing) {
        sock.end(QUIT);
        return fail('CLOSED', 'the client is closed', false);
      }
      clearTimeout(timer);
      link.up = true;
      this._install(link, r, sent, resume && r.fields.resumed === '1');
      return done(null);
    });
    send();
  }

  // The connection is up: adopt the session it has and send what waits.
  _install(link, r, sent, resumed) {
    if (!resumed) this._sessionGone('expired'); // the old session, if there was one, is gone
    this._link = link;
    this._cur = link.idx;
    this.session = r.fields.session;
    if (r.fields.secret || !resumed) this._secret = r.fields.secret || null;
    this._dead = false;
    this._ttl = Number(r.fields.ttl);
    this._trust = trustOf(Number(r.fields.lease) || 0);
    this._safeUntil = sent + this._ttl;
    this._backoff = BACKOFF_MIN;
    // A server in jeopardy says * JEOPARDY right after the OK of a HELLO: a resume confirms the
    // holds only with the answer of a heartbeat sent now, which comes after that event.
    if (!resumed) this._confirmed = sent;
    this._jeopardyTo(resumed ? J_HB : 0, 'connection');
    for (const req of this._reqs.values()) if (!req.sent) this._resend(req, resumed);
    if (resumed) this._heartbeat();
    else this._heartbeatLater();
    this._arm();
    this.emit('connect', { address: link.addr.text, session: this.session, resumed });
  }

  // The connection broke: requests on their way are marked; reconnect, resuming the session.
  _onClose(link) {
    if (link !== this._link) return;
    this._link = null;
    clearTimeout(this._timers.hb);
    for (const req of this._reqs.values()) if (req.sent) this._onDrop(req);
    if (this._closing) return;
    if (!this._dead) this._setJeopardy(J_CONN, true, 'connection');
    this._reconnect(0);
  }

  // A round of attempts after delay ms, then more with backoff until one succeeds.
  _reconnect(delay) {
    if (this._closing || this._link || this._connecting || this._timers.retry) return;
    this._timers.retry = setTimeout(async () => {
      this._timers.retry = null;
      this._connecting = true;
      const err = await this._connectRound();
      this._connecting = false;
      if (!err || this._closing) return;
      this._reconnect(this._backoff);
      this._backoff = Math.min(this._backoff * 2, BACKOFF_MAX);
    }, delay);
  }

  // ---------------------------------------------------------------- session and holds

  // The time within which a heartbeat must be answered: the ttl, or the trust when shorter.
  _period() {
    return this._trust > 0 && this._trust < this._ttl ? this._trust : this._ttl;
  }

  _heartbeatLater() {
    clearTimeout(this._timers.hb);
    this._timers.hb = setTimeout(() => this._heartbeat(), Math.max(1, this._period() / 3));
  }

  // A tagged PING, the cheapest request: its answer renews the session, and confirms the
  // holds when the server is not in jeopardy.
  _heartbeat() {
    if (!this._link) return;
    const n = ++this._hbSeq;
    this._hbSent.set(n, now());
    if (this._hbSent.size > 16) this._hbSent.delete(this._hbSent.keys().next().value);
    this._link.sock.write(`#hb${n} PING\n`);
    this._heartbeatLater();
  }

  _onHeartbeat(r) {
    const sent = this._hbSent.get(Number(r.tag.slice(2)));
    if (sent === undefined || r.status !== 'OK') return;
    this._safeUntil = Math.max(this._safeUntil, sent + this._ttl);
    if (!(this._jeopardy & J_BACKEND)) this._confirmed = Math.max(this._confirmed, sent);
    this._setJeopardy(J_HB, false);
    this._arm();
  }

  // When the session may have expired, or its holds lapsed unconfirmed.
  _sessionEnd() {
    const holds = this._confirmed + this._trust;
    return this._trust > 0 && holds < this._safeUntil ? holds : this._safeUntil;
  }

  // Checks the deadlines of the session and its holds, and sets a timer for the next one.
  _arm() {
    clearTimeout(this._timers.due);
    if (this.session === null || this._dead || this._closing) return;
    const t = now();
    const period = this._period();
    const late = this._safeUntil - this._ttl + period - period / 3; // 2/3 of the period unanswered
    const end = this._sessionEnd();
    if (t >= end) {
      this._sessionDue(t);
      return;
    }
    if (t >= late) this._setJeopardy(J_HB, true, 'heartbeat');
    this._timers.due = setTimeout(() => this._arm(), (t < late ? Math.min(late, end) : end) - t + 1);
  }

  // Too late: the session may be gone or its holds granted to others. Tell, and start afresh.
  _sessionDue(t) {
    const link = this._link;
    this._sessionGone(t >= this._safeUntil ? 'expired' : 'jeopardy');
    if (link) {
      this._onClose(link);
      link.sock.end(QUIT); // releases the holds if the server still has them
      setTimeout(() => link.sock.destroy(), 2000).unref();
    }
  }

  // The session is gone: every hold is lost, releases fail, the next HELLO starts a new one.
  _sessionGone(reason) {
    if (this.session === null || this._dead) return;
    this._dead = true;
    this._secret = null;
    clearTimeout(this._timers.due);
    for (const hold of this._holds) for (const name of hold._kept()) this._loseHold(hold, name, 0, reason);
    for (const req of this._reqs.values()) if (req.hold) this._finish(req, new LostError(req.hold));
    this._setJeopardy(J_HB | J_BACKEND, false);
  }

  _loseHold(hold, name, token, reason) {
    const info = hold._lose(name, token, reason);
    if (info) this.emit('lost', info);
  }

  _jeopardyTo(mask, reason) {
    const old = this._jeopardy;
    this._jeopardy = mask;
    if (!old && mask) this.emit('jeopardy', reason);
    else if (old && !mask) this.emit('safe');
  }

  _setJeopardy(bits, on, reason) {
    this._jeopardyTo(on ? this._jeopardy | bits : this._jeopardy & ~bits, reason);
  }

  _onEvent(r) {
    const reason = r.fields.reason;
    if (r.status === 'LOST') {
      const token = Number(r.fields.token) || 0;
      for (const hold of this._holds) this._loseHold(hold, r.args[0], token, reason || 'expired');
    } else if (r.status === 'JEOPARDY') {
      this._setJeopardy(J_BACKEND, true, 'backend');
    } else if (r.status === 'SAFE') {
      this._setJeopardy(J_BACKEND, false);
      this._heartbeat(); // its answer confirms the holds
    } else if (r.status === 'BYE' && reason !== 'shutdown') {
      this._sessionGone(reason || 'expired');
    }
    // BYE reason=shutdown: the session stays in Redis; it is resumed once the connection drops.
  }

  _onLine(link, line) {
    if (link !== this._link) return;
    const r = w.parseLine(line);
    if (r.event) this._onEvent(r);
    else if (r.tag.startsWith('hb')) this._onHeartbeat(r);
    else if (this._reqs.has(r.tag)) this._onReply(this._reqs.get(r.tag), r);
  }

  // ---------------------------------------------------------------- requests

  // Sends body tagged (with id= when o.id) and resolves with o.parse(reply), called as the
  // reply is read. o: wait (ms, Infinity), id, parse, undo (the request that gives a late
  // grant back), hold (released by it), internal (nobody waits), quit, timeout.
  _request(body, o = {}) {
    return new Promise((resolve, reject) => {
      const req = { ...o, tag: `c${++this._seq}`, verb: body.split(' ', 1)[0], body, resolve, reject };
      Object.assign(req, { started: now(), sent: false, dropped: false, resent: false, abandoned: false });
      const ms = o.timeout ?? (o.wait === Infinity ? Infinity : (o.wait || 0) + this._opts.requestTimeout);
      if (ms <= TIMER_MAX) req.timer = setTimeout(() => this._giveUp(req), ms);
      this._reqs.set(req.tag, req);
      if (this._link) this._send(req);
    });
  }

  _send(req) {
    let line = `#${req.tag} ${req.body}`;
    if (req.id) line += ` id=${req.tag}`;
    if (req.wait === Infinity) line += ' wait=inf';
    else if (req.wait !== undefined) line += ` wait=${Math.max(0, Math.ceil(req.started + req.wait - now()))}`;
    if (line.length + 1 > w.LINE_MAX) {
      this._finish(req, new DlockError('TOOBIG', 'dlock: request longer than max-line'));
      return;
    }
    req.sent = true;
    this._link.sock.write(`${line}\n`);
  }

  _onReply(req, r) {
    if (req.abandoned) {
      if (r.status === 'OK' && req.undo) this._request(req.undo(r), { id: true, internal: true });
      this._finish(req);
      return;
    }
    const err = replyError(req, r);
    if (err) {
      this._finish(req, err);
      return;
    }
    try {
      this._finish(req, null, req.parse ? req.parse(r) : undefined);
    } catch (e) {
      this._finish(req, e);
    }
  }

  _finish(req, err, value) {
    this._reqs.delete(req.tag);
    clearTimeout(req.timer);
    if (req.internal || req.abandoned) return;
    if (err) req.reject(err);
    else req.resolve(value);
  }

  // No reply in time. A grant that comes later is given back.
  _giveUp(req) {
    if (req.sent && req.undo) req.abandoned = true;
    else this._reqs.delete(req.tag);
    if (!req.internal) req.reject(new DlockError('CONN', `dlock: no reply to ${req.verb} in time`));
  }

  // The connection broke while req was on its way: it is sent again once connected.
  _onDrop(req) {
    req.sent = false;
    if (req.quit) {
      this._finish(req);
    } else if (req.verb === 'COUNTDOWN') {
      this._finish(req, new DlockError('CONN', 'dlock: connection lost; the COUNTDOWN may have been done'));
    } else if (!req.id && (req.internal || req.abandoned)) {
      this._finish(req);
    } else {
      req.dropped = true;
    }
  }

  _resend(req, resumed) {
    if (req.dropped && !resumed && (req.internal || req.abandoned)) {
      this._finish(req); // the old session's grants and releases are moot
      return;
    }
    req.resent = req.resent || req.dropped;
    req.dropped = false;
    this._send(req);
  }

  _usable() {
    if (this._closing) throw closedError();
  }

  // The owner to send: the one given, else a fresh one that only this hold has.
  _owner(owner) {
    if (owner === undefined) return { owner: `node.${++this._owners}`, own: true };
    return { owner: w.checkValue('owner', owner), own: false };
  }

  _track(hold) {
    this._holds.add(hold);
    return hold;
  }

  // Sends body, the UNLOCK or RELEASE of hold, and forgets the hold. A hold that was lost is
  // LostError; what the server may still have of it is given back by the requests of rest.
  async _giveBack(hold, body, rest = []) {
    this._usable();
    if (hold.released) throw new DlockError('NOTHELD', `dlock: ${hold.names.join(',')} is not held`);
    if (hold.lost) {
      this._forget(hold);
      if (!this._dead) for (const b of rest) this._request(b, { id: true, internal: true });
      throw new LostError(hold);
    }
    try {
      await this._request(body, { id: true, hold });
    } catch (e) {
      if (e.code === 'NOTHELD' || e.code === 'LOST') this._forget(hold);
      throw e;
    }
    this._forget(hold);
  }

  _forget(hold) {
    hold.released = true;
    this._holds.delete(hold);
  }

  // UNLOCK of several names is all or nothing: the names left of a lost hold go one by one.
  _unlock(hold) {
    const tail = `${hold.shared ? ' shared' : ''}${hold._own ? ' all' : ''}${ownerArg(hold.owner)}`;
    const rest = hold._kept().map((name) => `UNLOCK ${name}${tail}`);
    return this._giveBack(hold, `UNLOCK ${hold.names.join(' ')}${tail}`, rest);
  }

  _release(hold) {
    const permits = hold._own ? hold.held : hold.permits;
    return this._giveBack(hold, `RELEASE ${hold.name} permits=${permits}${ownerArg(hold.owner)}`);
  }

  // ---------------------------------------------------------------- the verbs

  /** LOCK: resolves with a LockHold; BusyError, TimeoutError or DlockError otherwise. */
  async lock(names, { wait = 0, shared = false, lease, owner } = {}) {
    this._usable();
    names = [].concat(names).map(w.checkName);
    if (names.length < 1 || names.length > 64 || new Set(names).size !== names.length) {
      throw new TypeError('dlock: lock takes 1 to 64 different names');
    }
    const who = this._owner(owner);
    const mode = shared ? ' shared' : '';
    let body = `LOCK ${names.join(' ')}${mode}`;
    if (lease !== undefined) body += ` lease=${w.checkDuration('lease', lease)}`;
    body += ownerArg(who.owner);
    return this._request(body, {
      wait: w.checkDuration('wait', wait, { zero: true, inf: true }),
      id: true,
      parse: (r) => {
        const [tokens, counts] = [numbers(r, 'token', names.length), numbers(r, 'count', names.length)];
        return this._track(new LockHold(this, { names, tokens, counts, shared: Boolean(shared), ...who }));
      },
      undo: () => `UNLOCK ${names.join(' ')}${mode}${who.own ? ' all' : ''}${ownerArg(who.owner)}`,
    });
  }

  /** ACQUIRE: resolves with a SemaphoreHold; BusyError, TimeoutError or DlockError otherwise. */
  async acquire(name, { limit, permits = 1, wait = 0, lease, owner } = {}) {
    this._usable();
    w.checkName(name);
    const who = this._owner(owner);
    let body = `ACQUIRE ${name} limit=${w.checkCount('limit', limit)}`;
    body += ` permits=${w.checkCount('permits', permits)}`;
    if (lease !== undefined) body += ` lease=${w.checkDuration('lease', lease)}`;
    body += ownerArg(who.owner);
    return this._request(body, {
      wait: w.checkDuration('wait', wait, { zero: true, inf: true }),
      id: true,
      parse: (r) => {
        const [[token], [held]] = [numbers(r, 'token', 1), numbers(r, 'held', 1)];
        const free = Number(r.fields.free);
        return this._track(new SemaphoreHold(this, { name, token, permits, held, free, ...who }));
      },
      undo: (r) => `RELEASE ${name} permits=${who.own ? r.fields.held : permits}${ownerArg(who.owner)}`,
    });
  }

  /** LATCH: creates the latch unless it exists; resolves with its count. */
  async latch(name, count, { ttl } = {}) {
    this._usable();
    let body = `LATCH ${w.checkName(name)} count=${w.checkCount('count', count, 0)}`;
    if (ttl !== undefined) body += ` ttl=${w.checkDuration('ttl', ttl)}`;
    return this._request(body, { parse: (r) => numbers(r, 'count', 1)[0] });
  }

  /** COUNTDOWN: resolves with the count left. */
  async countdown(name, n = 1) {
    this._usable();
    const body = `COUNTDOWN ${w.checkName(name)} n=${w.checkCount('n', n)}`;
    return this._request(body, { parse: (r) => numbers(r, 'count', 1)[0] });
  }

  /** AWAIT: resolves once the latch is at 0; TimeoutError when wait runs out first. */
  async awaitLatch(name, { wait = 0 } = {}) {
    this._usable();
    const body = `AWAIT ${w.checkName(name)}`;
    return this._request(body, { wait: w.checkDuration('wait', wait, { zero: true, inf: true }) });
  }

  /** STATUS: who holds name and who waits, as the server's JSON object. */
  async status(name) {
    this._usable();
    return this._request(`STATUS ${w.checkName(name)}`, { parse: json });
  }

  /** INFO: the server's counters, as its JSON object. */
  async info() {
    this._usable();
    return this._request('INFO', { parse: json });
  }

  /** Ends the session with QUIT (every hold is released at once) and closes the connection. */
  close() {
    if (!this._closed) this._closed = this._close();
    return this._closed;
  }

  async _close() {
    this._closing = true;
    clearTimeout(this._timers.retry);
    clearTimeout(this._timers.due);
    for (const req of this._reqs.values()) this._finish(req, closedError());
    const link = this._link;
    if (link && !this._dead) {
      const timeout = Math.min(this._opts.requestTimeout, 2000);
      await this._request('QUIT', { quit: true, timeout }).catch(() => {});
    }
    clearTimeout(this._timers.hb);
    this._link = null;
    if (link) link.sock.destroy();
    for (const hold of this._holds) hold.released = true;
    this._holds.clear();
  }
}

module.exports = { Client };
