// The package example (compiled by go test, not run: it needs a cluster).

package idgen_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/id-gen/id_gen/clients/go/idgen"
	"github.com/jackc/pgx/v4"
)

// A Router, a routed transaction that inserts an order of customer 42, a read by id, and the
// errors a caller tells apart. (Compiled, not run: it needs a cluster.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	router, err := idgen.NewRouter(ctx, idgen.Config{
		Routes: "host=coord dbname=app user=app",
		Shards: map[string]string{"shard_1": "host=s1 dbname=app user=app", "shard_2": "host=s2 dbname=app user=app"},
	})
	if err != nil {
		log.Fatal(err) // the coordinator could not be reached
	}
	defer router.Close()

	var orderID int64
	err = router.Transaction(ctx, idgen.Owner(int64(42)), func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "INSERT INTO orders (id, owner_id, amount) "+
			"VALUES (id_gen.gene_order_id('orders', $1::bigint), $1, 7) RETURNING id", int64(42)).Scan(&orderID)
	})
	switch {
	case errors.Is(err, idgen.ErrCommitOutcomeUnknown):
		// the connection was lost after COMMIT was sent: look the order up before trying again
	case errors.Is(err, idgen.ErrRetriesExhausted):
		// the routes kept changing, the gene stayed fenced or the shard unreachable: later
	case errors.Is(err, idgen.ErrNoRoute):
		// no shard owns the gene
	case idgen.SQLState(err) != "":
		// a database error from the body (a *pgconn.PgError)
	case err != nil:
		log.Fatal(err)
	}

	rows, err := router.Execute(ctx, idgen.ID(orderID), "SELECT amount FROM orders WHERE id = $1", orderID)
	if err == nil && len(rows) == 1 {
		log.Printf("amount %v", rows[0][0])
	}
	id, err := router.NextID(ctx, "orders", "alice") // id_gen.gene_order_id on alice's shard
	log.Println(id, err, idgen.GeneOf("alice"), router.Stats())
}
