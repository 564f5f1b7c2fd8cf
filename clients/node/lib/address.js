'use strict';
// address.js - dlockd addresses in DLOCK_ADDR syntax, as libdlock reads them.

const DEFAULT_PORT = 7411;

/**
 * Parses one address: HOST:PORT, HOST, [IPV6]:PORT, [IPV6] or unix:PATH, any of the TCP forms
 * after tls://. The port defaults to 7411. Returns {text, host, port, tls} or {text, path}.
 */
function parseAddress(text) {
  const bad = () => new TypeError(`dlock: bad address '${text}'`);
  if (text.startsWith('unix:')) {
    if (text.length === 5) throw bad();
    return { text, path: text.slice(5) };
  }
  const tls = text.startsWith('tls://');
  const rest = tls ? text.slice(6) : text;
  let host = rest;
  let port;
  if (rest.startsWith('[')) {
    const v6 = /^\[([^\]]+)\](?::(.*))?$/.exec(rest);
    if (!v6) throw bad();
    [, host, port] = v6;
  } else if (rest.split(':').length === 2) {
    [host, port] = rest.split(':'); // a bare IPv6 address has several colons, and no port
  }
  const badPort = port !== undefined && !(/^\d{1,5}$/.test(port) && port > 0 && port < 65536);
  if (!host || badPort) throw bad();
  return { text, host, port: port === undefined ? DEFAULT_PORT : Number(port), tls };
}

/**
 * The address list to try, in order: an array of addresses or a string of them separated by
 * commas or blanks. Without one, $DLOCK_ADDR, else 127.0.0.1:7411.
 */
function parseAddresses(spec) {
  if (spec === undefined || spec === null) spec = process.env.DLOCK_ADDR || `127.0.0.1:${DEFAULT_PORT}`;
  const texts = [].concat(spec).flatMap((s) => String(s).split(/[\s,]+/)).filter(Boolean);
  if (texts.length === 0) throw new TypeError('dlock: no dlockd address');
  return texts.map(parseAddress);
}

module.exports = { parseAddresses, DEFAULT_PORT };
