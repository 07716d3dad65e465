package runner

// Handed is how many syncs r's scheduling loop has handed to its workers.
func Handed(r *Runner) int64 { return r.handed.Load() }

// Idle reports whether every sync handed to a worker has been reported
// back to the loop.
func Idle(r *Runner) bool { return r.returned.Load() == r.handed.Load() }
