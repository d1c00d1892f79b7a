package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/compat"
)

// GET /v1/models and GET /v1/models/{id} (spec/compat.md, "Model names"): the names the
// caller may use now, in OpenAI's list and model shapes.

// modelRoutes are the door's Models endpoints. A deployment's name holds a slash, which
// SDKs send escaped (e2e%2Fecho) or not: {id...} takes both.
func modelRoutes(k compat.Kit) []compat.Route {
	h := &modelsHandler{kit: k}
	return []compat.Route{
		{Pattern: "GET /v1/models", Handle: h.list, WriteError: writeError},
		{Pattern: "GET /v1/models/{id...}", Handle: h.get, WriteError: writeError},
	}
}

// modelsHandler serves the Models endpoints through kit.
type modelsHandler struct{ kit compat.Kit }

// modelOwner owns the abilities in a listing; a deployment is owned by its namespace.
const modelOwner = "switchboard"

// modelObject is OpenAI's model object. Created is 0: a model name has no creation time
// of its own (an ability is served by whichever deployments serve it now).
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func newModelObject(m compat.Model) modelObject {
	owner := modelOwner
	if m.Namespace != "" {
		owner = m.Namespace
	}
	return modelObject{ID: m.ID, Object: "model", OwnedBy: owner}
}

// modelList is OpenAI's list of models.
type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func (h *modelsHandler) list(w http.ResponseWriter, r *http.Request) error {
	models, err := h.kit.Models(r.Context())
	if err != nil {
		return err
	}
	list := modelList{Object: "list", Data: make([]modelObject, 0, len(models))}
	for _, m := range models {
		list.Data = append(list.Data, newModelObject(m))
	}
	return writeModelJSON(w, r, list)
}

func (h *modelsHandler) get(w http.ResponseWriter, r *http.Request) error {
	m, ok, err := h.kit.Model(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if !ok {
		return errUnknownModel
	}
	return writeModelJSON(w, r, newModelObject(m))
}

// writeModelJSON answers v; HEAD gets the head alone.
func writeModelJSON(w http.ResponseWriter, r *http.Request, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return errEncode
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	return nil
}
