package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// Scripted behaviours that let an end-to-end test see what reached the provider: the
// media parts of a request (model names containing "describe") and Anthropic's prompt
// cache breakpoints.

// mediaLine describes one media part: its kind, and its media type and decoded size
// for inline data or "url" for a reference, with the file name when there is one.
func mediaLine(kind, mediaType, data, url, name string) string {
	var line string
	if url != "" {
		line = kind + " url"
	} else {
		n, err := base64.StdEncoding.DecodeString(data)
		size := len(n)
		if err != nil {
			size = -1
		}
		line = fmt.Sprintf("%s %s %d bytes", kind, mediaType, size)
	}
	if name != "" {
		line += " " + name
	}
	return line
}

// dataURL splits a data: URL into its media type and base64 payload.
func dataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, payload, found := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	return mediaType, payload, found && isBase64
}

// openAIMedia describes the media parts of an OpenAI message's content, in order,
// joined by "; "; empty when it has none.
func openAIMedia(content json.RawMessage) string {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
		File struct {
			Filename string `json:"filename"`
			FileData string `json:"file_data"`
		} `json:"file"`
		InputAudio struct {
			Format string `json:"format"`
			Data   string `json:"data"`
		} `json:"input_audio"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return ""
	}
	var lines []string
	for _, p := range parts {
		switch p.Type {
		case "image_url":
			if mt, data, ok := dataURL(p.ImageURL.URL); ok {
				lines = append(lines, mediaLine("image", mt, data, "", ""))
			} else {
				lines = append(lines, mediaLine("image", "", "", p.ImageURL.URL, ""))
			}
		case "file":
			mt, data, _ := dataURL(p.File.FileData)
			lines = append(lines, mediaLine("file", mt, data, "", p.File.Filename))
		case "input_audio":
			lines = append(lines, mediaLine("audio", "audio/"+p.InputAudio.Format, p.InputAudio.Data, "", ""))
		}
	}
	return strings.Join(lines, "; ")
}

// anthropicMediaBlock is the part of an image or document block the demo reads.
type anthropicMediaBlock struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// anthropicMedia describes the image and document blocks of an Anthropic message's
// content, in order, joined by "; "; empty when it has none.
func anthropicMedia(content json.RawMessage) string {
	var blocks []anthropicMediaBlock
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var lines []string
	for _, b := range blocks {
		if b.Type != "image" && b.Type != "document" {
			continue
		}
		url := b.Source.URL
		if b.Source.Type == "url" && url == "" {
			url = "?"
		}
		lines = append(lines, mediaLine(b.Type, b.Source.MediaType, b.Source.Data, url, b.Title))
	}
	return strings.Join(lines, "; ")
}

// anthropicCacheMarks counts the blocks of req that carry cache_control: system
// blocks, message content blocks (tool_result content included) and tools.
func anthropicCacheMarks(req anthropicRequest) int {
	type marked struct {
		CacheControl json.RawMessage `json:"cache_control"`
		Content      json.RawMessage `json:"content"`
	}
	count := func(raw json.RawMessage) int {
		var blocks []marked
		if json.Unmarshal(raw, &blocks) != nil {
			return 0
		}
		n := 0
		for _, b := range blocks {
			if len(b.CacheControl) > 0 && string(b.CacheControl) != "null" {
				n++
			}
			var nested []marked
			if json.Unmarshal(b.Content, &nested) == nil {
				for _, c := range nested {
					if len(c.CacheControl) > 0 && string(c.CacheControl) != "null" {
						n++
					}
				}
			}
		}
		return n
	}
	n := count(req.System)
	for _, m := range req.Messages {
		n += count(m.Content)
	}
	for _, t := range req.Tools {
		if len(t.CacheControl) > 0 && string(t.CacheControl) != "null" {
			n++
		}
	}
	return n
}
