package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime/engine"
)

// TestAdmitErrors holds the one table from the engine's refusals to HTTP:
// every kind has its row (status, type, Retry-After), and the message
// names what to change.
func TestAdmitErrors(t *testing.T) {
	for _, c := range []struct {
		err    *engine.AdmitError
		status int
		typ    string
		retry  int
		param  string
		says   string
	}{
		{&engine.AdmitError{Reason: engine.ErrEmpty}, 400, "invalid_request_error", 0, "prompt", "empty"},
		{&engine.AdmitError{Reason: engine.ErrBadToken, Token: 9999, Limit: 512}, 400, "invalid_request_error", 0, "prompt", "token id 9999 outside the vocabulary of 512"},
		{&engine.AdmitError{Reason: engine.ErrTooLong, Prompt: 10, MaxTokens: 300, Limit: 256, Context: 256}, 400, "invalid_request_error", 0, "max_tokens", "at most 246"},
		{&engine.AdmitError{Reason: engine.ErrTooLong, Tenant: "b", Prompt: 10, MaxTokens: 60, Limit: 64, Context: 256}, 400, "invalid_request_error", 0, "prompt", "this tenant's 64-token context"},
		{&engine.AdmitError{Reason: engine.ErrTooLong, Tenant: "b", Prompt: 10, MaxTokens: 60, Pages: 5, Limit: 4, Context: 256}, 400, "invalid_request_error", 0, "max_tokens", "max_kv_pages"},
		{&engine.AdmitError{Reason: engine.ErrExceedsRate, Tenant: "b", Prompt: 10, MaxTokens: 60, Choices: 2, Limit: 100}, 400, "invalid_request_error", 0, "max_tokens", "tokens_per_minute (100)"},
		{&engine.AdmitError{Reason: engine.ErrRateLimited, Tenant: "b", RetryAfter: 1500 * time.Millisecond}, 429, "rate_limit_error", 2, "", "retry after 1.5 s"},
		{&engine.AdmitError{Reason: engine.ErrQueued, Tenant: "b", Limit: 3}, 429, "rate_limit_error", 1, "", "tenant b already has 3 requests waiting for a slot, its max_queued"},
		{&engine.AdmitError{Reason: engine.ErrQueueFull, Limit: 1024}, 503, "server_error", 1, "", "the queue is full"},
		{&engine.AdmitError{Reason: engine.ErrDraining}, 503, "server_error", 5, "", "the server is draining"},
	} {
		// Wrapped, as a caller between may return it.
		got := admitError(fmt.Errorf("model m: %w", c.err))
		param := ""
		if got.Param != nil {
			param = *got.Param
		}
		if got.status != c.status || got.Type != c.typ || got.retryAfter != c.retry || param != c.param || !strings.Contains(got.Message, c.says) {
			t.Errorf("%v: %d %s retry %d param %q %q; want %d %s retry %d param %q saying %q",
				c.err, got.status, got.Type, got.retryAfter, param, got.Message, c.status, c.typ, c.retry, c.param, c.says)
		}
	}
	if got := admitError(errors.New("engine: no choices to generate")); got.status != http.StatusBadRequest {
		t.Errorf("an error that is no refusal of the engine's: %d", got.status)
	}
}
