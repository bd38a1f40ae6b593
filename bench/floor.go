package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fsyncCosts are the medians of the three kinds of fsync a post issues.
type fsyncCosts struct {
	newFile time.Duration // a freshly created small file: the floor's unit
	dir     time.Duration // a directory after a rename into it
	rewrite time.Duration // a small file rewritten in place
	create  time.Duration // creating a file (open O_CREAT|O_EXCL), not a sync
}

// measureFsync times iters fsyncs of each kind in a fresh folder of the
// filesystem under test. Only the fsync call itself is timed.
func measureFsync(dir string, iters int) (fsyncCosts, error) {
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	var nf, dr, rw, cr []time.Duration
	d, err := os.Open(dir)
	if err != nil {
		return fsyncCosts{}, err
	}
	defer d.Close()
	same, err := os.OpenFile(filepath.Join(dir, "same"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fsyncCosts{}, err
	}
	defer same.Close()
	for i := 0; i < iters; i++ {
		// A new small file, written and synced (what a lock file or a pack costs).
		tmp := filepath.Join(dir, fmt.Sprintf("tmp-%d", i))
		t0 := time.Now()
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		cr = append(cr, time.Since(t0))
		if err != nil {
			return fsyncCosts{}, err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return fsyncCosts{}, err
		}
		t0 = time.Now()
		err = f.Sync()
		nf = append(nf, time.Since(t0))
		f.Close()
		if err != nil {
			return fsyncCosts{}, err
		}
		// Its rename, made durable by syncing the directory.
		if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f-%d", i))); err != nil {
			return fsyncCosts{}, err
		}
		t0 = time.Now()
		err = d.Sync()
		dr = append(dr, time.Since(t0))
		if err != nil {
			return fsyncCosts{}, err
		}
		// The same file rewritten in place.
		data[0] = byte('a' + i%26)
		if _, err := same.WriteAt(data, 0); err != nil {
			return fsyncCosts{}, err
		}
		t0 = time.Now()
		err = same.Sync()
		rw = append(rw, time.Since(t0))
		if err != nil {
			return fsyncCosts{}, err
		}
	}
	return fsyncCosts{newFile: percentile(nf, 50), dir: percentile(dr, 50), rewrite: percentile(rw, 50), create: percentile(cr, 50)}, nil
}
