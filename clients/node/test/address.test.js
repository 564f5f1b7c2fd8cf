'use strict';
// address.test.js - DLOCK_ADDR syntax, as libdlock reads it.

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { parseAddresses } = require('..');

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
