package main

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
)

// The growth section: the costs that must not grow with what a repository
// holds, measured in process (they were assertions in `go test` before; a
// test now checks only the correctness beside them). Each figure is a ratio
// against a baseline of the same run:
//   - a long-running Store's live heap after 3N posts against after N (a
//     server holds one Store: it must keep no per-post state);
//   - the objects all compactions rewrite over n single-object writes with
//     Compact(16) after each, against n·(log2 n + 1) (merging everything each
//     time would be quadratic), and the most packs ever open;
//   - the heap Compact uses while merging 40 packs of incompressible blobs,
//     against the bytes it merges (it streams: bounded by the largest object);
//   - a claim-token lookup of a token no claim has, with many claimed tasks,
//     against the first lookup of a fresh Store, which builds the token index
//     by folding every ledger (the cost a lookup had before the index).

var (
	flagGrowthPosts   = flag.Int("growth-posts", 1000, "growth: posts before the Store's first heap reading (the second after 3x as many)")
	flagGrowthWrites  = flag.Int("growth-writes", 2000, "growth: single-object pack writes, each followed by Compact(16)")
	flagGrowthTasks   = flag.Int("growth-tasks", 1000, "growth: claimed tasks behind the token index")
	flagGrowthLookups = flag.Int("growth-lookups", 10000, "growth: garbage-token lookups timed on the warm index")
)

const (
	growthHeapGoal  = 4 << 20 // the live heap may rise by this much from N to 3N posts
	growthMaxPacks  = 16
	growthMergeGoal = 16 << 20 // Compact's heap while merging 40 MiB
	growthTokenGoal = 50.0     // a garbage lookup at most 1/50 of folding every ledger
)

func runGrowth(b *bench) error {
	b.printf("  in process, on fresh repositories; %d round(s) each, medians.\n\n", *flagRounds)
	if err := b.growthHeap(); err != nil {
		return err
	}
	if err := b.growthCompact(); err != nil {
		return err
	}
	if err := b.growthMerge(); err != nil {
		return err
	}
	return b.growthTokens()
}

// liveHeap is the heap in use after two collections.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func (b *bench) growthHeap() error {
	n := *flagGrowthPosts
	var at1, at3 []uint64
	for round := 0; round < *flagRounds; round++ {
		dir, err := b.mkrepoDir("growth-heap-")
		if err != nil {
			return err
		}
		s, tok, err := b.setupStore(dir)
		if err != nil {
			return err
		}
		for i := 1; i <= 3*n; i++ {
			if _, err := s.Post(bernstein.PostRequest{Task: benchTask, Key: fmt.Sprintf("k%d", i%4), Agent: benchAgent, ClaimToken: tok,
				Payload: reportPayload("growth", i, 64)}); err != nil {
				s.Close()
				return fmt.Errorf("post %d: %w", i, err)
			}
			switch i {
			case n:
				at1 = append(at1, liveHeap())
			case 3 * n:
				at3 = append(at3, liveHeap())
			}
		}
		if err := s.Close(); err != nil {
			return err
		}
	}
	h1, h3 := medianU(at1), medianU(at3)
	grew := int64(h3) - int64(h1)
	ok := grew <= growthHeapGoal
	b.printf("  a Store's live heap (4 keys of one task): %s after %d posts, %s after %d (%s; goal: at most +%s)\n",
		mibBytes(h1), n, mibBytes(h3), 3*n, ratio(float64(h3), float64(h1)), mibBytes(growthHeapGoal))
	b.summary(fmt.Sprintf("Store live heap after %d / %d posts", 3*n, n), mibBytes(h3), mibBytes(h1), ratio(float64(h3), float64(h1)), "+"+mibBytes(growthHeapGoal), ok)
	return nil
}

func medianU(v []uint64) uint64 {
	s := append([]uint64(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// objectRepo makes an empty git repository and opens its objects.
func (b *bench) objectRepo(prefix string) (string, *gitstore.Repo, error) {
	dir, err := b.mkrepoDir(prefix)
	if err != nil {
		return "", nil, err
	}
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("git init: %v %s", err, out)
	}
	r, err := gitstore.Open(filepath.Join(dir, ".git", "objects"))
	return dir, r, err
}

func (b *bench) growthCompact() error {
	n := *flagGrowthWrites
	bound := float64(n) * (math.Log2(float64(n)) + 1)
	var rewrittenAll []uint64
	most := 0
	for round := 0; round < *flagRounds; round++ {
		dir, r, err := b.objectRepo("growth-compact-")
		if err != nil {
			return err
		}
		rewritten := 0
		for i := 0; i < n; i++ {
			if _, err := r.WritePack([]gitstore.Object{gitstore.NewObject(gitstore.TypeBlob, fmt.Appendf(nil, "growth %d of round %d\n", i, round))}); err != nil {
				r.Close()
				return err
			}
			pre := packSet(dir)
			if _, err := r.Compact(growthMaxPacks); err != nil {
				r.Close()
				return err
			}
			for p, c := range packSet(dir) {
				if _, ok := pre[p]; !ok {
					rewritten += c
				}
			}
			most = max(most, r.PackCount())
		}
		r.Close()
		if err := fsck(dir); err != nil {
			return err
		}
		if c, err := countObjects(dir); err != nil || c.inPack != n {
			return fmt.Errorf("compaction: the packs hold %d objects, want %d (%v)", c.inPack, n, err)
		}
		rewrittenAll = append(rewrittenAll, uint64(rewritten))
	}
	rw := float64(medianU(rewrittenAll))
	ok := rw <= bound && most <= growthMaxPacks
	b.printf("  %d single-object writes, Compact(%d) after each: %.0f objects rewritten by all compactions, %.2fx n·(log2 n + 1) = %.0f\n",
		n, growthMaxPacks, rw, rw/bound, bound)
	b.printf("  (goal: at most 1x; merging everything each time would be about n/2 = %.0fx); at most %d packs open (goal: %d)\n", float64(n)/2/(math.Log2(float64(n))+1), most, growthMaxPacks)
	b.summary(fmt.Sprintf("objects compactions rewrite over %d writes", n), fmt.Sprintf("%.0f", rw), fmt.Sprintf("%.0f", bound), fmt.Sprintf("%.2fx", rw/bound), "<= 1x", ok)
	return nil
}

// packSet maps each .idx of dir's pack directory to its object count.
func packSet(dir string) map[string]int {
	out := map[string]int{}
	idx, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.idx"))
	for _, p := range idx {
		out[p] = idxCount(p)
	}
	return out
}

// idxCount is the number of objects a version 2 pack index lists (the last
// entry of its fan-out table), 0 if it cannot be read.
func idxCount(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], 8+255*4); err != nil {
		return 0
	}
	return int(binary.BigEndian.Uint32(b[:]))
}

// packBytesOf sums the sizes of the .pack files of dir.
func packBytesOf(dir string) int64 {
	var n int64
	packs, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.pack"))
	for _, p := range packs {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func (b *bench) growthMerge() error {
	const packs, perPack, size = 40, 16, 64 << 10
	var rises []uint64
	var merged int64
	for round := 0; round < *flagRounds; round++ {
		dir, r, err := b.objectRepo("growth-merge-")
		if err != nil {
			return err
		}
		buf := make([]byte, size)
		for p := 0; p < packs; p++ {
			var objs []gitstore.Object
			for k := 0; k < perPack; k++ {
				rand.Read(buf)
				objs = append(objs, gitstore.NewObject(gitstore.TypeBlob, append([]byte(nil), buf...)))
			}
			if _, err := r.WritePack(objs); err != nil {
				r.Close()
				return err
			}
		}
		r.Close()
		merged = packBytesOf(dir)
		r, err = gitstore.Open(filepath.Join(dir, ".git", "objects"))
		if err != nil {
			return err
		}
		var n int
		rise := peakHeapRise(func() { n, err = r.Compact(growthMaxPacks) })
		r.Close()
		if err != nil || n != packs {
			return fmt.Errorf("merge: Compact = %d, %v", n, err)
		}
		if err := fsck(dir); err != nil {
			return err
		}
		rises = append(rises, rise)
	}
	rise := medianU(rises)
	ok := rise <= growthMergeGoal
	b.printf("  Compact merging %d packs (%s of incompressible blobs of %d KiB): the heap rose by %s at most (%.1f%% of what it merged; goal: under %s)\n",
		packs, mibBytes(uint64(merged)), size>>10, mibBytes(rise), 100*float64(rise)/float64(merged), mibBytes(growthMergeGoal))
	b.summary("heap of Compact / bytes it merges", mibBytes(rise), mibBytes(uint64(merged)), fmt.Sprintf("%.1f%%", 100*float64(rise)/float64(merged)), "< "+mibBytes(growthMergeGoal), ok)
	return nil
}

// peakHeapRise runs do while the heap in use is sampled every 200µs, and
// returns the highest sample's rise over the heap before.
func peakHeapRise(do func()) uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.HeapInuse > peak.Load() {
			peak.Store(m.HeapInuse)
		}
	}
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
	if peak.Load() < base {
		return 0
	}
	return peak.Load() - base
}

func (b *bench) growthTokens() error {
	n := *flagGrowthTasks
	var builds, lookups []time.Duration
	for round := 0; round < *flagRounds; round++ {
		dir, err := b.mkrepoDir("growth-tokens-")
		if err != nil {
			return err
		}
		s, _, err := b.setupStore(dir)
		if err != nil {
			return err
		}
		var tok string
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("T-%04d", i)
			if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
				s.Close()
				return err
			}
			if tok, err = s.Claim(id, fmt.Sprintf("agent-%d", i)); err != nil {
				s.Close()
				return err
			}
		}
		s.Close()
		// A fresh Store's first lookup folds every ledger to build the index.
		fresh, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
		if err != nil {
			return err
		}
		start := time.Now()
		c, err := fresh.ClaimByToken(tok)
		builds = append(builds, time.Since(start))
		if err != nil || c.Task != fmt.Sprintf("T-%04d", n-1) {
			fresh.Close()
			return fmt.Errorf("tokens: the last claim resolved to %+v, %v", c, err)
		}
		start = time.Now()
		for i := 0; i < *flagGrowthLookups; i++ {
			if _, err := fresh.ClaimByToken(fmt.Sprintf("bct_garbage-%d", i)); err == nil {
				fresh.Close()
				return fmt.Errorf("tokens: a garbage token resolved")
			}
		}
		lookups = append(lookups, time.Since(start)/time.Duration(*flagGrowthLookups))
		fresh.Close()
	}
	build, lookup := durations(builds).median(), durations(lookups).median()
	q := float64(build) / float64(max(lookup, 1))
	b.printf("  claim-token lookups with %d claimed tasks: a token no claim has %s (mean of %d on the warm index); the first\n", n, ms(lookup), *flagGrowthLookups)
	b.printf("  lookup of a fresh Store, which folds every ledger, %s: %.0fx (goal: at least %.0fx)\n", ms(build), q, growthTokenGoal)
	b.summary(fmt.Sprintf("garbage token lookup, %d tasks / fold of every ledger", n), ms(lookup), ms(build), fmt.Sprintf("1/%.0f", q), fmt.Sprintf("<= 1/%.0f", growthTokenGoal), q >= growthTokenGoal)
	return nil
}
