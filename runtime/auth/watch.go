package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"time"
)

// filePollInterval is how often the tokens file and the stream-token key file are looked
// at. A file is read and hashed on every tick rather than watched with fsnotify: a
// Kubernetes Secret or ConfigMap volume is updated by swapping a symbolic link to a new
// directory, and many editors and `mv` replace the file, so a watch on the file keeps
// watching the old one and at best reports its removal; watching the directory instead
// needs the same content comparison anyway. Hashing rather than comparing modification
// time and size also catches a rewrite in place within the file system's timestamp
// granularity. The files are small (a tokens file at most maxTokensFileSize), so two
// reads a second cost microseconds, and a removed token is refused well within the 2 s
// spec/authentication.md allows (see pollFile).
const filePollInterval = 500 * time.Millisecond

// pollFile reads the file at path every filePollInterval until ctx ends, and calls
// changed with its content each time it differs from the content last handed over
// (loaded, at first). New content is handed over once two consecutive reads agree on it,
// so that a file caught half rewritten in place (truncated, then written) is not taken
// for the new content; a change still arrives within two polls. A read error is given
// to failed, once until it changes or a read succeeds.
func pollFile(ctx context.Context, path string, loaded []byte, read func(string) ([]byte, error),
	changed func([]byte), failed func(error)) {
	t := time.NewTicker(filePollInterval)
	defer t.Stop()
	var (
		seen        = sha256.Sum256(loaded) // the content last handed over
		pending     [sha256.Size]byte
		hasPending  bool   // pending was read once and differs from seen
		lastReadErr string // the read error last reported
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := read(path)
		if err != nil {
			if err.Error() != lastReadErr {
				lastReadErr = err.Error()
				failed(err)
			}
			continue
		}
		lastReadErr = ""
		digest := sha256.Sum256(data)
		switch {
		case digest == seen:
			hasPending = false
			continue
		case !hasPending || digest != pending:
			pending, hasPending = digest, true
			continue
		}
		hasPending = false
		seen = digest
		changed(data)
	}
}

// readFileLimited reads the file at path, what it is named in errors, up to limit bytes;
// a larger file is an error.
func readFileLimited(path, what string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s %s: larger than %d bytes", what, path, limit)
	}
	return data, nil
}
