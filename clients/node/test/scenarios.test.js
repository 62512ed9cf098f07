'use strict';
// The protocol scenarios shared by every client (clients/protocol-scenarios.json), run against
// the fake of fake_pg.js: the same expectations as the Python and Rust clients' fake tests.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const {
  Router, RouteRetryExhausted, NoRouteError, CommitOutcomeUnknownError, geneOf,
} = require('..');
const { Cluster, READ, sqlError } = require('./fake_pg');

const { scenarios } = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'protocol-scenarios.json'), 'utf8'));
assert.ok(scenarios.length >= 10, 'the scenario file lost its scenarios');

for (const sc of scenarios) {
  test(sc.name, async () => {
    const cluster = new Cluster(sc.routes);
    const router = new Router({
      routes: { connectionString: 'coord' }, shards: { a: { connectionString: 'a' }, b: { connectionString: 'b' } }, retryLimit: sc.retry_limit ?? 20, backoffBase: 0.05, backoffMax: 0.2,
      listen: false, refreshInterval: 0, pg: cluster.pg,
    });
    try {
      await router.ready();
      let key;
      if ('gene' in sc.key) {
        key = { gene: sc.key.gene };
      } else {
        let owner = 0n;
        while (cluster.coord.ownerOf(geneOf(owner)) !== sc.key.owner_on) owner += 1n;
        key = { owner };
      }
      if (sc.routes_change_unseen) cluster.coord.change(sc.routes_change_unseen, false);
      cluster.coord.down = Boolean(sc.coordinator_down);
      cluster.fences = sc.fenced ?? 0;
      cluster.connectFails = sc.connect_fails ?? 0;
      cluster.claimsLost = sc.claim_lost ?? 0;
      cluster.commitLost = Boolean(sc.commit_lost);
      let bodyRuns = 0;
      const body = async (client) => {
        bodyRuns += 1;
        const errors = sc.body_errors ?? [];
        if (bodyRuns <= errors.length) {
          const code = errors[bodyRuns - 1];
          // (class 08: the connection ended under the body)
          throw code.startsWith('08') ? client.lose(sqlError(code)) : sqlError(code);
        }
        return client.shard;
      };
      const calls = {
        transaction: () => router.transaction(key, body),
        run: () => router.run(key, body),
        execute: async () => {
          const rows = await router.execute(key, READ, [String(key.owner)]);
          assert.deepEqual(rows, [{ amount: 7 }]);
          return cluster.lastReadShard;
        },
      };
      const got = {};
      try {
        got.shard = await calls[sc.call]();
        got.outcome = 'committed';
      } catch (e) {
        if (e instanceof RouteRetryExhausted) {
          got.outcome = 'exhausted';
          got.last_code = e.cause.code;
        } else if (e instanceof NoRouteError) {
          got.outcome = 'no_route';
        } else if (e instanceof CommitOutcomeUnknownError) {
          got.outcome = 'commit_unknown';
          assert.ok(e.cause instanceof Error, 'commit outcome unknown holds the driver error');
        } else if (typeof e.code === 'string') {
          got.outcome = 'error';
          got.last_code = e.code;
        } else {
          throw e;
        }
      }
      Object.assign(got, {
        body_runs: bodyRuns, claims: cluster.claims(), retries_moved: router.stats.retriesMoved,
        retries_fenced: router.stats.retriesFenced, retries_lost: router.stats.retriesLost, refreshes: router.stats.refreshes,
        version: Number(router.version),
      });
      const picked = Object.fromEntries(Object.keys(sc.expect).map((k) => [k, got[k]]));
      assert.deepEqual(picked, sc.expect);
      assert.equal(cluster.outstanding(), 0, 'a client was kept');
      assert.equal(cluster.deadReturnedIdle(), 0, 'a lost connection went back to its pool idle');
    } finally {
      await router.close();
    }
  });
}
