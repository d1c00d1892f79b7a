package redis_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// Many executions appending at once share pipelines; each execution's log still holds
// every event once, in order, and each Append got its own script's answer (a stale
// sequence is refused while the others in its pipeline are stored).
func TestConcurrentAppendsShareNothingButPipelines(t *testing.T) {
	ctx := t.Context()
	s := open(t, newPrefix(t), redisstore.WithRetention(time.Hour))
	const executions = 48
	var wg sync.WaitGroup
	errs := make(chan error, executions)
	for i := range executions {
		wg.Go(func() {
			id := fmt.Sprintf("exe_pipe_%d", i)
			if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
				errs <- err
				return
			}
			evs := storetest.CompletedExecution(id)
			for j, ev := range evs {
				if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
					errs <- fmt.Errorf("%s event %d: %w", id, ev.Sequence, err)
					return
				}
				if j == 3 {
					stale := evs[1]
					stale.Data = []byte(`{"attempt":9,"deployment":"ai/other","provider":"openai","model":"x"}`)
					if err := s.Append(ctx, eventstore.NoFence, stale); !errors.Is(err, eventstore.ErrSequence) {
						errs <- fmt.Errorf("%s: a stale append got %w, want ErrSequence", id, err)
						return
					}
				}
			}
			got, err := s.Read(ctx, id, 0, 0)
			if err != nil {
				errs <- err
				return
			}
			if len(got) != len(evs) {
				errs <- fmt.Errorf("%s: %d events, want %d", id, len(got), len(evs))
				return
			}
			for k, ev := range got {
				if ev.Sequence != uint64(k+1) || ev.Type != evs[k].Type || string(ev.Data) != string(evs[k].Data) {
					errs <- fmt.Errorf("%s: event %d is %d %s", id, k+1, ev.Sequence, ev.Type)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Appends waiting for a pipeline when the Store closes return ErrClosed; none hangs.
func TestAppendsEndWhenTheStoreCloses(t *testing.T) {
	ctx := t.Context()
	s := open(t, newPrefix(t), redisstore.WithRetention(time.Hour))
	const executions = 32
	for i := range executions {
		if _, err := s.Create(ctx, eventstore.Record{ID: fmt.Sprintf("exe_close_%d", i)}, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range executions {
		wg.Go(func() {
			id := fmt.Sprintf("exe_close_%d", i)
			for _, ev := range storetest.CompletedExecution(id) {
				if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
					if !errors.Is(err, eventstore.ErrClosed) {
						t.Errorf("%s: Append after Close: %v, want ErrClosed", id, err)
					}
					return
				}
			}
		})
	}
	time.Sleep(5 * time.Millisecond)
	s.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("appends still waiting 10s after Close")
	}
}
