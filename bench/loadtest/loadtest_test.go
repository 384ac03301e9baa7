package loadtest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestLoadtestResponseFormats: with several --response-format objects,
// request j carries object j mod their number, and the tokens the server
// reports are what the run counts.
func TestLoadtestResponseFormats(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			json.NewEncoder(w).Encode(map[string]any{"tokens": []int{5, 6, 7}})
		case "/v1/completions":
			var body struct {
				ResponseFormat map[string]any `json:"response_format"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			seen[body.ResponseFormat["type"].(string)]++
			mu.Unlock()
			json.NewEncoder(w).Encode(map[string]any{"usage": map[string]any{"completion_tokens": 3}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	lt := &loadtest{url: srv.URL, maxTokens: 8, formats: []map[string]any{{"type": "json_object"}, {"type": "text"}}}
	ids, err := lt.vocabIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res := lt.run(context.Background(), ids, 3, 10, 4, 1)
	if seen["json_object"] != 5 || seen["text"] != 5 {
		t.Errorf("formats sent %v, want 5 of each", seen)
	}
	tokens := 0
	for _, o := range res.outcomes {
		tokens += o.tokens
	}
	if tokens != 30 {
		t.Errorf("counted %d tokens, want 30", tokens)
	}
}
