//go:build unix

package cli

import (
	"os"
	"syscall"
)

// keepOwner gives f the owner and group of like, as far as this process
// may (a user may keep its own file's group; root any owner).
func keepOwner(f *os.File, like os.FileInfo) {
	if st, ok := like.Sys().(*syscall.Stat_t); ok {
		_ = f.Chown(int(st.Uid), int(st.Gid))
	}
}
