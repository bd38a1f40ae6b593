package heads

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Positions in the heads file: what `audit verify --since` needs of the
// heads this host's writer remembers is the chains whose head changed
// after an audit checkpoint (those before it were checked when it was
// taken), not every chain the writer ever extended. A write appends one
// line per chain it moves, so the chains changed since a checkpoint are
// the lines appended after the file's length at that moment, as long as
// the file is the same one: a rewrite (a new snapshot, renamed over the
// file, once per 1 MiB of appended lines: some 2,000 posts) or a tail lost
// to a machine crash (the appends are not synced) makes the position
// unusable, and the caller checks every head again.
//
// A position is "none" (no heads file and no heads kept the older way,
// one file per chain), or "v1 <inode> <snapshot bytes> <length> <CRC-32
// of the 256 bytes before length, 8 hex digits>". The file is the writer's
// own, in BERNSTEIN_HOME, which the attacker this design faces cannot
// write; the checks only tell a rewrite or a lost tail from appends.

const (
	positionNone = "none"
	positionTail = 256 // bytes before a position whose checksum it keeps
)

// Position is where the heads file stands now: every head written before
// it is in the file's first bytes. "" when there is no usable position
// (heads still kept one file per chain).
func (k *Keeper) Position() (string, error) {
	f := k.file()
	if f == nil {
		return positionNone, nil
	}
	pos, err := f.position()
	if pos != positionNone || err != nil {
		return pos, err
	}
	legacy, err := k.legacyHeads()
	if err != nil || len(legacy) > 0 {
		return "", err
	}
	return positionNone, nil
}

// position is Keeper.Position for this file: positionNone when there is
// no file.
func (h *headsFile) position() (string, error) {
	fh, err := os.Open(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		return positionNone, nil
	}
	if err != nil {
		return "", err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return "", err
	}
	head := make([]byte, 256)
	n, _ := fh.ReadAt(head, 0)
	hl, snap, ok := readHeader(head[:n], h.writer)
	if !ok {
		return "", nil
	}
	// Whole lines only: a line being appended now belongs after the
	// position (its chain is checked next time).
	size := st.Size()
	if size < hl+snap {
		return "", nil
	}
	if size > hl+snap {
		tail := make([]byte, min(size-hl-snap, 64<<10))
		for {
			at := size - int64(len(tail))
			m, err := fh.ReadAt(tail, at)
			if err != nil && err != io.EOF {
				return "", err
			}
			if nl := bytes.LastIndexByte(tail[:m], '\n'); nl >= 0 {
				size = at + int64(nl) + 1
				break
			}
			if at == hl+snap {
				size = at
				break
			}
			size = at
			tail = tail[:min(size-hl-snap, int64(len(tail)))]
		}
	}
	sum, err := tailSum(fh, size)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("v1 %d %d %d %08x", inode(st), snap, size, sum), nil
}

// tailSum is the checksum of the positionTail bytes before end.
func tailSum(f *os.File, end int64) (uint32, error) {
	from := max(0, end-positionTail)
	b := make([]byte, end-from)
	if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
		return 0, err
	}
	return crc32.ChecksumIEEE(b), nil
}

// ChangedSince returns the chains (journal/<task>, ledger/<task>,
// spine/<writer>, ...) whose head this host's writer wrote or forgot after
// position pos; ok false when pos cannot tell (no position, the file
// rewritten or cut short since): the caller then checks every head.
func (k *Keeper) ChangedSince(pos string) (chains []string, ok bool, err error) {
	if pos == "" {
		return nil, false, nil
	}
	f := k.file()
	if f == nil {
		return nil, pos == positionNone, nil
	}
	if pos == positionNone {
		if _, err := os.Stat(f.path); !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		legacy, err := k.legacyHeads()
		if err != nil {
			return nil, false, err
		}
		return nil, len(legacy) == 0, nil
	}
	return f.changedSince(pos)
}

// changedSince is Keeper.ChangedSince for this file and a position of it.
func (h *headsFile) changedSince(pos string) (chains []string, ok bool, err error) {
	fh, err := os.Open(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer fh.Close()
	var ino uint64
	var snap, at int64
	var sum uint32
	if f := strings.Fields(pos); len(f) != 5 || f[0] != "v1" {
		return nil, false, nil
	} else {
		var e1, e2, e3, e4 error
		ino, e1 = strconv.ParseUint(f[1], 10, 64)
		snap, e2 = strconv.ParseInt(f[2], 10, 64)
		at, e3 = strconv.ParseInt(f[3], 10, 64)
		s, e4 := strconv.ParseUint(f[4], 16, 32)
		if errors.Join(e1, e2, e3, e4) != nil {
			return nil, false, nil
		}
		sum = uint32(s)
	}
	st, err := fh.Stat()
	if err != nil {
		return nil, false, err
	}
	head := make([]byte, 256)
	n, _ := fh.ReadAt(head, 0)
	hl, snapNow, hok := readHeader(head[:n], h.writer)
	if !hok || inode(st) != ino || snapNow != snap || at < hl+snap || st.Size() < at {
		return nil, false, nil
	}
	if got, err := tailSum(fh, at); err != nil || got != sum {
		return nil, false, err
	}
	b := make([]byte, st.Size()-at)
	if _, err := fh.ReadAt(b, at); err != nil && err != io.EOF {
		return nil, false, err
	}
	seen := map[string]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		// A line cut short (or being appended) names no chain: it wrote
		// no head, so there is nothing of it to check.
		if e, ok := decodeLine(line); ok && !seen[e.chain] {
			seen[e.chain] = true
			chains = append(chains, e.chain)
		}
	}
	return chains, true, nil
}
