'use strict';
// dlock - the Node.js client of dlockd: one session per client, fenced locks, semaphores and
// latches. README.md shows its use; proto/PROTOCOL.md in dlockd's sources the protocol.

const { Client } = require('./lib/client');
const { parseAddresses } = require('./lib/address');
const { DlockError, BusyError, TimeoutError, LostError } = require('./lib/errors');
const { LockHold, SemaphoreHold } = require('./lib/holds');

/**
 * Connects to the first address of addrs that answers (an array or a DLOCK_ADDR string;
 * default $DLOCK_ADDR, then 127.0.0.1:7411) and opens a session. connect(opts) works too.
 */
async function connect(addrs, opts) {
  if (opts === undefined && addrs !== null && typeof addrs === 'object' && !Array.isArray(addrs)) {
    [addrs, opts] = [undefined, addrs];
  }
  const client = new Client(addrs, opts);
  await client._start();
  return client;
}

module.exports = {
  connect,
  parseAddresses,
  Client,
  LockHold,
  SemaphoreHold,
  DlockError,
  BusyError,
  TimeoutError,
  LostError,
};
