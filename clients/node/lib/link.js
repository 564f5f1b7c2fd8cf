'use strict';
// link.js - the socket under a session: TCP, unix or TLS, read as lines.

const fs = require('node:fs');
const net = require('node:net');
const tls = require('node:tls');

const REPLY_MAX = 1 << 20; // longest line accepted from the server

/**
 * Node's tls.connect options from the client's: ca, cert and key name files (or hold their
 * contents) and default to $DLOCK_TLS_CA, $DLOCK_TLS_CERT and $DLOCK_TLS_KEY (null: none).
 */
function tlsOptions(o = {}) {
  const read = (v, env) => {
    const f = v === undefined ? process.env[env] : v;
    return typeof f === 'string' && f !== '' ? fs.readFileSync(f) : f || undefined;
  };
  return {
    ...o,
    ca: read(o.ca, 'DLOCK_TLS_CA'),
    cert: read(o.cert, 'DLOCK_TLS_CERT'),
    key: read(o.key, 'DLOCK_TLS_KEY'),
  };
}

/** A socket connected to addr (from parseAddresses) within ms; tlsOpts for tls:// ones. */
function dial(addr, tlsOpts, ms) {
  return new Promise((resolve, reject) => {
    const where = addr.path ? { path: addr.path } : { host: addr.host, port: addr.port };
    const sock = addr.tls
      ? tls.connect({ servername: net.isIP(addr.host) ? undefined : addr.host, ...tlsOpts, ...where })
      : net.connect(where);
    const fail = (e) => {
      clearTimeout(timer);
      sock.destroy();
      reject(e);
    };
    const timer = setTimeout(fail, Math.max(0, ms), new Error('timed out'));
    sock.once('error', fail);
    sock.once(addr.tls ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      sock.removeListener('error', fail);
      sock.setNoDelay(true);
      resolve(sock);
    });
  });
}

/** Calls onLine with every line sock receives (without its \r\n) until sock is destroyed. */
function readLines(sock, onLine) {
  let buf = '';
  sock.setEncoding('latin1');
  sock.on('data', (chunk) => {
    buf += chunk;
    for (let nl = buf.indexOf('\n'); nl >= 0 && !sock.destroyed; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      onLine(line.endsWith('\r') ? line.slice(0, -1) : line);
    }
    if (buf.length > REPLY_MAX) sock.destroy();
  });
}

module.exports = { tlsOptions, dial, readLines };
