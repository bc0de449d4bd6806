package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// notes records what ClaimInstance's notify was told.
type notes struct {
	mu   sync.Mutex
	errs []error
}

func (n *notes) notify(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.errs = append(n.errs, err)
}

// got reports whether the notes hold, in order, errors matching want (nil
// matches a nil note).
func (n *notes) got(want ...error) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.errs) < len(want) {
		return false
	}
	for i, w := range want {
		if e := n.errs[i]; (w == nil) != (e == nil) || w != nil && !errors.Is(e, w) {
			return false
		}
	}
	return true
}

// TestInstanceClaimSessionEnds: an instance id is a session lock. A
// second engine's claim is refused with ErrLeased naming the id; once the
// holder's session is terminated (its process as good as dead) the id is
// free at once; the holder is told it lost it (ErrLost), then that another
// holds it (ErrLeased), and takes it back (nil) once that one closes.
func TestInstanceClaimSessionEnds(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, ""), open(t, db, "")
	postgres.SetSweepIdle(e1, 3*time.Second) // probes every second
	ctx := context.Background()
	var n notes
	if err := e1.ClaimInstance(ctx, "w-1", n.notify); err != nil {
		t.Fatal(err)
	}
	err := e2.ClaimInstance(ctx, "w-1", nil)
	if !errors.Is(err, steaderr.ErrLeased) || !strings.Contains(err.Error(), `"w-1"`) {
		t.Fatalf("a second claim = %v, want ErrLeased naming the id", err)
	}
	if err := e2.ClaimInstance(ctx, "w-2", nil); err != nil {
		t.Fatalf("a claim of another id = %v", err)
	}
	pid := advisoryBackend(t, db, postgres.InstanceLockKey(e1, "w-1"))
	if pid == 0 {
		t.Fatal("no backend holds the claim's lock")
	}
	if _, err := db.Admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "the terminated holder's claim to be free", func() bool {
		err := e2.ClaimInstance(ctx, "w-1", nil)
		if err != nil && !errors.Is(err, steaderr.ErrLeased) {
			t.Fatal(err)
		}
		return err == nil
	})
	testkit.Until(t, "the holder to be told it lost the id to another", func() bool { return n.got(steaderr.ErrLost, steaderr.ErrLeased) })
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "the holder to take the id back", func() bool { return n.got(steaderr.ErrLost, steaderr.ErrLeased, nil) })
	if pid := advisoryBackend(t, db, postgres.InstanceLockKey(e1, "w-1")); pid == 0 {
		t.Fatal("the id was taken back, but no backend holds its lock")
	}
}

// TestInstanceClaimLeaseRow: behind PgBouncer the claim is a lease row. A
// row a dead holder left refuses claims until it lapses, and Close
// deletes the row of a live one, so the id is free at once.
func TestInstanceClaimLeaseRow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e1, e2 := open(t, db, "&pgbouncer=true"), open(t, db, "&pgbouncer=true")
	ctx := context.Background()
	if _, err := db.Admin.Exec(ctx, `INSERT INTO `+pgxIdent(db.Schema)+`.gc_lease (name, holder, expiry)
		VALUES ('instance/dead', 'a dead process', now() + interval '300 milliseconds')`); err != nil {
		t.Fatal(err)
	}
	if err := e1.ClaimInstance(ctx, "dead", nil); !errors.Is(err, steaderr.ErrLeased) || !strings.Contains(err.Error(), "lapses") {
		t.Fatalf("a claim of a dead holder's id = %v, want ErrLeased saying when it lapses", err)
	}
	testkit.Until(t, "the dead holder's row to lapse", func() bool {
		err := e1.ClaimInstance(ctx, "dead", nil)
		if err != nil && !errors.Is(err, steaderr.ErrLeased) {
			t.Fatal(err)
		}
		return err == nil
	})
	if err := e2.ClaimInstance(ctx, "dead", nil); !errors.Is(err, steaderr.ErrLeased) {
		t.Fatalf("a second claim = %v, want ErrLeased", err)
	}
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e2.ClaimInstance(ctx, "dead", nil); err != nil {
		t.Fatalf("a claim after the holder closed = %v", err)
	}
}

// claimChildEnv makes the test binary a process that opens the store URL
// it names, with a 1 s lease idle time, claims the instance id "stopped",
// says so on stdout and holds it (TestInstanceClaimStoppedHolder).
const claimChildEnv = "STEAD_TEST_POSTGRES_CLAIM_CHILD"

func claimChild(url string) int {
	cfg, err := postgres.ParseURL(url)
	if err == nil {
		var e *postgres.Engine
		if e, err = postgres.Open(context.Background(), cfg); err == nil {
			postgres.SetSweepIdle(e, time.Second)
			if err = e.ClaimInstance(context.Background(), "stopped", nil); err == nil {
				fmt.Println("claimed")
				select {} // until stopped and killed
			}
		}
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}
