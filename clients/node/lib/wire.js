'use strict';
// wire.js - the protocol's lines: reading replies and events, checking what goes into requests.

const DURATION_MAX = 2 ** 31 - 1; // ms, the longest duration the protocol takes
const LINE_MAX = 4096;            // the server's default max-line, terminator included

/**
 * One line from dlockd as {event, tag, status, code, text, args, fields}: `* LOST x token=1`
 * is {event: true, status: 'LOST', args: ['x'], fields: {token: '1'}}; `#c1 ERR NOTHELD ...`
 * has tag 'c1', code 'NOTHELD' and the message in text; `OK {...}` keeps the JSON in text.
 */
function parseLine(line) {
  const r = { event: false, tag: '', status: '', code: '', text: '', args: [], fields: Object.create(null) };
  let rest = line;
  if (rest.startsWith('*')) {
    r.event = true;
    rest = rest.slice(1).trimStart();
  } else if (rest.startsWith('#')) {
    const sp = rest.indexOf(' ');
    r.tag = rest.slice(1, sp < 0 ? rest.length : sp);
    rest = sp < 0 ? '' : rest.slice(sp + 1);
  }
  const [status, ...words] = rest.split(' ');
  r.status = status;
  if (status === 'ERR') {
    r.code = words[0] || '';
    r.text = words.slice(1).join(' ');
  } else if (words[0] && words[0].startsWith('{')) {
    r.text = words.join(' ');
  } else {
    for (const w of words) {
      const eq = w.indexOf('=');
      if (eq > 0) r.fields[w.slice(0, eq)] = w.slice(eq + 1);
      else if (w) r.args.push(w);
    }
  }
  return r;
}

// Names of locks, semaphores and latches: 1-200 printable bytes, no space, no '='.
const NAME = /^[\x21-\x3c\x3e-\x7e]{1,200}$/;
// Owners and client names: printable, no space (an owner may be empty).
const VALUE = /^[\x21-\x7e]{0,200}$/;

function checkName(name) {
  if (typeof name === 'string' && NAME.test(name)) return name;
  throw new TypeError(`dlock: bad name ${JSON.stringify(name)}`);
}

function checkValue(what, v) {
  if (typeof v !== 'string' || !VALUE.test(v)) throw new TypeError(`dlock: bad ${what} ${JSON.stringify(v)}`);
  return v;
}

/** A count or a number of permits: an integer from min up to 2^31-1. */
function checkCount(what, n, min = 1) {
  if (!Number.isInteger(n) || n < min || n > DURATION_MAX) throw new TypeError(`dlock: bad ${what} ${n}`);
  return n;
}

/** A duration in ms (wait may be 0 or Infinity). */
function checkDuration(what, ms, { zero = false, inf = false } = {}) {
  if (ms === Infinity && inf) return ms;
  if (!Number.isInteger(ms) || ms < (zero ? 0 : 1) || ms > DURATION_MAX) {
    throw new TypeError(`dlock: bad ${what} ${ms}`);
  }
  return ms;
}

module.exports = { parseLine, checkName, checkValue, checkCount, checkDuration, LINE_MAX };
