package gitstore

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// noisePacks writes packs packs of perPack incompressible blobs of size
// bytes each into the bare repository gitDir, and returns the blobs' ids.
// The blobs are made and dropped pack by pack, so that the heap holds none
// of them afterwards.
func noisePacks(t testing.TB, gitDir string, packs, perPack, size int) []Oid {
	t.Helper()
	r := openRepo(t, gitDir)
	var ids []Oid
	for range packs {
		objs := make([]Object, perPack)
		for j := range objs {
			objs[j] = NewObject(TypeBlob, randomBytes(t, size))
			ids = append(ids, objs[j].ID)
		}
		if _, err := r.WritePack(objs); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// packBytes returns the total size of the .pack files in gitDir.
func packBytes(t testing.TB, gitDir string) int64 {
	t.Helper()
	var n int64
	for _, b := range packBases(t, gitDir) {
		n += fileSize(t, b+".pack")
	}
	return n
}

// sampleHeap runs do while a goroutine samples the heap in use every 200µs,
// and returns the highest sample.
func sampleHeap(do func()) uint64 {
	var peak atomic.Uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > peak.Load() {
			peak.Store(ms.HeapInuse)
		}
	}
	sample()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	do()
	close(stop)
	wg.Wait()
	sample()
	return peak.Load()
}

// TestCompactRefusesCorruptEntry: an entry whose bytes do not match the
// CRC-32 its index records is not copied into a merged pack; Compact fails
// and leaves every input in place, and no temporary file.
func TestCompactRefusesCorruptEntry(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	var bases []string
	for i := range 3 {
		base, err := r.WritePack([]Object{NewObject(TypeBlob, textBytes(int64(i), 200))})
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, base)
	}
	// A byte of the stored blob's data in the middle pack.
	path := bases[1] + ".pack"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[12+50] ^= 0x20
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o444); err != nil {
		t.Fatal(err)
	}
	n, err := openRepo(t, dir).Compact(1)
	if !errors.Is(err, ErrCorrupt) || n != 0 {
		t.Fatalf("Compact over a corrupt entry = %d, %v", n, err)
	}
	noTempFiles(t, dir)
	if got := packBases(t, dir); !slices.Equal(got, slices.Sorted(slices.Values(bases))) {
		t.Fatalf("packs after the failed Compact: %q", got)
	}
}

// TestCompactEmptyPack merges a pack of no objects (git writes one for an
// empty pack-objects) with packs of ours.
func TestCompactEmptyPack(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	gitIn(t, dir, nil, "pack-objects", "-q", filepath.Join(dir, "objects", "pack", "pack"))
	r := openRepo(t, dir)
	objs := []Object{blob("one\n"), blob("two\n")}
	for _, o := range objs {
		if _, err := r.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
	}
	if r.PackCount() != 3 {
		t.Fatalf("%d packs", r.PackCount())
	}
	if n, err := r.Compact(1); err != nil || n != 3 || r.PackCount() != 1 {
		t.Fatalf("Compact = %d, %v; %d packs", n, err, r.PackCount())
	}
	if got := checkPacksOnDisk(t, dir, r); got != len(objs) {
		t.Fatalf("the merged pack holds %d objects", got)
	}
}

// TestIndexLargeOffsets writes an index with offsets from 2 GiB on (a pack
// that large is not made in a test) and reads it back.
func TestIndexLargeOffsets(t *testing.T) {
	t.Parallel()
	offs := []int64{12, 0x7fffffff, 0x80000000, 5 << 30, 1 << 40, 4096}
	var ents []idxEntry
	for i, off := range offs {
		id := HashObject(TypeBlob, []byte(strconv.Itoa(i)))
		ents = append(ents, idxEntry{id: id, crc: uint32(i) * 7919, off: off})
	}
	slices.SortFunc(ents, func(a, b idxEntry) int { return bytes.Compare(a.id[:], b.id[:]) })
	var b bytes.Buffer
	sum := bytes.Repeat([]byte{0xab}, 20)
	if err := writeIndex(&b, ents, sum); err != nil {
		t.Fatal(err)
	}
	p := &packIndex{idx: b.Bytes()}
	if err := p.parseIndex(); err != nil {
		t.Fatal(err)
	}
	if p.count != len(offs) || len(p.large) != 3*8 {
		t.Fatalf("index of %d objects, %d large offsets", p.count, len(p.large)/8)
	}
	for _, e := range ents {
		i := p.find(e.id)
		if i < 0 {
			t.Fatalf("%s not found", e.id)
		}
		off, err := p.offsetAt(i)
		if err != nil || off != e.off || binary.BigEndian.Uint32(p.crcs[i*4:]) != e.crc {
			t.Fatalf("%s: offset %d, %v, crc %x; want %d, %x", e.id, off, err, binary.BigEndian.Uint32(p.crcs[i*4:]), e.off, e.crc)
		}
	}
	if s := sha1.Sum(b.Bytes()[:b.Len()-20]); !bytes.Equal(s[:], b.Bytes()[b.Len()-20:]) || !bytes.Equal(b.Bytes()[b.Len()-40:b.Len()-20], sum) {
		t.Fatal("bad index trailer")
	}
	// An object twice is refused.
	if err := writeIndex(io.Discard, append(ents[:1:1], ents[0]), sum); err == nil {
		t.Fatal("an index naming an object twice was written")
	}
}

// BenchmarkCompact merges 40 packs of 1 MiB of incompressible blobs (each
// iteration on a fresh copy of them) and reports the heap it used.
func BenchmarkCompact(b *testing.B) {
	src := newBare(b)
	noisePacks(b, src, 40, 16, 64<<10)
	srcPack := filepath.Join(src, "objects", "pack")
	total := packBytes(b, src)
	b.SetBytes(total)
	var peak int64
	for b.Loop() {
		b.StopTimer()
		dir := newBare(b)
		dst := filepath.Join(dir, "objects", "pack")
		ents, err := os.ReadDir(srcPack)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range ents {
			copyFile(b, filepath.Join(srcPack, e.Name()), filepath.Join(dst, e.Name()))
		}
		r := openRepo(b, dir)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.StartTimer()
		heap := sampleHeap(func() {
			if n, err := r.Compact(16); err != nil || n != 40 {
				b.Fatalf("Compact = %d, %v", n, err)
			}
		})
		peak = max(peak, int64(heap)-int64(ms.HeapInuse))
		b.StopTimer()
		r.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
