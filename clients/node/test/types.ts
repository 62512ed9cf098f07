// Compiled by `tsc -p test/tsconfig.json` (npm test): the declarations serve a TypeScript
// user's code as the README shows it, and refuse what they should.
import * as pg from 'pg';
import {
  Router, geneOf, uuid, RouteRetryExhausted, NoRouteError, CommitOutcomeUnknownError, RoutingError,
  NoHostError, multiHostClient, type MultiHostConfig,
} from 'id-gen-client';

export async function example(): Promise<bigint> {
  const router = await Router.connect({ routes: 'postgresql://coordinator/app', shards: { shard_1: 'postgresql://s1/app' } });
  try {
    const owner = 42n;
    const total: number = await router.transaction({ owner }, async (client) => {
      const r = await client.query<{ n: string }>('SELECT count(*) AS n FROM orders WHERE owner_id = $1', [String(owner)]);
      return Number(r.rows[0].n);
    });
    const rows = await router.execute<{ id: bigint }>({ id: 9007199254740993n }, 'SELECT id FROM orders WHERE id = $1', ['9007199254740993']);
    const shard: string = router.shardForId(rows[0]?.id ?? 0n);
    const g: number = geneOf(uuid('12345678-1234-5678-1234-567812345678')) + router.geneOf('alice') + total + shard.length;
    const retries: number = router.stats.retriesMoved + router.stats.retriesFenced + router.stats.retriesLost;
    const version: bigint = router.version + BigInt(g * 0 + retries * 0);
    // @ts-expect-error a key names exactly one of owner, id or gene
    await router.transaction({}, async () => 1);
    const id = await router.nextId('orders', owner);
    return typeof id === 'bigint' ? id + version : BigInt(id);
  } catch (e) {
    if (e instanceof RouteRetryExhausted || e instanceof NoRouteError) throw e;
    if (e instanceof CommitOutcomeUnknownError) {
      const routing: RoutingError = e; // (the caller decides: look the row up by its id)
      throw routing.cause;
    }
    throw e;
  } finally {
    await router.close();
  }
}

export function multiHostPool(): pg.Pool {
  const config: MultiHostConfig = {
    hosts: [{ host: '127.0.0.1', port: 5433 }, { host: '127.0.0.1', port: 5434, ssl: false }],
    targetSessionAttrs: 'read-write', hostConnectTimeoutMillis: 2000, user: 'postgres',
  };
  // @ts-expect-error targetSessionAttrs is read-write or any
  const standby: MultiHostConfig = { hosts: [], targetSessionAttrs: 'standby' };
  const pool = new pg.Pool({ ...config, Client: multiHostClient(pg.Client) });
  pool.on('error', (e) => { if (e instanceof NoHostError && e.code === '08001') pool.end(); });
  return standby.hosts.length === 0 ? pool : pool;
}
