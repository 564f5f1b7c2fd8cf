'use strict';
// unit.test.js - without a server: DLOCK_ADDR syntax as libdlock reads it, and index.d.ts
// against what index.js exports.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');
const dlock = require('..');

const { parseAddresses } = dlock;

test('address forms and defaults', () => {
  assert.deepEqual(parseAddresses('h1:1, h2 [::1]:3,[fe80::1] ::1'), [
    { text: 'h1:1', host: 'h1', port: 1, tls: false },
    { text: 'h2', host: 'h2', port: 7411, tls: false },
    { text: '[::1]:3', host: '::1', port: 3, tls: false },
    { text: '[fe80::1]', host: 'fe80::1', port: 7411, tls: false },
    { text: '::1', host: '::1', port: 7411, tls: false },
  ]);
  assert.deepEqual(parseAddresses(['unix:/run/d.sock', 'tls://db:7412']), [
    { text: 'unix:/run/d.sock', path: '/run/d.sock' },
    { text: 'tls://db:7412', host: 'db', port: 7412, tls: true },
  ]);
  assert.deepEqual(parseAddresses('tls://[::1]'), [{ text: 'tls://[::1]', host: '::1', port: 7411, tls: true }]);
});

test('$DLOCK_ADDR, then 127.0.0.1:7411', () => {
  const saved = process.env.DLOCK_ADDR;
  try {
    process.env.DLOCK_ADDR = 'a:1,b:2';
    assert.deepEqual(parseAddresses().map((a) => a.text), ['a:1', 'b:2']);
    delete process.env.DLOCK_ADDR;
    assert.deepEqual(parseAddresses(), [{ text: '127.0.0.1:7411', host: '127.0.0.1', port: 7411, tls: false }]);
  } finally {
    if (saved === undefined) delete process.env.DLOCK_ADDR;
    else process.env.DLOCK_ADDR = saved;
  }
});

test('malformed addresses', () => {
  for (const bad of ['h:', ':1', 'h:x', 'h:0', 'h:65536', '[::1', '[::1]x', 'unix:', 'tls://', ' , ']) {
    assert.throws(() => parseAddresses(bad), TypeError, bad);
  }
});

test('index.d.ts declares what index.js exports, and the methods of its classes', () => {
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  const declared = new Set([...dts.matchAll(/^export (?:class|function) (\w+)/gm)].map((m) => m[1]));
  assert.deepEqual([...declared].sort(), Object.keys(dlock).sort());
  for (const cls of ['Client', 'LockHold', 'SemaphoreHold']) {
    const body = dts.slice(dts.indexOf(`export class ${cls} `)).split('\n}\n')[0];
    const methods = [...body.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]);
    assert.ok(methods.length > 0);
    for (const m of methods) assert.equal(typeof dlock[cls].prototype[m], 'function', `${cls}.${m}`);
  }
});
