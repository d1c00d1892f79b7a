package openai

import (
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// respProjection projects an execution's events onto OpenAI's Responses stream
// (spec/compat.md, "OpenAI Responses": "Streaming events").
//
// It is a pure function of the events, fed in sequence order from the first: each
// native event maps to zero or more Responses events, numbered from 0 in the order they
// are produced. Replaying the log from its start therefore numbers every event as the
// first projection did, and a stream that resumes after sequence_number N
// (starting_after) replays the projection from the execution's first event and writes
// only the events numbered above N. A resume costs that replay, a read of every event
// recorded so far: exactness without any state kept for the stream.
//
// The mapping, native → Responses:
//
//	route.selected (first)     response.created, response.in_progress
//	output.delta               response.output_item.added and response.content_part.added
//	                           for a new output part, then response.output_text.delta
//	tool.call.started          response.output_item.added (a function_call item)
//	tool.call.arguments.delta  response.function_call_arguments.delta
//	usage.reported             (kept for the final response's usage)
//	execution.completed        for each item in order: response.output_text.done and
//	                           response.content_part.done (messages) or
//	                           response.function_call_arguments.done (calls), then
//	                           response.output_item.done; then response.completed, or
//	                           response.incomplete for an output limit or a filter
//	execution.failed           response.failed (status failed, or cancelled)
//
// Items are numbered in the order they first appear and stay open until the execution
// ends, so that the deltas of a text part and of calls may interleave as the provider
// sent them. The other events (progress, attempt failures, results) map to nothing.
type respProjection struct {
	view    respView
	next    int64 // sequence_number of the next event
	after   int64 // events numbered at most this are produced but not written
	started bool  // response.created is out
	texts   map[int]*respItem
	calls   map[string]*respItem
	// pending holds argument fragments of calls whose tool.call.started has not come
	// (adapters announce a call first; this keeps the projection total all the same).
	pending map[string][]string
	ended   bool
}

// newRespProjection returns the projection of execution id, created at createdAt with
// metadata, writing the events numbered above after (-1: all).
func newRespProjection(view respView, after int64) *respProjection {
	view.status = respInProgress
	return &respProjection{view: view, after: after,
		texts: map[int]*respItem{}, calls: map[string]*respItem{}}
}

// apply appends the frames of the Responses events ev maps to onto dst. Events after the
// terminal one, and events whose data does not decode (the store records neither), map
// to nothing.
func (p *respProjection) apply(dst []byte, ev *protocol.Event) []byte {
	if p.ended {
		return dst
	}
	switch ev.Type {
	case protocol.EventRouteSelected:
		var d protocol.RouteSelectedData
		if protocol.UnmarshalData(ev.Data, &d) == nil {
			p.view.model = d.Model
		}
		return p.start(dst)
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return dst
		}
		dst = p.start(dst)
		it := p.texts[d.Index]
		if it == nil {
			it = p.addItem(&respItem{id: messageID(p.view.id, d.Index)})
			p.texts[d.Index] = it
			dst = p.itemAdded(dst, it)
			dst = p.contentPart(dst, it, "response.content_part.added", "")
		}
		if len(d.Text) > 0 {
			prev := it.body.Len()
			it.body.Write(d.Text)
			dst = p.textDelta(dst, it, it.body.String()[prev:])
		}
		return dst
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if protocol.UnmarshalData(ev.Data, &d) != nil {
			return dst
		}
		dst = p.start(dst)
		if p.calls[d.CallID] != nil {
			return dst
		}
		it := p.addItem(&respItem{call: true, id: callItemID(p.view.id, d.CallID), callID: d.CallID, name: d.Name})
		p.calls[d.CallID] = it
		dst = p.itemAdded(dst, it)
		for _, frag := range p.pending[d.CallID] {
			dst = p.argsDelta(dst, it, frag)
		}
		delete(p.pending, d.CallID)
		return dst
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if protocol.UnmarshalData(ev.Data, &d) != nil || d.Delta == "" {
			return dst
		}
		it := p.calls[d.CallID]
		if it == nil {
			if p.pending == nil {
				p.pending = map[string][]string{}
			}
			p.pending[d.CallID] = append(p.pending[d.CallID], d.Delta)
			return dst
		}
		return p.argsDelta(dst, it, d.Delta)
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		if protocol.UnmarshalData(ev.Data, &d) == nil {
			p.view.usage = append(p.view.usage, d.Usage...)
		}
		return dst
	case protocol.EventCompleted:
		var d protocol.CompletedData
		if protocol.UnmarshalData(ev.Data, &d) != nil {
			return dst
		}
		dst = p.start(dst)
		p.ended = true
		p.view.status, p.view.incomplete = respStatusOf(protocol.StatusCompleted, d.FinishReason, nil)
		p.view.completedAt = ev.Timestamp
		status := p.view.itemStatus()
		for i, it := range p.view.items {
			if it.call {
				dst = p.argsDone(dst, it, i)
			} else {
				dst = p.textDone(dst, it, i)
				dst = p.contentPart(dst, it, "response.content_part.done", it.body.String())
			}
			if b, ok := p.begin(dst, "response.output_item.done"); ok {
				dst = appendOutputIndex(b, i)
				dst = append(dst, `,"item":`...)
				dst = end(appendItem(dst, it, status))
			}
		}
		if p.view.status == respIncomplete {
			return p.lifecycle(dst, "response.incomplete")
		}
		return p.lifecycle(dst, "response.completed")
	case protocol.EventFailed:
		var d protocol.FailedData
		if protocol.UnmarshalData(ev.Data, &d) != nil {
			return dst
		}
		dst = p.start(dst)
		p.ended = true
		p.view.status, _ = respStatusOf(protocol.StatusFailed, "", d.Error)
		p.view.err = d.Error
		return p.lifecycle(dst, "response.failed")
	}
	return dst
}

// start writes response.created and response.in_progress before the first event that
// has something to say: the first route (which names the model), or an end that came
// before any.
func (p *respProjection) start(dst []byte) []byte {
	if p.started {
		return dst
	}
	p.started = true
	dst = p.lifecycle(dst, "response.created")
	return p.lifecycle(dst, "response.in_progress")
}

// addItem appends an item to the response's output.
func (p *respProjection) addItem(it *respItem) *respItem {
	it.index = len(p.view.items)
	p.view.items = append(p.view.items, it)
	return it
}

// begin starts the frame of the next event, of type typ, and reports whether it is to be
// written; an event numbered at most p.after is only counted.
func (p *respProjection) begin(dst []byte, typ string) ([]byte, bool) {
	seq := p.next
	p.next++
	if seq <= p.after {
		return dst, false
	}
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	return strconv.AppendInt(dst, seq, 10), true
}

// end ends a frame begin started. Its data is one line: JSON strings escape line breaks.
func end(dst []byte) []byte { return append(dst, "}\n\n"...) }

func appendOutputIndex(dst []byte, i int) []byte {
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// appendItemRef appends the item_id and output_index of an event about an item.
func appendItemRef(dst []byte, it *respItem, i int) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = protocol.AppendJSONString(dst, it.id)
	return appendOutputIndex(dst, i)
}

// lifecycle writes an event that carries the whole response.
func (p *respProjection) lifecycle(dst []byte, typ string) []byte {
	b, ok := p.begin(dst, typ)
	if !ok {
		return dst
	}
	b = append(b, `,"response":`...)
	return end(appendResponse(b, &p.view))
}

func (p *respProjection) itemAdded(dst []byte, it *respItem) []byte {
	b, ok := p.begin(dst, "response.output_item.added")
	if !ok {
		return dst
	}
	b = appendOutputIndex(b, it.index)
	b = append(b, `,"item":`...)
	return end(appendItem(b, it, respInProgress))
}

func (p *respProjection) contentPart(dst []byte, it *respItem, typ, text string) []byte {
	b, ok := p.begin(dst, typ)
	if !ok {
		return dst
	}
	b = appendItemRef(b, it, it.index)
	b = append(b, `,"content_index":0,"part":`...)
	return end(appendOutputText(b, text))
}

func (p *respProjection) textDelta(dst []byte, it *respItem, delta string) []byte {
	b, ok := p.begin(dst, "response.output_text.delta")
	if !ok {
		return dst
	}
	b = appendItemRef(b, it, it.index)
	b = append(b, `,"content_index":0,"delta":`...)
	b = protocol.AppendJSONString(b, delta)
	return end(append(b, `,"logprobs":[]`...))
}

func (p *respProjection) textDone(dst []byte, it *respItem, i int) []byte {
	b, ok := p.begin(dst, "response.output_text.done")
	if !ok {
		return dst
	}
	b = appendItemRef(b, it, i)
	b = append(b, `,"content_index":0,"text":`...)
	b = protocol.AppendJSONString(b, it.body.String())
	return end(append(b, `,"logprobs":[]`...))
}

func (p *respProjection) argsDelta(dst []byte, it *respItem, delta string) []byte {
	it.body.WriteString(delta)
	b, ok := p.begin(dst, "response.function_call_arguments.delta")
	if !ok {
		return dst
	}
	b = appendItemRef(b, it, it.index)
	b = append(b, `,"delta":`...)
	return end(protocol.AppendJSONString(b, delta))
}

func (p *respProjection) argsDone(dst []byte, it *respItem, i int) []byte {
	b, ok := p.begin(dst, "response.function_call_arguments.done")
	if !ok {
		return dst
	}
	b = appendItemRef(b, it, i)
	b = append(b, `,"name":`...)
	b = protocol.AppendJSONString(b, it.name)
	b = append(b, `,"arguments":`...)
	return end(protocol.AppendJSONString(b, it.body.String()))
}

// respKeepAlive is the comment frame an idle stream gets, so that proxies keep it open.
var respKeepAlive = sse.AppendComment(nil, "keep-alive")
