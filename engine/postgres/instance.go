package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/steaderr"
)

// An instance claim holds an instance id for one engine while it is open
// (engine.InstanceClaimer), the way the sweep lease holds the sweep: a
// session advisory lock on a connection of its own, whose server ends the
// session once it idles for sweepIdle (a process stopped or cut off frees
// the id that long after its last probe, one that exits frees it at
// once); behind PgBouncer, where session locks are unsafe, a row in
// gc_lease named "instance/" + id, renewed, which a holder that dies
// frees when it lapses (instanceLeaseTTL).
var (
	sqlInstanceLeaseAcquire = declare("sqlInstanceLeaseAcquire", `INSERT INTO {schema}.gc_lease AS l (name, holder, expiry)
VALUES ($1, $2, now() + $3 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expiry = excluded.expiry
WHERE l.expiry <= now()
RETURNING holder`)
	sqlInstanceLeaseRenew = declare("sqlInstanceLeaseRenew", `UPDATE {schema}.gc_lease SET expiry = now() + $3 * interval '1 microsecond'
WHERE name = $1 AND holder = $2 AND expiry > now()`)
	sqlInstanceLeaseRelease = declare("sqlInstanceLeaseRelease", `DELETE FROM {schema}.gc_lease WHERE name = $1 AND holder = $2`)
)

const (
	// instanceLeaseTTL is how long an instance's lease row lasts without
	// renewal, behind PgBouncer; it is renewed every third of it.
	instanceLeaseTTL = 30 * time.Second
	// instanceRetry is how often a lost claim is tried again.
	instanceRetry = 2 * time.Second
)

// instanceClaim is one held instance id and the goroutine that keeps it.
type instanceClaim struct {
	e      *Engine
	id     string
	notify func(error)
	// Session mode: the advisory lock's key and its connection (nil while
	// the claim is lost). Row mode: the lease row's name and holder.
	key          int64
	conn         *pgx.Conn
	name, holder string
	// every is the interval between probes (renewals behind PgBouncer).
	every time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// ClaimInstance implements engine.InstanceClaimer.
func (e *Engine) ClaimInstance(ctx context.Context, id string, notify func(error)) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if notify == nil {
		notify = func(error) {}
	}
	sum := sha256.Sum256([]byte(id))
	c := &instanceClaim{
		e: e, id: id, notify: notify,
		key: e.lockKey("instance:" + hex.EncodeToString(sum[:])), name: "instance/" + id,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if e.gc.pgBouncer {
		var token [8]byte
		_, _ = rand.Read(token[:]) // crypto/rand.Read never fails
		c.holder, c.every = hex.EncodeToString(token[:]), instanceLeaseTTL/3
	} else {
		c.every = e.gc.idle / 3
	}
	if err := c.take(ctx); err != nil {
		return err
	}
	e.instanceMu.Lock()
	defer e.instanceMu.Unlock()
	if e.closed.Load() {
		c.release()
		return steaderr.ErrClosed
	}
	e.instances = append(e.instances, c)
	go c.keep()
	return nil
}

// inUse is the error of a claim another store holds.
func (c *instanceClaim) inUse() error {
	how := fmt.Sprintf("a store that died frees it within %v", c.e.gc.idle)
	if c.e.gc.pgBouncer {
		how = fmt.Sprintf("a store that died frees it when its lease lapses, within %v", instanceLeaseTTL)
	}
	return fmt.Errorf("%w: instance id %q is in use by another open store on schema %q: give each process its own id (WithInstanceID) or close the other store; %s",
		steaderr.ErrLeased, c.id, c.e.schema, how)
}

// take claims the id: ErrLeased when another holds it.
func (c *instanceClaim) take(ctx context.Context) error {
	if c.holder != "" {
		var got string
		err := c.e.pool.QueryRow(ctx, c.e.sql(sqlInstanceLeaseAcquire), c.name, c.holder, instanceLeaseTTL.Microseconds()).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return c.inUse()
		}
		if err != nil {
			return fmt.Errorf("claim instance id %q: %w", c.id, interpretError(err))
		}
		return nil
	}
	conn, err := c.e.dialDirect(ctx, nil)
	if err != nil {
		return fmt.Errorf("claim instance id %q: %w", c.id, interpretError(err))
	}
	var ok bool
	err = conn.QueryRow(ctx, c.e.sql(sqlSweepTryLock), c.key, fmt.Sprintf("%dms", c.e.gc.idle.Milliseconds())).Scan(&ok, new(int64))
	if err == nil && !ok {
		err = c.inUse()
	} else if err != nil {
		err = fmt.Errorf("claim instance id %q: %w", c.id, interpretError(err))
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return err
	}
	c.conn = conn
	return nil
}

// alive probes (renews) a held claim: an error wrapping ErrLost when it
// is gone, another error when the probe failed but the claim may stand.
func (c *instanceClaim) alive() error {
	ctx, cancel := context.WithTimeout(context.Background(), leaseProbe)
	defer cancel()
	if c.holder != "" {
		tag, err := c.e.pool.Exec(ctx, c.e.sql(sqlInstanceLeaseRenew), c.name, c.holder, instanceLeaseTTL.Microseconds())
		if err != nil {
			return interpretError(err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: instance id %q: its lease row lapsed or was taken", steaderr.ErrLost, c.id)
		}
		return nil
	}
	if _, err := c.conn.Exec(ctx, c.e.sql(sqlSweepPing)); err != nil {
		if c.conn.IsClosed() {
			return fmt.Errorf("%w: instance id %q: its session ended: %w", steaderr.ErrLost, c.id, interpretError(err))
		}
		return interpretError(err)
	}
	return nil
}

// keep probes the claim every c.every until stop; a lost claim is
// reported and taken again as soon as it is free.
func (c *instanceClaim) keep() {
	defer close(c.done)
	held := true
	t := time.NewTimer(c.every)
	defer t.Stop()
	var last error // the last error reported while lost
	for {
		select {
		case <-c.stop:
			if held {
				c.release()
			}
			return
		case <-t.C:
		}
		if held {
			if err := c.alive(); errors.Is(err, steaderr.ErrLost) {
				held, last = false, err
				c.dropConn()
				c.notify(err)
			}
		}
		if !held {
			ctx, cancel := context.WithTimeout(context.Background(), leaseProbe)
			err := c.take(ctx)
			cancel()
			switch {
			case err == nil:
				held, last = true, nil
				c.notify(nil)
			case errors.Is(err, steaderr.ErrLeased) && !errors.Is(last, steaderr.ErrLeased):
				last = err
				c.notify(err)
			}
		}
		if held {
			t.Reset(c.every)
		} else {
			t.Reset(instanceRetry)
		}
	}
}

// dropConn closes a lost claim's session connection.
func (c *instanceClaim) dropConn() {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.conn.Close(ctx)
		cancel()
		c.conn = nil
	}
}

// release gives the claim up: the session's end releases its lock, the
// lease row is deleted (or left to lapse when that fails).
func (c *instanceClaim) release() {
	if c.holder != "" {
		ctx, cancel := context.WithTimeout(context.Background(), leaseProbe)
		_, _ = c.e.pool.Exec(ctx, c.e.sql(sqlInstanceLeaseRelease), c.name, c.holder)
		cancel()
		return
	}
	c.dropConn()
}

// closeInstances ends every claim, before the pool closes.
func (e *Engine) closeInstances() {
	e.instanceMu.Lock()
	claims := e.instances
	e.instances = nil
	e.instanceMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			close(c.stop)
			<-c.done
		})
	}
	wg.Wait()
}
