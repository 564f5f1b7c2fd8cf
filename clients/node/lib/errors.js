'use strict';
// errors.js - what a dlock call rejects with: one class per outcome a caller handles apart.

/**
 * Every error of the library. `code` is the protocol's ERR code (SYNTAX, NOTHELD, WRONGTYPE,
 * MISMATCH, DEADLOCK, LIMIT, BACKEND, ...) or one of the library's own: BUSY, TIMEOUT, LOST,
 * CONN (no connection, or no reply in time), CLOSED (the client was closed), PROTO (a reply
 * the library does not understand).
 */
class DlockError extends Error {
  constructor(code, message) {
    super(message || code);
    this.name = 'DlockError';
    this.code = code;
  }
}

/** Not granted now, and the request did not ask to wait (wait: 0). */
class BusyError extends DlockError {
  constructor(fields) {
    const who = fields.holder ? ` by ${fields.holder}` : '';
    super('BUSY', `busy${who}`);
    this.name = 'BusyError';
    this.holder = fields.holder;                                // LOCK: client name of a holder, '-' for none
    this.ttl = fields.ttl === undefined ? undefined : Number(fields.ttl);   // LOCK: ms left on its lease
    this.free = fields.free === undefined ? undefined : Number(fields.free); // ACQUIRE: free permits
  }
}

/** Waited `wait` and was not granted; nothing is held because of the request. */
class TimeoutError extends DlockError {
  constructor() {
    super('TIMEOUT', 'timed out');
    this.name = 'TimeoutError';
  }
}

/** The hold is gone although it was not released: stop using what it protects. */
class LostError extends DlockError {
  constructor(hold) {
    super('LOST', `hold of ${hold.names.join(',')} was lost (${hold.lost})`);
    this.name = 'LostError';
    this.hold = hold;
    this.reason = hold.lost;
  }
}

module.exports = { DlockError, BusyError, TimeoutError, LostError };
