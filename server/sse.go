package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bernstein/bernstein/refs"
)

// EventsPath is the server-sent event stream.
const EventsPath = "/api/v1/events"

// Stream timing: a heartbeat comment on an idle stream keeps proxies from
// closing it; a client that cannot take an event within writeTimeout is
// dropped (it resumes with Last-Event-ID), so it never holds up the bus.
const (
	heartbeat    = 15 * time.Second
	writeTimeout = 10 * time.Second
)

// heartbeat is how long a stream stays silent before a heartbeat comment.
func (s *Server) heartbeat() time.Duration {
	if s.opts.heartbeat > 0 {
		return s.opts.heartbeat
	}
	return heartbeat
}

// events streams the bus: GET /api/v1/events[?task=ID]. A client resumes
// after the event named by the Last-Event-ID header (which browsers send
// on reconnecting), or, on its first connection, by ?last_event_id=N (the
// id a page was rendered at).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	task := r.URL.Query().Get("task")
	if task != "" {
		if err := refs.ValidateTaskID(task); err != nil {
			writeError(w, http.StatusBadRequest, "task", err.Error())
			return
		}
	}
	last := int64(-1) // no id given: from now on
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("last_event_id")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "last_event_id", fmt.Sprintf("%q is not an event id", v))
			return
		}
		last = n
		break
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sub := s.bus.Subscribe(task, last)
	write := func(text string) bool {
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprint(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 2000\n: bernstein events\n\n") {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(r.Context(), s.heartbeat())
		evs, err := sub.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			if !write(": heartbeat\n\n") {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		var b strings.Builder
		for _, e := range evs {
			fmt.Fprintf(&b, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, e.Data)
		}
		if !write(b.String()) {
			return
		}
	}
}

// APIError is the one JSON error every API refusal carries.
type APIError struct {
	Error struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes one JSON error naming the field at fault.
func writeError(w http.ResponseWriter, status int, field, msg string) {
	var e APIError
	e.Error.Field, e.Error.Message = field, msg
	writeJSON(w, status, e)
}

// writeJSON writes v as the JSON body of a response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"field":"","message":"encoding the response failed"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
