'use strict';
// tls.test.js - tls:// addresses, through a TLS-terminating relay (made here with Node's tls)
// in front of a real dlockd: certificates from $DLOCK_TLS_*, made here with openssl; a client
// certificate is required; reconnects go through TLS again and resume the session.

const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const tls = require('node:tls');
const { before, after } = require('node:test');
const dlock = require('..');
const { Rig, until, once } = require('./rig');

const rig = new Rig();
let daemon;
let relay;
const file = (name) => path.join(rig.dir, name);

// A CA, and certificates it signs: the relay's (for 127.0.0.1) and the client's.
function makeCertificates() {
  const openssl = (...args) => execFileSync('openssl', args, { cwd: rig.dir, stdio: 'ignore' });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of ['ca', 'other-ca']) {
    openssl('req', '-x509', ...key, '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '2', '-subj', `/CN=${ca}`);
  }
  const certs = {
    server: 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n',
    client: 'extendedKeyUsage=clientAuth\n',
  };
  for (const [name, ext] of Object.entries(certs)) {
    fs.writeFileSync(file(`${name}.ext`), ext);
    openssl('req', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=dlock-${name}`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial',
      '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
  }
}

// A TLS server that wants a client certificate of the CA and passes the bytes on to port.
function startRelay(port) {
  const r = { peers: [], socks: new Set() };
  r.server = tls.createServer({
    key: fs.readFileSync(file('server.key')),
    cert: fs.readFileSync(file('server.crt')),
    ca: fs.readFileSync(file('ca.crt')),
    requestCert: true,
    rejectUnauthorized: true,
  }, (s) => {
    r.peers.push(s.getPeerCertificate().subject.CN);
    const up = net.connect(port, '127.0.0.1');
    const end = () => { s.destroy(); up.destroy(); r.socks.delete(s); };
    r.socks.add(s);
    s.pipe(up).pipe(s);
    for (const x of [s, up]) x.on('error', end).on('close', end);
  });
  r.server.on('tlsClientError', () => {});
  return new Promise((resolve) => r.server.listen(0, '127.0.0.1', () => {
    r.addr = `tls://127.0.0.1:${r.server.address().port}`;
    resolve(r);
  }));
}

before(async () => {
  makeCertificates();
  daemon = await rig.dlockd(await rig.redis());
  relay = await startRelay(daemon.port);
});

after(() => {
  relay.server.close();
  rig.stop();
});

rig.test('a session over TLS with the files of $DLOCK_TLS_*, resumed after a broken link', async () => {
  Object.assign(process.env, {
    DLOCK_ADDR: relay.addr,
    DLOCK_TLS_CA: file('ca.crt'),
    DLOCK_TLS_CERT: file('client.crt'),
    DLOCK_TLS_KEY: file('client.key'),
  });
  let c;
  try {
    c = await dlock.connect({ name: 'tls-client' });
  } finally {
    for (const k of ['DLOCK_ADDR', 'DLOCK_TLS_CA', 'DLOCK_TLS_CERT', 'DLOCK_TLS_KEY']) delete process.env[k];
  }
  const h = await c.lock('over-tls');
  const st = await c.status('over-tls');
  assert.deepEqual([st.holders[0].client, st.holders[0].token], ['tls-client', h.token]);
  assert.deepEqual(relay.peers, ['dlock-client']);
  const sid = c.session;
  const other = await dlock.connect(daemon.addr, { name: 'plain' });
  const blocker = await other.lock('queued');
  const waiting = c.lock('queued', { wait: 60000 });
  await until('queued', async () => (await other.status('queued')).waiters === 1);
  const resumed = once(c, 'connect');
  for (const s of relay.socks) s.destroy(); // the LOCK that waits is sent again, with its id
  assert.deepEqual(await resumed, { address: relay.addr, session: sid, resumed: true });
  assert.deepEqual(relay.peers, ['dlock-client', 'dlock-client']);
  assert.equal(h.lost, null);
  await blocker.unlock();
  const got = await waiting;
  const st2 = await other.status('queued');
  assert.deepEqual([st2.holders[0].session, st2.holders[0].count, st2.waiters], [sid, 1, 0]);
  await got.unlock();
  await h.unlock();
  assert.equal((await c.status('over-tls')).type, null);
  await c.close();
  await other.close();
});

rig.test('no client certificate, or a server the CA did not sign: no connection', async () => {
  const opts = (tlsOpts) => ({ tls: tlsOpts, connectTimeout: 3000 });
  await assert.rejects(dlock.connect(relay.addr, opts({ ca: file('ca.crt'), cert: null, key: null })), { code: 'CONN' });
  const wrongCa = { ca: file('other-ca.crt'), cert: file('client.crt'), key: file('client.key') };
  await assert.rejects(dlock.connect(relay.addr, opts(wrongCa)), (e) => e.code === 'CONN' && /SIGNATURE|CERT/.test(e.message));
  assert.deepEqual(relay.peers, ['dlock-client', 'dlock-client']); // neither got through
});
