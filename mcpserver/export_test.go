package mcpserver

// OnUse sets the hook told of every request beginning or ending on a
// session, with the requests it then has in flight.
func (h *HTTP) OnUse(f func(id string, inflight int)) { h.testHookUse = f }

// SessionClosed returns a channel closed once session id has ended (at
// once when it is not open).
func (h *HTTP) SessionClosed(id string) <-chan struct{} {
	ch := make(chan struct{})
	ss := h.live()[id]
	go func() {
		if ss != nil {
			ss.Wait()
		}
		close(ch)
	}()
	return ch
}
