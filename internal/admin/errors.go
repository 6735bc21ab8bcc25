package admin

import (
	"encoding/json"
	"net/http"
)

// apiError is the body of every answer that is not a success: what was wrong, in words
// an operator can act on, and a stable code a script can test.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// fail answers status with a JSON error; nothing was changed.
func fail(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{apiError{Code: code, Message: message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
