package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/steadkit/stead/steaderr"
)

// instanceClaim is a held instance id: its lock file, open and locked.
type instanceClaim struct {
	name string
	f    *os.File
}

// ClaimInstance implements engine.InstanceClaimer with a lock file beside
// the database, PATH-instance-HASH (HASH: of the id), locked exclusively
// for as long as the engine is open: the lock is the open file's, so it
// excludes a second engine in the same process as well as in another, and
// the operating system drops it when its process exits, however it ends.
// Close removes the file. notify is never called: the claim cannot be
// lost while the process lives.
func (e *Engine) ClaimInstance(ctx context.Context, id string, _ func(error)) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(id))
	name := e.path + "-instance-" + hex.EncodeToString(sum[:16])
	f, err := lockFile(name)
	if errors.Is(err, errLocked) {
		holder := ""
		if b, err := os.ReadFile(name); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				holder = fmt.Sprintf(" (process %d)", pid)
			}
		}
		return fmt.Errorf("sqlite: %w: instance id %q is in use by another open store on %s%s: give each process its own id (WithInstanceID) or close the other store",
			steaderr.ErrLeased, id, e.path, holder)
	}
	if err != nil {
		return fmt.Errorf("sqlite: claim instance id %q: %w", id, err)
	}
	// The holder's process id, for the error above; the lock is what
	// counts, so a failed write is no failure.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	e.instanceMu.Lock()
	defer e.instanceMu.Unlock()
	c := &instanceClaim{name: name, f: f}
	if e.closed.Load() {
		_ = c.release()
		return steaderr.ErrClosed
	}
	e.instances = append(e.instances, c)
	return nil
}

// release removes the lock file and then unlocks it by closing it, so
// that a claimer waiting on the removed file sees it removed and locks a
// new one (see lockFile).
func (c *instanceClaim) release() error {
	err := os.Remove(c.name)
	unlock(c.f)
	return errors.Join(err, c.f.Close())
}

// releaseInstances releases every claim the engine holds.
func (e *Engine) releaseInstances() error {
	e.instanceMu.Lock()
	claims := e.instances
	e.instances = nil
	e.instanceMu.Unlock()
	var errs []error
	for _, c := range claims {
		errs = append(errs, c.release())
	}
	return errors.Join(errs...)
}

// errLocked: another open file holds the lock.
var errLocked = errors.New("locked")

// lockFile creates (or opens) name and locks it exclusively without
// waiting: errLocked when another holds it. A holder releasing it removes
// the file first, so a file locked here that is no longer the one at name
// is let go and name tried again.
func lockFile(name string) (*os.File, error) {
	for {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := tryLock(f); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		held, err := f.Stat()
		if err != nil {
			unlock(f)
			return nil, errors.Join(err, f.Close())
		}
		now, err := os.Stat(name)
		if err == nil && os.SameFile(held, now) {
			return f, nil
		}
		unlock(f)
		if err := f.Close(); err != nil {
			return nil, err
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
}
