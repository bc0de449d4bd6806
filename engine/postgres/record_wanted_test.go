package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// pgInterval is d as an interval argument.
func pgInterval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// recordNotifications listens on e's record channel on a connection of its
// own.
type recordNotifications struct {
	db      *pgtest.DB
	conn    *pgx.Conn
	channel string
}

func listenRecords(t *testing.T, db *pgtest.DB, e *postgres.Engine) *recordNotifications {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	n := &recordNotifications{db: db, conn: conn, channel: postgres.RecordChannel(e)}
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{n.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return n
}

// take returns how many notifications each group got since the last take.
// It notifies a sentinel and reads up to it: notifications are delivered
// in commit order, so every one of a transaction committed before comes
// first.
func (n *recordNotifications) take(t *testing.T) map[string]int {
	t.Helper()
	const sentinel = "sentinel" // no group of these tests
	if _, err := n.db.Admin.Exec(t.Context(), "SELECT pg_notify($1, $2)", n.channel, sentinel); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Timeout)
	defer cancel()
	for {
		msg, err := n.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for the sentinel notification: %v", err)
		}
		if msg.Payload == sentinel {
			return got
		}
		got[msg.Payload]++
	}
}

// claimableSaves makes records of group claimable in four statements: a
// create, a SaveAll of three creates, and a create then, once claimed, a
// release.
func claimableSaves(t *testing.T, s *record.Store, group, prefix string) {
	t.Helper()
	ctx := t.Context()
	id := func(n int) string { return fmt.Sprintf("%s-%s-%d", group, prefix, n) }
	if _, err := s.Save(ctx, record.Record{ID: id(0), Group: group, Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	var batch []record.Record
	for i := 1; i <= 3; i++ {
		batch = append(batch, record.Record{ID: id(i), Group: group, Status: record.Active})
	}
	for _, res := range s.SaveAll(ctx, batch) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if _, err := s.Save(ctx, record.Record{ID: id(4), Group: group, Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, group, id(4), "worker", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	held.Lease.Owner = ""
	if _, err := s.Save(ctx, held); err != nil {
		t.Fatal(err)
	}
}

// TestRecordNotifiesOnlyWhenWanted: saves that make records claimable
// send no notification while nobody waits on their group; while a waiter
// watches it, each such statement notifies the group once, however many
// records it writes; once the waiter has gone and its mark lapsed, they
// are silent again.
func TestRecordNotifiesOnlyWhenWanted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	ea, _ := node(t, db, nil)
	postgres.SetWantFor(ea, 2*time.Second)
	_, b := node(t, db, nil)
	for _, g := range []string{"g", "h"} {
		if err := b.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
		// The group's tenant is cached: saves run through the group commit.
		if _, err := b.Save(ctx, record.Record{ID: g + "-seed", Group: g, Status: record.Completed}); err != nil {
			t.Fatal(err)
		}
	}
	n := listenRecords(t, db, ea)

	claimableSaves(t, b, "g", "alone")
	if got := n.take(t); len(got) != 0 {
		t.Fatalf("notifications with nobody waiting: %v, want none", got)
	}

	_, stop := watchLive(t, ea, "g")
	claimableSaves(t, b, "g", "watched")
	claimableSaves(t, b, "h", "watched")
	if got := n.take(t); got["g"] != 4 || len(got) != 1 {
		t.Fatalf("notifications while g is watched: %v, want 4 of g (one per statement) and none of h", got)
	}
	stop()

	groups := pgx.Identifier{db.Schema, "record_groups"}.Sanitize()
	testkit.Until(t, "g's mark to lapse", func() bool {
		var lapsed bool
		err := db.Admin.QueryRow(ctx, "SELECT wanted_until <= now() FROM "+groups+" WHERE name = 'g'").Scan(&lapsed)
		return err == nil && lapsed
	})
	claimableSaves(t, b, "g", "lapsed")
	if got := n.take(t); len(got) != 0 {
		t.Fatalf("notifications after the waiter left: %v, want none", got)
	}
}

// TestRecordMarkIsRenewed: a watch keeps its group's mark past the mark's
// length, so a save long after the watch began still wakes it.
func TestRecordMarkIsRenewed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	ea, _ := node(t, db, nil)
	const wantFor = 300 * time.Millisecond
	postgres.SetWantFor(ea, wantFor)
	_, b := node(t, db, nil)
	if err := b.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	wake, stop := watchLive(t, ea, "g")
	defer stop()
	groups := pgx.Identifier{db.Schema, "record_groups"}.Sanitize()
	var first time.Time
	if err := db.Admin.QueryRow(ctx, "SELECT wanted_until FROM "+groups+" WHERE name = 'g'").Scan(&first); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, "the first mark to have lapsed long ago", func() bool {
		var past bool
		err := db.Admin.QueryRow(ctx, "SELECT now() > $1::timestamptz + $2::interval", first, pgInterval(3*wantFor)).Scan(&past)
		return err == nil && past
	})
	if _, err := b.Save(ctx, record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(testkit.Timeout):
		t.Fatalf("no wake within %v after a save, %v after the watch began", testkit.Timeout, 3*wantFor)
	}
}

// TestRecordSaveSeesAMarkCommittedDuringIt: a waiter's mark holds its
// group row locked until it commits; a claimable save whose statement
// began meanwhile waits for it and then notifies, though its snapshot
// predates the mark. Each kind of save: a create, a batch, a release.
func TestRecordSaveSeesAMarkCommittedDuringIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	ea, _ := node(t, db, nil)
	_, b := node(t, db, nil)
	n := listenRecords(t, db, ea)
	saves := map[string]func(group string) error{
		"create": func(group string) error {
			_, err := b.Save(ctx, record.Record{ID: group + "-r", Group: group, Status: record.Active})
			return err
		},
		"batch": func(group string) error {
			res := b.SaveAll(ctx, []record.Record{{ID: group + "-r1", Group: group, Status: record.Active}, {ID: group + "-r2", Group: group, Status: record.Active}})
			return errors.Join(res[0].Err, res[1].Err)
		},
		"release": func(group string) error {
			held, err := b.Load(ctx, group+"-held")
			if err != nil {
				return err
			}
			held.Lease.Owner = ""
			_, err = b.Save(ctx, held)
			return err
		},
	}
	for kind, save := range saves {
		group := "g-" + kind
		if err := b.RegisterGroup(ctx, group); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Save(ctx, record.Record{ID: group + "-held", Group: group, Status: record.Active}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Claim(ctx, group, group+"-held", "worker", time.Hour); err != nil {
			t.Fatal(err)
		}
		if got := n.take(t); len(got) != 0 {
			t.Fatalf("%s: notifications before the mark: %v", kind, got)
		}

		tx, err := db.Admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		var until, now time.Time
		if err := tx.QueryRow(ctx, postgres.RecordWantSQL(ea), group, pgInterval(time.Minute), pgInterval(30*time.Second)).Scan(&until, &now); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- save(group) }()
		waitLockWaiters(t, db, 1, kind+": the save to wait for the mark's lock")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if got := n.take(t); got[group] != 1 || len(got) != 1 {
			t.Errorf("%s: notifications after a save that waited for the mark: %v, want one of %s", kind, got, group)
		}
	}
}

// TestRecordWaitNeverMissesASave races, round after round, a waiter that
// marks its group and probes against a save that makes a record of the
// group claimable and a delete of another record of it (which updates the
// group row too): the waiter must always learn of the record, and nothing
// may deadlock.
func TestRecordWaitNeverMissesASave(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	ea, a := node(t, db, nil)
	_, b := node(t, db, nil)
	if err := b.RegisterGroup(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	_, stop := watchLive(t, ea, "warm")
	stop()
	const rounds = 60
	for i := range rounds {
		// A new group each round, so that each waiter marks it.
		g := fmt.Sprintf("g%d", i)
		if err := b.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{g + "-seed", g + "-doomed"} {
			if _, err := b.Save(ctx, record.Record{ID: id, Group: g, Status: record.Completed}); err != nil {
				t.Fatal(err)
			}
		}
		held, err := b.Save(ctx, record.Record{ID: g + "-held", Group: g, Status: record.Active})
		if err == nil {
			held, err = b.Claim(ctx, g, held.ID, "worker", time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}

		start := make(chan struct{})
		var wg sync.WaitGroup
		var waitErr, saveErr, deleteErr error
		wg.Go(func() {
			<-start
			wctx, cancel := context.WithTimeout(ctx, testkit.Timeout)
			defer cancel()
			waitErr = a.WaitClaimable(wctx, g)
		})
		wg.Go(func() {
			<-start
			switch i % 3 {
			case 0:
				_, saveErr = b.Save(ctx, record.Record{ID: g + "-new", Group: g, Status: record.Active})
			case 1:
				res := b.SaveAll(ctx, []record.Record{{ID: g + "-new1", Group: g, Status: record.Active}, {ID: g + "-new2", Group: g, Status: record.Active}})
				saveErr = errors.Join(res[0].Err, res[1].Err)
			default:
				held.Lease.Owner = ""
				_, saveErr = b.Save(ctx, held)
			}
		})
		wg.Go(func() {
			<-start
			deleteErr = b.Delete(ctx, g+"-doomed")
		})
		close(start)
		wg.Wait()
		if err := errors.Join(saveErr, deleteErr); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if waitErr != nil {
			t.Fatalf("round %d: WaitClaimable = %v while %s has a claimable record: a wake-up was lost", i, waitErr, g)
		}
	}
}

// TestRecordMarkGivesUpOnABusyGroup: a mark waits only briefly for the
// group row's lock, which claimable saves hold until they commit; then
// the watch is not live, and the waiter polls rather than hangs.
func TestRecordMarkGivesUpOnABusyGroup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	ea, _ := node(t, db, nil)
	_, b := node(t, db, nil)
	for _, g := range []string{"warm", "g"} {
		if err := b.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	_, stop := watchLive(t, ea, "warm")
	stop()

	tx, err := db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT FROM "+pgx.Identifier{db.Schema, "record_groups"}.Sanitize()+" WHERE name = 'g' FOR KEY SHARE"); err != nil {
		t.Fatal(err)
	}
	type watch struct {
		live bool
		err  error
	}
	done := make(chan watch, 1)
	go func() {
		_, live, stop, err := ea.Records().WatchClaimable(ctx, "g")
		stop()
		done <- watch{live, err}
	}()
	select {
	case w := <-done:
		if w.live || w.err != nil {
			t.Fatalf("WatchClaimable of a group whose row is share-locked = live %v, %v; want not live, so the waiter polls", w.live, w.err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatalf("WatchClaimable still waiting for the group row's lock after %v", testkit.Timeout)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, stop = watchLive(t, ea, "g")
	stop()
}

// TestRecordCheckpointNotifiesOnlyWhenClaimable: a save that keeps its
// lease or parks the record notifies nothing; a checkpoint under a lease
// that has lapsed leaves the record claimable as written, so it wakes the
// group's waiters; a stale checkpoint conflicts and changes nothing.
func TestRecordCheckpointNotifiesOnlyWhenClaimable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	c := clock.NewFake(time.Now())
	e, s := node(t, db, c)
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	n := listenRecords(t, db, e)
	_, stop := watchLive(t, e, "g")
	defer stop()

	var held [3]record.Record
	for i := range held {
		id := fmt.Sprint("r", i)
		if _, err := s.Save(ctx, record.Record{ID: id, Group: "g", Status: record.Active}); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Claim(ctx, "g", id, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = rec
	}
	n.take(t) // the creates' notifications
	save := func(rec record.Record) record.Record {
		t.Helper()
		saved, err := s.Save(ctx, rec)
		if err != nil {
			t.Fatalf("Save(%s): %v", rec.ID, err)
		}
		return saved
	}
	held[0] = save(held[0]) // a checkpoint under a live lease
	held[1].Status = record.Completed
	save(held[1])
	if got := n.take(t); len(got) != 0 {
		t.Fatalf("notifications of a checkpoint and a completion: %v, want none", got)
	}

	c.Advance(2 * time.Minute) // r0's and r2's leases lapse
	stale := held[0]
	stale.Version--
	if _, err := s.Save(ctx, stale); !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("stale Save: %v, want ErrConflict", err)
	}
	if got := n.take(t); len(got) != 0 {
		t.Fatalf("notifications of a stale save: %v, want none", got)
	}
	saved := save(held[0])
	if saved.Version != held[0].Version+1 || saved.Lease != held[0].Lease {
		t.Fatalf("checkpoint under a lapsed lease: %+v, want version %d and lease %+v", saved, held[0].Version+1, held[0].Lease)
	}
	if got := n.take(t); got["g"] != 1 {
		t.Fatalf("notifications of a checkpoint under a lapsed lease: %v, want 1 of g", got)
	}
	claimable, err := s.ListClaimable(ctx, "g", time.Time{}, 10)
	if err != nil || len(claimable) != 2 {
		t.Fatalf("ListClaimable: %v, %v; want r0 and r2", claimable, err)
	}
}
