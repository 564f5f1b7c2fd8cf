'use strict';
// basic.test.js - the verbs against one real dlockd: locks, tokens, BUSY and TIMEOUT, shared
// and multi-name locks, owners, leases, semaphores, latches, errors, heartbeats, close.

const assert = require('node:assert/strict');
const path = require('node:path');
const { before, after } = require('node:test');
const dlock = require('..');
const { Rig, until, sleep, once } = require('./rig');

const rig = new Rig();
const clients = [];
let daemon;
let a;
let b;

async function client(name, opts = {}) {
  const c = await dlock.connect(daemon.addr, { name, ...opts });
  clients.push(c);
  return c;
}

const waiters = async (name) => (await a.status(name)).waiters;

before(async () => {
  const redis = await rig.redis();
  daemon = await rig.dlockd(redis, '--listen', `unix:${path.join(rig.dir, 'dlockd.sock')}`);
  a = await client('client-a');
  b = await client('client-b');
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  rig.stop();
});

rig.test('lock and unlock; every new hold gets a larger fencing token', async () => {
  const h1 = await a.lock('tok');
  assert.equal(h1.count, 1);
  assert.ok(Number.isSafeInteger(h1.token) && h1.token > 0);
  const st = await b.status('tok');
  assert.equal(st.type, 'lock');
  assert.deepEqual([st.holders[0].session, st.holders[0].client, st.holders[0].token], [a.session, 'client-a', h1.token]);
  await h1.unlock();
  const h2 = await b.lock('tok');
  assert.ok(h2.token > h1.token);
  await h2.unlock();
  const h3 = await a.lock('tok');
  assert.ok(h3.token > h2.token);
  await h3.unlock();
  assert.equal((await a.status('tok')).type, null);
  await assert.rejects(h3.unlock(), { code: 'NOTHELD' });
});

rig.test('BUSY without wait, TIMEOUT with one, the waiter granted on unlock', async () => {
  const h = await a.lock('bz');
  await assert.rejects(b.lock('bz'), (e) => e instanceof dlock.BusyError && e instanceof dlock.DlockError &&
    e.code === 'BUSY' && e.holder === 'client-a' && e.ttl > 0);
  await assert.rejects(b.lock('bz', { wait: 300 }), dlock.TimeoutError);
  assert.equal((await a.status('bz')).holders.length, 1); // the timed-out request holds nothing
  const waiting = b.lock('bz', { wait: 60000 });
  await until('b queued', async () => (await waiters('bz')) === 1);
  await h.unlock();
  const hb = await waiting;
  assert.ok(hb.token > h.token);
  assert.equal((await a.status('bz')).holders[0].session, b.session);
  await hb.unlock();
});

rig.test('every lock() is its own owner unless an owner is given: then it re-enters', async () => {
  const h = await a.lock('own');
  await assert.rejects(a.lock('own'), dlock.BusyError); // the same client, another owner
  const r1 = await a.lock('own2', { owner: 'worker-1' });
  const r2 = await a.lock('own2', { owner: 'worker-1' });
  assert.deepEqual([r2.token, r2.count], [r1.token, 2]);
  const st = await a.status('own2');
  assert.deepEqual([st.holders[0].owner, st.holders[0].count], ['worker-1', 2]);
  await r2.unlock();
  assert.equal((await a.status('own2')).holders[0].count, 1);
  await r1.unlock();
  await h.unlock();
  assert.equal((await a.status('own2')).type, null);
});

rig.test('shared locks: readers together, a writer alone, a queued writer first', async () => {
  const c = await client('client-c');
  const s1 = await a.lock('rw', { shared: true });
  const s2 = await b.lock('rw', { shared: true });
  const st = await a.status('rw');
  assert.deepEqual(st.holders.map((x) => x.mode), ['shared', 'shared']);
  await assert.rejects(c.lock('rw'), dlock.BusyError);
  const writer = c.lock('rw', { wait: 60000 });
  await until('writer queued', async () => (await waiters('rw')) === 1);
  await assert.rejects(a.lock('rw', { shared: true }), dlock.BusyError); // no writer starvation
  await s1.unlock();
  await s2.unlock();
  const x = await writer;
  assert.equal(x.shared, false);
  assert.ok(x.token > s2.token);
  await x.unlock();
});

rig.test('several names: all or nothing, one token each', async () => {
  const hb = await b.lock('m2');
  await assert.rejects(a.lock(['m1', 'm2', 'm3']), dlock.BusyError);
  assert.equal((await a.status('m1')).type, null); // no partial hold
  await hb.unlock();
  const m = await a.lock(['m1', 'm2', 'm3']);
  assert.deepEqual(m.names, ['m1', 'm2', 'm3']);
  assert.deepEqual(m.counts, [1, 1, 1]);
  assert.equal(m.token, m.tokens[0]);
  assert.ok(m.tokens[1] > hb.token);
  for (const [i, name] of m.names.entries()) {
    assert.equal((await b.status(name)).holders[0].token, m.tokens[i]);
  }
  await m.unlock();
  for (const name of m.names) assert.equal((await b.status(name)).type, null);
});

rig.test('a lease ends a hold: the hold and the client say it is lost', async () => {
  const h = await a.lock('leased', { lease: 300 });
  const [info, seen] = await Promise.all([once(h, 'lost'), once(a, 'lost')]);
  assert.deepEqual(info, { name: 'leased', token: h.token, reason: 'lease', hold: h });
  assert.equal(seen, info);
  assert.equal(h.lost, 'lease');
  await assert.rejects(h.unlock(), (e) => e instanceof dlock.LostError && e.code === 'LOST' && e.hold === h);
  await assert.rejects(h.unlock(), { code: 'NOTHELD' });
  const again = await b.lock('leased');
  assert.ok(again.token > h.token);
  await again.unlock();
});

rig.test('semaphores: limit, BUSY with free=, MISMATCH, FIFO waiters', async () => {
  const c = await client('client-c2');
  const p1 = await a.acquire('sem', { limit: 2 });
  assert.deepEqual([p1.permits, p1.held, p1.free], [1, 1, 1]);
  const p2 = await b.acquire('sem', { limit: 2 });
  assert.ok(p2.token > p1.token);
  await assert.rejects(c.acquire('sem', { limit: 2 }), (e) => e instanceof dlock.BusyError && e.free === 0);
  await assert.rejects(c.acquire('sem', { limit: 3 }), { code: 'MISMATCH' });
  const waiting = c.acquire('sem', { limit: 2, wait: 60000 });
  await until('acquire queued', async () => (await waiters('sem')) === 1);
  await p1.release();
  const p3 = await waiting;
  assert.ok(p3.token > p2.token);
  const st = await a.status('sem');
  assert.deepEqual([st.type, st.limit, st.free, st.holders.length], ['semaphore', 2, 0, 2]);
  await p2.release();
  await p3.release();
  assert.equal((await a.status('sem')).type, null);
  const all = await a.acquire('sem', { limit: 3, permits: 3 }); // unused again: a new limit
  assert.deepEqual([all.held, all.free], [3, 0]);
  await all.release();
});

rig.test('latches: create once, count down, await', async () => {
  assert.equal(await a.latch('batch', 2), 2);
  assert.equal(await b.latch('batch', 5), 2); // exists: its count
  await assert.rejects(a.awaitLatch('batch'), dlock.TimeoutError);
  const done = b.awaitLatch('batch', { wait: 60000 });
  assert.equal(await a.countdown('batch'), 1);
  assert.equal((await a.status('batch')).count, 1);
  assert.equal(await a.countdown('batch'), 0);
  assert.equal(await done, undefined);
  await a.awaitLatch('batch'); // gone: at once
  assert.equal(await a.countdown('batch'), 0);
});

rig.test('errors: the server code, and bad arguments refused before sending', async () => {
  await a.latch('typed', 1);
  await assert.rejects(a.lock('typed'), (e) => e instanceof dlock.DlockError && e.code === 'WRONGTYPE');
  await assert.rejects(a.acquire('typed', { limit: 1 }), { code: 'WRONGTYPE' });
  await a.countdown('typed');
  await assert.rejects(a.lock('two words'), TypeError);
  await assert.rejects(a.lock('x\n#z QUIT'), TypeError);
  await assert.rejects(a.lock('x', { owner: 'o wait=inf' }), TypeError);
  await assert.rejects(a.lock('x=y'), TypeError);
  await assert.rejects(a.lock(['d', 'd']), TypeError);
  await assert.rejects(a.lock('x', { wait: -1 }), TypeError);
  await assert.rejects(a.acquire('x', {}), TypeError); // limit is required
  await a.status('x'); // still usable
});

rig.test('heartbeats keep a short session and its holds alive while it waits', async () => {
  const c = await client('short', { ttl: 2000 });
  let reconnects = 0;
  c.on('connect', () => reconnects++);
  const sid = c.session;
  const held = await c.lock('hb-held');
  const blocker = await a.lock('hb-wait');
  const waiting = c.lock('hb-wait', { wait: 60000 });
  await sleep(5000); // 2.5 ttl: a waiting request does not renew the session, heartbeats do
  await blocker.unlock();
  const got = await waiting;
  assert.equal(c.session, sid);
  assert.equal(reconnects, 0);
  assert.equal(held.lost, null);
  assert.equal((await a.status('hb-held')).holders[0].session, sid);
  await got.unlock();
  await held.unlock();
}, 40000);

rig.test('DLOCK_ADDR, a unix socket, and a failed connect', async () => {
  process.env.DLOCK_ADDR = `127.0.0.1:1,unix:${path.join(rig.dir, 'dlockd.sock')}`;
  try {
    const c = await dlock.connect({ name: 'by-env' });
    clients.push(c);
    const h = await c.lock('env');
    assert.equal((await a.status('env')).holders[0].client, 'by-env');
    await h.unlock();
  } finally {
    delete process.env.DLOCK_ADDR;
  }
  await assert.rejects(dlock.connect('127.0.0.1:1', { connectTimeout: 3000 }),
    (e) => e.code === 'CONN' && /127\.0\.0\.1:1: ECONNREFUSED/.test(e.message));
});

rig.test('close ends the session: its holds are free at once, later calls are refused', async () => {
  const c = await dlock.connect(daemon.addr, { name: 'closer' });
  const h = await c.lock('closing');
  await c.acquire('closing-sem', { limit: 1 });
  await c.close();
  assert.equal(h.released, true);
  const next = await a.lock('closing');
  assert.ok(next.token > h.token);
  await next.unlock();
  await (await a.acquire('closing-sem', { limit: 1 })).release();
  await assert.rejects(c.lock('closing'), { code: 'CLOSED' });
  await c.close(); // twice is fine
});
