'use strict';
// holds.js - what a grant hands back: a lock hold (one or several names) or semaphore permits.

const { EventEmitter } = require('node:events');

/**
 * A hold as this client believes it is. Emits 'lost' ({name, token, reason, hold}) once, when
 * the hold is gone although it was not released; `lost` then says why.
 */
class Hold extends EventEmitter {
  constructor(client, { names, tokens, owner, own }) {
    super();
    this.names = names;     // the names, in request order
    this.tokens = tokens;   // their fencing tokens
    this.owner = owner;     // the owner string sent (a fresh one per call unless given)
    this.lost = null;       // why it was lost, or null
    this.released = false;  // unlocked or released (or the client closed)
    this._client = client;
    this._own = own;        // the owner is this hold's alone: releasing takes every count
    this._lostNames = new Set();
  }

  get name() { return this.names[0]; }

  get token() { return this.tokens[0]; }

  /** Marks name lost if it is this hold's (token 0: any); the event's info on the first loss. */
  _lose(name, token, reason) {
    const i = this.names.indexOf(name);
    if (this.released || i < 0 || (token && this.tokens[i] !== token)) return null;
    if (this._lostNames.has(name)) return null;
    this._lostNames.add(name);
    if (this.lost) return null;
    this.lost = reason;
    const info = { name, token: this.tokens[i], reason, hold: this };
    this.emit('lost', info);
    return info;
  }

  /** The names the server may still hold for this hold. */
  _kept() { return this.names.filter((n) => !this._lostNames.has(n)); }
}

/** A hold of one or several locks, from Client.lock(). */
class LockHold extends Hold {
  constructor(client, fields) {
    super(client, fields);
    this.shared = fields.shared;   // shared mode
    this.counts = fields.counts;   // the owner's reentrancy count per name, as granted
  }

  get count() { return this.counts[0]; }

  /** Releases the hold (all its names). Rejects with LostError if it was lost meanwhile. */
  unlock() { return this._client._unlock(this); }
}

/** Permits of a semaphore, from Client.acquire(). */
class SemaphoreHold extends Hold {
  constructor(client, fields) {
    super(client, { ...fields, names: [fields.name], tokens: [fields.token] });
    this.permits = fields.permits;  // the permits this call took
    this.held = fields.held;        // the permits the owner holds in all
    this.free = fields.free;        // free permits right after the grant
  }

  /** Gives the permits back. Rejects with LostError if they were lost meanwhile. */
  release() { return this._client._release(this); }
}

module.exports = { LockHold, SemaphoreHold };
