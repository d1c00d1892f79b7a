package main

import (
	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/compat/openai"
)

// frontDoors are the compatible front doors the runtime serves beside its native API
// (spec/compat.md).
func frontDoors() []compat.Door {
	return []compat.Door{openai.Door{}}
}
