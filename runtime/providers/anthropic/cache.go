package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Prompt caching (README.md, "Prompt caching"): anthropic.cache_control names the input
// parts whose blocks carry a cache breakpoint. The parts are the request's own, so the
// extension adds no content: it only marks where the prefix Anthropic caches ends.

// extCacheControl is the extension key of the breakpoints.
const extCacheControl = "anthropic.cache_control"

// msgCacheControl refuses breakpoints a request built past the decoder can hold: an
// entry of the wrong form, or one naming a part the request does not have.
const msgCacheControl = "anthropic.cache_control must name input parts of the request, at most four"

// cacheControl is a block's cache_control member.
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// breakpoints reads anthropic.cache_control for a request of parts input parts: the
// cache control of each named part, by index; nil when the key is absent. Naming a part
// twice names it once, with the longer TTL.
func breakpoints(ext map[string]json.RawMessage, parts int) (map[int]*cacheControl, *protocol.Error) {
	raw, ok := ext[extCacheControl]
	if !ok {
		return nil, nil
	}
	spec, _ := protocol.LookupExtension(extCacheControl)
	var entries []string
	if !spec.Valid(raw) || json.Unmarshal(raw, &entries) != nil {
		return nil, invalid(msgCacheControl)
	}
	marks := make(map[int]*cacheControl, len(entries))
	for _, e := range entries {
		index, ttl, _ := strings.Cut(e, ":")
		i, err := strconv.Atoi(index)
		if err != nil || i >= parts {
			return nil, invalid(msgCacheControl)
		}
		if ttl == "5m" {
			ttl = "" // the API's default
		}
		if prev, dup := marks[i]; dup && prev.TTL == "1h" {
			continue
		}
		marks[i] = &cacheControl{Type: "ephemeral", TTL: ttl}
	}
	return marks, nil
}
