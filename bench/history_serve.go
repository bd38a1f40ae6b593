package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/bernstein/bernstein/server"
)

// The history section's long-running HTTP server: one `bernstein serve`
// on a fresh repository takes posts through its API, one after the other,
// while one event-stream client follows the task (so that the bus scans,
// publishes and delivers every post, as it does for a live page). Its
// VmRSS is read after each sample count, as the MCP server's is.

// serveRSS runs one serve through posts API posts to histKey and reads its
// memory after each sample count. Every post must answer 201 with the next
// version and journal index, and its event must be the next artifact event
// on the stream.
func (b *bench) serveRSS(posts int, samples []int) (mcpRun, error) {
	var m mcpRun
	dir, err := b.mkrepoDir("history-serve-")
	if err != nil {
		return m, err
	}
	tok, before, err := b.setupRepo(dir)
	if err != nil {
		return m, err
	}
	cs, err := b.startServe(dir)
	if err != nil {
		return m, err
	}
	stopped := false
	defer func() {
		if !stopped {
			cs.stop()
		}
	}()
	hc := sseHTTPClient()
	stream, err := openSSE(hc, cs.url+server.EventsPath+"?task="+benchTask)
	if err != nil {
		return m, err
	}
	defer stream.close()
	select {
	case <-stream.ready:
	case <-stream.done:
		return m, fmt.Errorf("the event stream ended before its preamble: %v", stream.err)
	case <-time.After(eventTimeout):
		return m, fmt.Errorf("no event stream preamble in %s", eventTimeout)
	}
	pid := cs.cmd.Process.Pid
	if m.rss0, m.hwm0, err = procMemory(pid); err != nil {
		return m, err
	}
	url := cs.url + "/api/v1/tasks/" + benchTask + "/artifacts"
	post := func(i int) (version, index int64, err error) {
		body, _ := json.Marshal(map[string]any{"key": histKey, "artifact_type": "report", "body": bodyOf("history-serve", i, histBody)})
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, 0, err
		}
		if resp.StatusCode != http.StatusCreated {
			return 0, 0, fmt.Errorf("POST %s: %s: %s", url, resp.Status, firstBytes(data, 200))
		}
		var r struct {
			Key          string `json:"key"`
			Version      int64  `json:"version"`
			JournalIndex int64  `json:"journal_index"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return 0, 0, fmt.Errorf("POST %s answered %q: %w", url, firstBytes(data, 200), err)
		}
		return r.Version, r.JournalIndex, nil
	}
	m.lat = make(durations, 0, posts)
	track, err := newMemTrack(&m, pid, dir, samples)
	if err != nil {
		return m, err
	}
	start := time.Now()
	for i := 0; i < posts; i++ {
		t0 := time.Now()
		v, idx, err := post(i)
		if err != nil {
			return m, fmt.Errorf("post %d: %w", i, err)
		}
		m.lat = append(m.lat, time.Since(t0))
		if v != int64(i+1) || idx != int64(i) {
			return m, fmt.Errorf("post %d: got v%d at journal index %d, want v%d at %d", i, v, idx, i+1, i)
		}
		if _, err := stream.await(histKey, v, idx, eventTimeout); err != nil {
			return m, fmt.Errorf("post %d: %w", i, err)
		}
		if err := track.afterPost(i + 1); err != nil {
			return m, err
		}
	}
	m.elapsed = time.Since(start)
	stream.close()
	stopped = true
	if err := cs.stop(); err != nil {
		return m, err
	}
	third := samples[len(samples)-1] / 3
	for i, s := range samples {
		if abs(s-third) < abs(samples[m.base]-third) {
			m.base = i
		}
	}
	return m, verifyRepo(dir, before, posts)
}
