package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// --pprof-bind-address serves Go's profiles there and nowhere else; by default nowhere.
func TestPprofOnlyWhereAsked(t *testing.T) {
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	pprofAddr := freeAddr(t)
	e := setup(t, "--pprof-bind-address", pprofAddr)
	if code, body := get(t, "http://"+pprofAddr+"/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("GET /debug/pprof/heap on --pprof-bind-address: %d %.80q", code, body)
	}
	for _, addr := range []string{e.api, e.probe} {
		if code, _ := get(t, "http://"+addr+"/debug/pprof/"); code != http.StatusNotFound {
			t.Errorf("GET /debug/pprof/ on %s: %d, want 404", addr, code)
		}
	}
}
