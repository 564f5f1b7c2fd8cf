'use strict';
// failover.test.js - sessions across daemons: a daemon killed under a held lock (the client
// resumes on the other one, the hold survives with its token, a waiting request is sent again);
// the same after the daemon said JEOPARDY (the other one's answers end it); the operator's KILL
// (the hold is reported lost); the trust window running out while the daemon cannot reach
// Redis, then while no daemon answers (the holds are reported lost before their Redis lease
// could end).

const assert = require('node:assert/strict');
const { before, after } = require('node:test');
const dlock = require('..');
const { Rig, until, sleep, once } = require('./rig');

const rig = new Rig();
const clients = [];
let redis;
let B;
let C;
let redisC;

async function client(addrs, name) {
  const c = await dlock.connect(addrs, { name });
  clients.push(c);
  return c;
}

before(async () => {
  redis = await rig.redis();
  // lock-lease 6s: holds are trusted for 3.4 s without an answer, room for a loaded machine.
  B = await rig.dlockd(redis, '--lock-lease', '6s');
  redisC = await rig.redis();
  C = await rig.dlockd(redisC, '--lock-lease', '3s', '--backend-timeout', '1s');
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  rig.stop();
});

rig.test('a daemon killed under a held lock: resumed on the other, same token', async () => {
  const A = await rig.dlockd(redis, '--lock-lease', '6s');
  const c = await client([A.addr, B.addr], 'survivor');
  const other = await client(B.addr, 'other');
  const h = await c.lock('fo');
  const blocker = await other.lock('fo-wait');
  const waiting = c.lock('fo-wait', { wait: 60000 });
  await until('c queued', async () => (await other.status('fo-wait')).waiters === 1);
  const sid = c.session;
  let lost = null;
  c.on('lost', (info) => { lost = info; });
  const resumed = once(c, 'connect');
  A.proc.kill('SIGKILL');
  assert.deepEqual(await resumed, { address: B.addr, session: sid, resumed: true });
  const st = await other.status('fo');
  assert.deepEqual([st.holders[0].session, st.holders[0].token], [sid, h.token]);
  await assert.rejects(other.lock('fo'), dlock.BusyError);
  await blocker.unlock(); // the wait was sent again on B, with what is left of it
  const got = await waiting;
  assert.ok(got.token > blocker.token);
  await got.unlock();
  await h.unlock();
  assert.equal(lost, null);
  const next = await other.lock('fo');
  assert.ok(next.token > h.token);
  await next.unlock();
}, 60000);

rig.test('a daemon stopped (BYE reason=shutdown): the session moves on with its holds', async () => {
  const A = await rig.dlockd(redis, '--lock-lease', '6s');
  const c = await client([A.addr, B.addr], 'moving');
  const h = await c.lock('moving');
  const sid = c.session;
  const resumed = once(c, 'connect');
  A.proc.kill('SIGTERM');
  assert.deepEqual(await resumed, { address: B.addr, session: sid, resumed: true });
  assert.equal(h.lost, null);
  assert.equal((await c.status('moving')).holders[0].token, h.token);
  await h.unlock();
});

rig.test('JEOPARDY, then its daemon killed: resumed on a daemon in touch with Redis, safe', async () => {
  const link = await rig.staller(redis.port);
  const A = await rig.dlockd(link, '--lock-lease', '6s');
  const c = await client([A.addr, B.addr], 'rescued');
  const h = await c.lock('rescued');
  const seen = [];
  c.on('jeopardy', (why) => seen.push(`jeopardy ${why}`));
  c.on('safe', () => seen.push('safe'));
  c.on('lost', (info) => seen.push(`lost ${info.reason}`));
  const jeopardy = once(c, 'jeopardy');
  link.stall(); // A cannot renew: it says * JEOPARDY once a renewal call times out
  assert.equal(await jeopardy, 'backend');
  const safe = once(c, 'safe');
  A.proc.kill('SIGKILL');
  await safe; // B answered the resume, then a heartbeat: the holds are confirmed again
  await sleep(4500); // longer than the 3.4 s the holds are trusted without a confirmation
  link.heal();
  assert.deepEqual(seen, ['jeopardy backend', 'safe']);
  assert.equal(h.lost, null);
  const st = await c.status('rescued');
  assert.deepEqual([st.holders[0].session, st.holders[0].token], [c.session, h.token]);
  await h.unlock();
}, 60000);

rig.test("the operator's KILL: the hold is lost (admin), a new session follows", async () => {
  const c = await client(B.addr, 'victim');
  const h = await c.lock('killed');
  const sid = c.session;
  const lost = once(h, 'lost');
  const fresh = once(c, 'connect');
  const op = await rig.admin(B.port);
  assert.equal(await op.request(`KILL ${sid}`), 'OK');
  op.close();
  assert.deepEqual(await lost, { name: 'killed', token: h.token, reason: 'admin', hold: h });
  await assert.rejects(h.unlock(), (e) => e instanceof dlock.LostError && e.reason === 'admin');
  const ev = await fresh;
  assert.equal(ev.resumed, false);
  assert.notEqual(c.session, sid);
  const again = await c.lock('killed');
  assert.ok(again.token > h.token);
  await again.unlock();
});

rig.test('Redis stopped: JEOPARDY, then the holds are lost although the daemon answers', async () => {
  const c = await client(C.addr, 'in-jeopardy');
  const h = await c.lock('jeopardy');
  const sid = c.session;
  const seen = [];
  c.on('jeopardy', (why) => seen.push(`jeopardy ${why}`));
  c.on('lost', (info) => seen.push(`lost ${info.reason}`));
  const lost = once(h, 'lost');
  redisC.proc.kill('SIGSTOP');
  try {
    assert.equal((await lost).reason, 'jeopardy'); // heartbeats answered in jeopardy confirm nothing
  } finally {
    redisC.proc.kill('SIGCONT');
  }
  assert.deepEqual(seen.slice(0, 2), ['jeopardy backend', 'lost jeopardy']);
  await assert.rejects(h.unlock(), dlock.LostError);
  await until('a new session', async () => c.connected && c.session !== sid);
  const again = await c.lock('jeopardy', { wait: 20000 });
  assert.ok(again.token > h.token);
  await again.unlock();
}, 60000);

rig.test('no daemon answers: the holds are lost when the trust window runs out', async () => {
  const c = await dlock.connect(C.addr, { name: 'stranded', requestTimeout: 1000 });
  clients.push(c);
  const h = await c.lock('stranded');
  const seen = [];
  c.on('jeopardy', (why) => seen.push(`jeopardy ${why}`));
  c.on('lost', (info) => seen.push(`lost ${info.reason}`));
  const lost = once(h, 'lost');
  C.proc.kill('SIGKILL');
  assert.equal((await lost).reason, 'jeopardy');
  assert.match(seen[0], /^jeopardy /);
  assert.equal(seen.at(-1), 'lost jeopardy');
  await assert.rejects(h.unlock(), dlock.LostError);
  await assert.rejects(c.lock('x', { wait: 0 }), { code: 'CONN' }); // after requestTimeout
  await c.close(); // while disconnected
}, 40000);
