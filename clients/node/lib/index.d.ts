// Types of id-gen-client (docs/routing-protocol.md §5; clients/node/README.md).
import type { Client, ClientConfig, PoolClient, PoolConfig } from 'pg';

/** A UUID owner, hashed as its 16 raw bytes. */
export declare class Uuid {
  constructor(text: string);
  readonly text: string;
  readonly bytes: Uint8Array;
  toString(): string;
}
export declare function uuid(text: string): Uuid;

/** An owner: a bigint (or a safe-integer number), a string, a Uuid, or raw bytes. */
export type Owner = bigint | number | string | Uuid | Uint8Array;
/** A 64-bit id: a bigint, a decimal string, or a safe-integer number. */
export type Id = bigint | string | number;
/** Routes a call by exactly one of an owner, an id or a gene (0..65535). */
export type Key = { owner: Owner } | { id: Id } | { gene: number };

export declare function geneOf(owner: Owner): number;
export declare function geneOfId(id: Id): number;

export declare const ROUTE_CHANGED: 'IG001';
export declare const ROUTE_FENCED: 'IG002';

export declare class RoutingError extends Error {}
/** No route covers the gene, or it names a shard this Router has no connection for. Not retried. */
export declare class NoRouteError extends RoutingError {}
/** IG001/IG002, or a refused or lost shard connection, kept coming back for retryLimit retries; `cause` is the last one. Retryable later. */
export declare class RouteRetryExhausted extends RoutingError {}
/**
 * The shard connection was lost after COMMIT was sent and before its answer: the transaction may
 * or may not have committed. Never retried; `cause` is the driver's error.
 */
export declare class CommitOutcomeUnknownError extends RoutingError {}

/**
 * A pg config with several hosts, for multiHostClient: what a libpq keyword/value string with
 * "host=h1,h2 port=p1,p2" or target_session_attrs becomes in the Router.
 */
export interface MultiHostConfig extends ClientConfig {
  /** Tried in order; ssl: the host's TLS settings (default: the config's). */
  hosts: Array<{ host: string; port: number; ssl?: ClientConfig['ssl'] }>;
  /** read-write: only a host whose transaction_read_only is off qualifies ('any', the default: any host that accepts). */
  targetSessionAttrs?: 'read-write' | 'any';
  /** Each host's connect bound in ms (default: connectionTimeoutMillis). */
  hostConnectTimeoutMillis?: number;
}

/**
 * No host of a multi-host config qualified (each refused, lost or read only): code 08001, a
 * lost connection to the Router (retried before COMMIT was sent); `cause` is the last host's error.
 */
export declare class NoHostError extends Error {
  readonly code: '08001';
}

/**
 * A subclass of pg's Client that connects to the first qualifying host of a MultiHostConfig
 * (for pg.Pool's `Client` option): `new pg.Pool({ ...config, Client: multiHostClient(pg.Client) })`.
 */
export declare function multiHostClient<C extends typeof Client>(client: C): C;

export interface RouterOptions {
  /**
   * The coordinator: a connection string or a pg ClientConfig. A libpq keyword/value string
   * may list hosts ("host=h1,h2 port=p1,p2") and set target_session_attrs (read-write or any).
   */
  routes: string | ClientConfig;
  /** The shards by name: a connection string (as routes') or a pg PoolConfig each. */
  shards: Record<string, string | PoolConfig>;
  /** Retries after the first attempt (20). */
  retryLimit?: number;
  /** The backoff's base and largest wait in ms (5, 200). */
  backoffBase?: number;
  backoffMax?: number;
  /** LISTEN for route changes on the coordinator (true). */
  listen?: boolean;
  /** Poll the route version every so many ms (1000; 0: never). */
  refreshInterval?: number;
  /** bigint columns as BigInt ('bigint', the default) or as decimal strings ('string'). */
  ids?: 'bigint' | 'string';
  /** pg PoolConfig defaults of every shard's pool. */
  pool?: PoolConfig;
  /** The pg module (tests pass a fake). */
  pg?: unknown;
}

export interface RouterStats {
  transactions: number;
  retriesMoved: number;
  retriesFenced: number;
  /** Retries after a refused or lost shard connection, before COMMIT was sent. */
  retriesLost: number;
  refreshes: number;
}

export declare class Router {
  constructor(options: RouterOptions);
  /** A Router whose routes were read; rejects when the coordinator cannot be reached. */
  static connect(options: RouterOptions): Promise<Router>;
  /** Resolves once the routes were first read. */
  ready(): Promise<void>;
  readonly retryLimit: number;
  readonly stats: RouterStats;
  /** The route version held. */
  readonly version: bigint;
  /** The routes held: [lowerGene, upperGene, shard], inclusive. */
  readonly routes: Array<[number, number, string]>;
  refresh(): Promise<bigint>;
  geneOf(owner: Owner): number;
  shardForGene(gene: number): string;
  shardForOwner(owner: Owner): string;
  shardForId(id: Id): string;
  /** body in a claimed transaction on the owning shard, retried on IG001/IG002 and lost connections; its value. */
  transaction<T>(key: Key, body: (client: PoolClient) => Promise<T> | T): Promise<T>;
  /** body once in a claimed transaction; IG001/IG002 or a lost connection from it reach the caller. */
  run<T>(key: Key, body: (client: PoolClient) => Promise<T> | T): Promise<T>;
  /** One statement with the route version declared in its transaction; its rows. */
  execute<R extends Record<string, unknown> = Record<string, unknown>>(key: Key, sql: string, params?: unknown[]): Promise<R[]>;
  /** An owner-affine id from the owner's shard (a bigint, or a string with ids: 'string'). */
  nextId(sequence: string, owner: bigint | number | string | Uuid): Promise<bigint | string>;
  close(): Promise<void>;
}
