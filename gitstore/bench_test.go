package gitstore

import (
	"fmt"
	"testing"
)

// BenchmarkRead reads packed objects: full entries from a pack written by
// WritePack, and objects of a git pack with long delta chains (through the
// delta cache, as a long-running reader does).
func BenchmarkRead(b *testing.B) {
	b.Run("own-pack", func(b *testing.B) {
		dir := newBare(b)
		r := openRepo(b, dir)
		var objs []Object
		for i := 0; i < 1000; i++ {
			objs = append(objs, NewObject(TypeBlob, textBytes(int64(i), 1024)))
		}
		if _, err := r.WritePack(objs); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(1024)
		i := 0
		for b.Loop() {
			if _, _, err := r.Read(objs[i%len(objs)].ID); err != nil {
				b.Fatal(err)
			}
			i += 7
		}
	})
	b.Run("git-deltas", func(b *testing.B) {
		dir := newBare(b)
		importHistory(b, dir, 60, 1)
		git(b, dir, "repack", "-adfq", "--depth=50", "--window=250")
		ids := allObjectIDs(b, dir)
		r := openRepo(b, dir)
		i := 0
		for b.Loop() {
			if _, _, err := r.Read(ids[i%len(ids)]); err != nil {
				b.Fatal(err)
			}
			i += 7
		}
	})
	b.Run("verified", func(b *testing.B) {
		dir := newBare(b)
		r := openRepo(b, dir)
		o := NewObject(TypeBlob, textBytes(1, 64<<10))
		if _, err := r.WritePack([]Object{o}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(o.Data)))
		for b.Loop() {
			if _, _, err := r.ReadVerified(o.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWritePack writes durable packs (each call syncs two files and
// the directory, so the disk dominates).
func BenchmarkWritePack(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			r := openRepo(b, newBare(b))
			k := 0
			for b.Loop() {
				objs := make([]Object, n)
				for j := range objs {
					objs[j] = blob(fmt.Sprintf("bench object %d\n", k))
					k++
				}
				if _, err := r.WritePack(objs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
