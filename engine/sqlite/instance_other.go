//go:build !unix

package sqlite

import (
	"os"
	"sync"
)

// Without flock, claims exclude each other within this process only.
var locked sync.Map // lock file name → struct{}

func tryLock(f *os.File) error {
	if _, held := locked.LoadOrStore(f.Name(), struct{}{}); held {
		return errLocked
	}
	return nil
}

func unlock(f *os.File) { locked.Delete(f.Name()) }
