package bedrock

import "time"

// SetMetadataGrace shortens the wait after messageStop for a test and returns the
// function that restores it.
func SetMetadataGrace(d time.Duration) (restore func()) {
	old := metadataGrace
	metadataGrace = d
	return func() { metadataGrace = old }
}
