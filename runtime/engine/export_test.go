package engine

import "time"

// SetReplayWait shortens how long e lets a duplicate wait for its key's outcome.
func SetReplayWait(e *Engine, d time.Duration) { e.replayWait = d }
