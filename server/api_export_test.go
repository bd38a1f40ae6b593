package server

// APIComputations reports how often the API computed the answer it names
// ("task", "report", "journal" of task; "productions" with task "").
func (s *Server) APIComputations(name, task string) int {
	if task != "" {
		name += "\x00" + task
	}
	return s.api().memo.computations(name)
}

// SetListKeepsAnswers sets how many tasks a list may have and still keep
// its tasks' answers (listKeepsAnswers).
func (s *Server) SetListKeepsAnswers(n int) { s.api().keepAnswers = n }
