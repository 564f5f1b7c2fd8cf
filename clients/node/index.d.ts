// index.d.ts - types of the dlock package (the Node.js client of dlockd).

import { EventEmitter } from 'node:events';
import { ConnectionOptions } from 'node:tls';

/** Durations are milliseconds; `wait` may also be 0 (do not wait) or Infinity (no limit). */
export type Milliseconds = number;

/** Why a hold was lost: the server's `* LOST` reasons, and the library's own. */
export type LostReason =
  | 'lease'      // the lock's lease= ran out
  | 'expired'    // the session ended (its ttl ran out, or the server ended it)
  | 'backend'    // Redis lost the hold
  | 'admin'      // the operator freed it (FORCE) or ended the session (KILL)
  | 'moved'      // the session was resumed from another connection
  | 'jeopardy'   // no answer confirmed the hold in time: it may be granted to others by now
  | (string & {}); // a later server may give others

export interface LostInfo {
  name: string;                 // the name whose loss was told (the first, for several at once)
  token: number;                // its fencing token
  reason: LostReason;
  hold: LockHold | SemaphoreHold;
}

export interface TlsOptions extends Omit<ConnectionOptions, 'ca' | 'cert' | 'key'> {
  /** File names or contents; default $DLOCK_TLS_CA, $DLOCK_TLS_CERT, $DLOCK_TLS_KEY; null: none. */
  ca?: string | Buffer | null;
  cert?: string | Buffer | null;
  key?: string | Buffer | null;
}

export interface ConnectOptions {
  /** Client name shown in BUSY and STATUS (HELLO name=); default the peer address. */
  name?: string;
  /** Session ttl in ms (HELLO ttl=), clamped by the server; default the server's (10 s). */
  ttl?: Milliseconds;
  /** HELLO auth=, for a server with requirepass. */
  password?: string;
  /** One connection attempt with its HELLO; default 5000. */
  connectTimeout?: Milliseconds;
  /** How long a call waits for its reply beyond its own wait; default 5000. */
  requestTimeout?: Milliseconds;
  /** For tls:// addresses: Node's tls.connect options. */
  tls?: TlsOptions;
}

export interface LockOptions {
  /** How long to wait in the queue: 0 (the default) answers BusyError at once. */
  wait?: Milliseconds;
  /** Shared (read) mode instead of exclusive. */
  shared?: boolean;
  /** The server releases the hold after this long (the hold then emits 'lost', reason 'lease'). */
  lease?: Milliseconds;
  /** Who inside the session holds it; default a fresh owner for every call. The same owner re-enters. */
  owner?: string;
}

export interface AcquireOptions {
  /** Permits of the semaphore (required; fixed while anyone holds or waits). */
  limit: number;
  /** Permits to take; default 1. */
  permits?: number;
  wait?: Milliseconds;
  lease?: Milliseconds;
  owner?: string;
}

/**
 * Every error of the library; code is the protocol's ERR code (SYNTAX, NOTHELD, WRONGTYPE,
 * MISMATCH, DEADLOCK, LIMIT, BACKEND, NOAUTH, ...) or BUSY, TIMEOUT, LOST, CONN (no connection,
 * or no reply in time), CLOSED, PROTO (a reply the library does not understand).
 */
export class DlockError extends Error {
  constructor(code: string, message?: string);
  readonly code: string;
}

/** Not granted now, and the request did not wait. */
export class BusyError extends DlockError {
  private constructor();
  readonly code: 'BUSY';
  /** LOCK: client name of a holder ('-' when none can be named). */
  readonly holder?: string;
  /** LOCK: ms left on that holder's lease. */
  readonly ttl?: number;
  /** ACQUIRE: free permits. */
  readonly free?: number;
}

/** Waited and was not granted; nothing is held because of the request. */
export class TimeoutError extends DlockError {
  constructor();
  readonly code: 'TIMEOUT';
}

/** The hold had been lost: stop using what it protects. */
export class LostError extends DlockError {
  constructor(hold: LockHold | SemaphoreHold);
  readonly code: 'LOST';
  readonly hold: LockHold | SemaphoreHold;
  readonly reason: LostReason;
}

/** A hold of one or several locks. */
export class LockHold extends EventEmitter {
  private constructor();
  readonly names: string[];
  /** Fencing tokens, one per name: pass them to what the lock protects. */
  readonly tokens: number[];
  /** The owner's reentrancy count per name, as granted. */
  readonly counts: number[];
  readonly name: string;
  readonly token: number;
  readonly count: number;
  readonly shared: boolean;
  readonly owner: string;
  /** Why the hold was lost, or null. */
  readonly lost: LostReason | null;
  /** Unlocked, or the client was closed. */
  readonly released: boolean;
  /** UNLOCK: rejects with LostError when the hold was lost, DlockError 'NOTHELD' when released already. */
  unlock(): Promise<void>;
  on(event: 'lost', listener: (info: LostInfo) => void): this;
  once(event: 'lost', listener: (info: LostInfo) => void): this;
}

/** Permits of a semaphore. */
export class SemaphoreHold extends EventEmitter {
  private constructor();
  readonly names: [string];
  readonly tokens: [number];
  readonly name: string;
  readonly token: number;
  readonly owner: string;
  /** The permits this call took. */
  readonly permits: number;
  /** The permits the owner holds in all. */
  readonly held: number;
  /** Free permits right after the grant. */
  readonly free: number;
  readonly lost: LostReason | null;
  readonly released: boolean;
  /** RELEASE of the permits: rejects like LockHold.unlock(). */
  release(): Promise<void>;
  on(event: 'lost', listener: (info: LostInfo) => void): this;
  once(event: 'lost', listener: (info: LostInfo) => void): this;
}

export interface ConnectInfo {
  address: string;
  session: string;
  /** The session was resumed (false: a new one, after the old one was lost). */
  resumed: boolean;
}

/** A client with one session, made by connect(). */
export class Client extends EventEmitter {
  private constructor();
  /** The addresses tried, in order. */
  readonly addresses: Address[];
  /** The session id (public: STATUS shows it). */
  readonly session: string | null;
  /** A connection is up and its HELLO answered. */
  readonly connected: boolean;

  lock(names: string | string[], options?: LockOptions): Promise<LockHold>;
  acquire(name: string, options: AcquireOptions): Promise<SemaphoreHold>;
  /** Creates the latch unless it exists; resolves with its count. */
  latch(name: string, count: number, options?: { ttl?: Milliseconds }): Promise<number>;
  /** Resolves with the count left. */
  countdown(name: string, n?: number): Promise<number>;
  /** Resolves once the latch is at 0; TimeoutError when wait (default 0) runs out first. */
  awaitLatch(name: string, options?: { wait?: Milliseconds }): Promise<void>;
  /** The server's STATUS object (PROTOCOL.md, section 7). */
  status(name: string): Promise<Record<string, any>>;
  /** The server's INFO object. */
  info(): Promise<Record<string, any>>;
  /** QUIT: releases every hold at once, then closes; later calls reject with code CLOSED. */
  close(): Promise<void>;

  on(event: 'lost', listener: (info: LostInfo) => void): this;
  on(event: 'jeopardy', listener: (reason: 'connection' | 'heartbeat' | 'backend') => void): this;
  on(event: 'safe', listener: () => void): this;
  on(event: 'connect', listener: (info: ConnectInfo) => void): this;
  once(event: 'lost', listener: (info: LostInfo) => void): this;
  once(event: 'jeopardy', listener: (reason: 'connection' | 'heartbeat' | 'backend') => void): this;
  once(event: 'safe', listener: () => void): this;
  once(event: 'connect', listener: (info: ConnectInfo) => void): this;
}

export type Address =
  | { text: string; host: string; port: number; tls: boolean }
  | { text: string; path: string };

/**
 * Connects to the first of addrs that answers (an array, or a DLOCK_ADDR string: HOST:PORT,
 * HOST, [IPV6]:PORT, unix:PATH, tls://HOST:PORT, separated by commas) and opens a session.
 * Default $DLOCK_ADDR, then 127.0.0.1:7411.
 */
export function connect(addrs?: string | string[], options?: ConnectOptions): Promise<Client>;
export function connect(options: ConnectOptions): Promise<Client>;

/** The address list connect() would use. */
export function parseAddresses(addrs?: string | string[]): Address[];
