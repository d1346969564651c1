package bench

import (
	"os"
	"syscall"
)

// allocated is the space a file takes on its file system (512-byte blocks), its size if unknown.
func allocated(info os.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
