package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// fsInfo names the filesystem a path lives on, from /proc/self/mountinfo.
type fsInfo struct {
	mountPoint, fsType, source, options string
}

func (f fsInfo) String() string {
	if f.fsType == "" {
		return "unknown (no /proc/self/mountinfo entry)"
	}
	return fmt.Sprintf("%s on %s mounted at %s (%s)", f.fsType, f.source, f.mountPoint, f.options)
}

func filesystemOf(path string) fsInfo {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fsInfo{}
	}
	defer f.Close()
	var best fsInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 || len(fields) < 6 {
			continue
		}
		mp := unescapeMount(fields[4])
		if !(path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) {
			continue
		}
		if len(mp) >= len(best.mountPoint) {
			best = fsInfo{mountPoint: mp, fsType: fields[sep+1], source: fields[sep+2], options: fields[5]}
			if len(fields) > sep+3 {
				best.options += "," + fields[sep+3]
			}
		}
	}
	return best
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// stats summarises the rounds of one measurement.
type stats struct{ vals []float64 }

func (s *stats) add(v float64) { s.vals = append(s.vals, v) }

func (s stats) sorted() []float64 {
	v := append([]float64(nil), s.vals...)
	sort.Float64s(v)
	return v
}

func (s stats) median() float64 { return median(s.vals) }

func (s stats) min() float64 {
	if len(s.vals) == 0 {
		return math.NaN()
	}
	return s.sorted()[0]
}

func (s stats) max() float64 {
	if len(s.vals) == 0 {
		return math.NaN()
	}
	v := s.sorted()
	return v[len(v)-1]
}

func median(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	v := append([]float64(nil), vals...)
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// percentile of durations (p in [0,100]), nearest rank.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	v := append([]time.Duration(nil), d...)
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(v) {
		i = len(v) - 1
	}
	return v[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", a/b)
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

func mibBytes(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
