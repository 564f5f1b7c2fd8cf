'use strict';
// failover.test.js - sessions across daemons: a daemon killed under a held lock (the client
// resumes on the other one, the hold survives with its token, a waiting request is sent again),
// the operator's KILL (the hold is reported lost), and the trust window running out while no
// daemon answers (the holds are reported lost before their Redis lease could end).

const assert = require('node:assert/strict');
const { before, after } = require('node:test');
const dlock = require('..');
const { Rig, until, once } = require('./rig');

const rig = new Rig();
const clients = [];
let A;
let B;
let C;

async function client(addrs, name) {
  const c = await dlock.connect(addrs, { name });
  clients.push(c);
  return c;
}

before(async () => {
  const redis = await rig.redis();
  // lock-lease 6s: holds are trusted for 3.4 s without an answer, room for a loaded machine.
  [A, B] = [await rig.dlockd(redis, '--lock-lease', '6s'), await rig.dlockd(redis, '--lock-lease', '6s')];
  C = await rig.dlockd(await rig.redis(), '--lock-lease', '3s');
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  rig.stop();
});

rig.test('a daemon killed under a held lock: resumed on the other, same token', async () => {
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
