package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/openai/openai-go/v3"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server"
)

// heldModel is the program under an engine whose step loop the test can
// hold: after a set number of steps the next one waits until released, so
// a request stays in its slot, part of its reply sent, while the test
// looks at the page.
type heldModel struct {
	*runtime.Program
	mu      sync.Mutex
	left    int           // steps to run before holding one; negative: never
	held    chan struct{} // closed when a step is held
	release chan struct{} // closed to let it go
}

func (h *heldModel) Step(ctx context.Context, b runtime.Batch) error {
	h.mu.Lock()
	hold := h.left == 0
	h.left--
	h.mu.Unlock()
	if hold {
		close(h.held)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Program.Step(ctx, b)
}

// holdAfter makes the step after the next n steps wait for release.
func (h *heldModel) holdAfter(n int) {
	h.mu.Lock()
	h.left = n
	h.mu.Unlock()
}

// chromium finds a Chromium or Chrome binary, as chromedp would, or
// skips the test saying how to get one.
func chromium(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell", "headless-shell"}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skipf("no Chromium to drive the page with (looked for %s in PATH): install Debian's chromium (apt-get install chromium), as .ci/run does", strings.Join(names, ", "))
	return ""
}

// browserPage is a headless Chromium tab on a page, with the few ways
// the tests look at it.
type browserPage struct {
	t   *testing.T
	ctx context.Context
}

// openPage starts headless Chromium (skipping without one) on url and
// waits for the message box. Selectors are typed (chromedp.CSS): a plain
// string is a DOM.performSearch, which also matches text and attribute
// values, and waited forever on "#q" once the page grew.
func openPage(t *testing.T, url string) *browserPage {
	t.Helper()
	browser := chromium(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
			// As root in a container Chromium's sandbox cannot start.
			chromedp.NoSandbox)...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#q"))); err != nil {
		t.Fatalf("opening the page in %s: %v", browser, err)
	}
	return &browserPage{t: t, ctx: ctx}
}

// poll waits for a JavaScript expression to be truthy and returns it;
// its timeout is a safety net for a page that never gets there.
func (p *browserPage) poll(what, expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		p.t.Fatalf("page: waiting for %s (%s): %v", what, expr, err)
	}
	return jsString(v)
}

// eval returns a JavaScript expression's value as a string.
func (p *browserPage) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		p.t.Fatalf("page: %s: %v", expr, err)
	}
	return jsString(v)
}

// jsString is a JavaScript value as a string: a string as it is, a
// number or boolean as JavaScript would print it, null as "", anything
// else as JSON.
func jsString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (p *browserPage) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatal(err)
	}
}

// lastReply is the expression for the last assistant message's part
// (".content", ".reasoning .text", ".tools", ".meta").
func lastReply(part string) string {
	return `(() => { const m = document.querySelectorAll(".msg.assistant"); return m.length ? m[m.length - 1].querySelector("` + part + `").textContent : ""; })()`
}

// TestPage drives the built-in page (GET /) in headless Chromium on
// stories260K, a model without a chat template: the page says so and
// talks to it in text mode (POST /v1/completions), where a chat request
// would wrap the text in a ChatML prompt the model never saw. It sends a
// message and sees the continuation stream in — part of it shown while
// the engine is held mid-reply, then all of it, equal to the same
// request's answer from the API — and the live engine view show the
// request's slot busy, then free again with more steps done.
func TestPage(t *testing.T) {
	chromium(t)
	held := &heldModel{left: -1, held: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held.release) }) }
	defer release() // a failure must not leave the step loop held
	ts := serveStories(t, serveOptions{config: "", slots: 4, chunkCap: 64,
		wrap: func(p *runtime.Program) engine.Model { held.Program = p; return held }})

	// The API says that the model has no chat template.
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ID   string `json:"id"`
			Meta struct {
				HasChatTemplate *bool `json:"has_chat_template"`
			} `json:"meta"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Data) != 1 || list.Data[0].Meta.HasChatTemplate == nil || *list.Data[0].Meta.HasChatTemplate {
		t.Fatalf("GET /v1/models: %+v (%v): want stories260K with meta.has_chat_template false", list, err)
	}

	p := openPage(t, ts.URL+"/")
	// The page's engine view: the cell next to a row's label.
	cell := func(label string) string {
		return `(() => { const tds = [...document.querySelectorAll("#status td")];
			const i = tds.findIndex(td => td.textContent === "` + label + `");
			return i >= 0 ? tds[i + 1].textContent : ""; })()`
	}
	p.poll("the model list", `document.querySelector("#model").value`)
	if got := p.poll("the text-mode notice", `document.querySelector("#notice").textContent`); !strings.Contains(got, "no chat template") {
		t.Errorf("the notice for a model without a chat template is %q", got)
	}
	if got := p.poll("the engine view", cell("slots busy")); got != "0 / 4" {
		t.Errorf("slots busy before the message: %q", got)
	}
	stepsBefore, _ := strconv.Atoi(p.eval(cell("steps")))

	// Greedy, so the reply has one right answer; the engine is held after
	// the prefill and two decode steps have streamed three tokens.
	const message, maxTokens = "Once upon a time", 24
	held.holdAfter(3)
	p.do(chromedp.SetValue(chromedp.CSS("#temp"), "0"), chromedp.SetValue(chromedp.CSS("#max"), strconv.Itoa(maxTokens)),
		chromedp.SetValue(chromedp.CSS("#q"), message), chromedp.Click(chromedp.CSS("#send")))
	select {
	case <-held.held:
	case <-time.After(time.Minute): // a safety net
		t.Fatal("the message never reached the engine")
	}
	// Held mid-reply: the part streamed so far is on the page, the send
	// button still waits for the rest, the stop button is offered, and the
	// engine view shows the request in its slot.
	partial := p.poll("the streamed part of the reply", lastReply(".content"))
	if got := p.poll("the busy slot", cell("slots busy")+` === "1 / 4" && "1 / 4"`); got != "1 / 4" {
		t.Errorf("slots busy mid-reply: %q", got)
	}
	if p.eval(`document.querySelector("#send").disabled && !document.querySelector("#stop").disabled`) != "true" {
		t.Error("while the reply streams, send should be disabled and stop enabled")
	}
	if you := p.eval(`document.querySelector(".msg.user").textContent`); you != "you: "+message {
		t.Errorf("the user's message shows as %q", you)
	}

	release()
	p.poll("the end of the reply", `!document.querySelector("#send").disabled`)
	reply := p.eval(lastReply(".content"))
	p.poll("the slot to free", cell("slots busy")+` === "0 / 4"`)
	stepsAfter, _ := strconv.Atoi(p.poll("more steps", `+`+cell("steps")+` > `+strconv.Itoa(stepsBefore)+` && `+cell("steps")))
	meta := p.eval(lastReply(".meta"))
	t.Logf("page: %q streamed before the hold, reply %q (%s); steps %d → %d", partial, reply, meta, stepsBefore, stepsAfter)
	if !strings.Contains(meta, strconv.Itoa(maxTokens)+" tokens") || !strings.Contains(meta, "tok/s") {
		t.Errorf("the reply's timing line %q lacks its %d tokens or tok/s", meta, maxTokens)
	}

	// The page shows exactly what the API answers to the same request.
	c := client(ts.URL, "")
	want, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(message)},
		MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if w := want.Choices[0].Text; reply != w || partial == "" || !strings.HasPrefix(w, partial) || len(partial) >= len(w) {
		t.Errorf("the page streamed %q, then showed %q; the API answers %q", partial, reply, w)
	}
}

// evil is a name that is markup: shown as text it is harmless, parsed as
// HTML its image fails to load and the handler marks the page.
const evil = `<img src=x onerror="window.__pwned=1">`

// fakeAPI serves the built-in page beside a scripted OpenAI API, so the
// test can make the page meet what the engine does not produce on demand:
// reasoning and tool-call deltas, a stream that never ends, names that are
// markup. Every generation request's body goes to bodies.
type fakeAPI struct {
	bodies    chan map[string]any
	cancelled chan struct{} // closed when the hanging stream's client goes away
}

func (f *fakeAPI) handler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(server.Page)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"status": "ok", "models": [{"model": %q, "steps": 3, "running": 0, "waiting": 0, "slots": 4,
			"pages_free": 10, "pages_total": 16, "prefix_pages": 2, "tenants": [{"tenant": %q, "prompt": 5, "generated": 7}]}]}`, evil, evil)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error": {"message": "invalid or missing API key", "type": "authentication_error"}}`)
			return
		}
		fmt.Fprintf(w, `{"object": "list", "data": [{"id": %q, "object": "model", "meta": {"has_chat_template": true}},
			{"id": "plain", "object": "model", "meta": {"has_chat_template": false}}]}`, evil)
	})
	sse := func(w http.ResponseWriter, chunks ...string) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}
	record := func(r *http.Request) map[string]any {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("%s: body: %v", r.URL.Path, err)
		}
		f.bodies <- body
		return body
	}
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body := record(r)
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		switch last["content"] {
		case "hang":
			sse(w, `{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]}`)
			select {
			case <-r.Context().Done():
				close(f.cancelled)
			case <-time.After(time.Minute): // a safety net
			}
		default:
			// OpenAI's shapes: reasoning, then a tool call whose name comes
			// first and whose arguments come in fragments, then content,
			// then the usage chunk.
			sse(w,
				`{"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "<b>Let</b> me "}}]}`,
				`{"choices": [{"index": 0, "delta": {"reasoning_content": "think."}}]}`,
				`{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}`,
				`{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}}]}`,
				`{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"<img src=x onerror=window.__pwned=2>\"}"}}]}}]}`,
				`{"choices": [{"index": 0, "delta": {"content": "It is "}}]}`,
				`{"choices": [{"index": 0, "delta": {"content": "sunny."}}]}`,
				`{"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}`,
				`{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}}`,
				`[DONE]`)
		}
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		sse(w, `{"choices": [{"index": 0, "text": " and then"}]}`, `{"choices": [{"index": 0, "text": " more"}]}`, `[DONE]`)
	})
	return mux
}

// plainJSON is v as JSON without HTML escaping, to compare with literals.
func plainJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// TestPageControls drives the page against fakeAPI: names that are markup
// stay text; the model list appears once an API key is typed; the system
// prompt, JSON schema and stream_options reach the request; reasoning and
// tool-call deltas are shown as they stream; stop ends a stream (the
// server sees its client go) and keeps what was shown; new chat forgets
// the conversation; a model without a chat template is sent completions.
func TestPageControls(t *testing.T) {
	chromium(t)
	f := &fakeAPI{bodies: make(chan map[string]any, 16), cancelled: make(chan struct{})}
	hs := httptest.NewServer(f.handler(t))
	t.Cleanup(hs.Close)
	p := openPage(t, hs.URL+"/")
	next := func() map[string]any {
		t.Helper()
		select {
		case b := <-f.bodies:
			return b
		case <-time.After(time.Minute): // a safety net
			t.Fatal("the page sent no request")
			return nil
		}
	}
	noMarkup := func(when string) {
		t.Helper()
		if got := p.eval(`document.querySelectorAll("img, b").length + " " + String(window.__pwned)`); got != "0 undefined" {
			t.Errorf("%s: data was rendered as markup (elements, __pwned): %s", when, got)
		}
	}

	// Without a key there is no model list, and the page says why.
	p.poll("the 401 notice", `document.querySelector("#notice").textContent.includes("API key")`)
	if n := p.eval(`document.querySelector("#model").options.length`); n != "0" {
		t.Errorf("%s models listed before the key", n)
	}
	// The engine view shows the model and tenant names as text.
	p.poll("the engine view", `document.querySelector("#status h2") && document.querySelector("#status h2").textContent === `+strconv.Quote(evil))
	p.poll("the tenant row", `[...document.querySelectorAll("#status .tenants td")].some(td => td.textContent === `+strconv.Quote(evil)+`)`)
	noMarkup("engine view")

	// Typing the key fills the list.
	p.do(chromedp.SendKeys(chromedp.CSS("#key"), "sk-test"))
	p.poll("the model list after the key", `document.querySelector("#model").options.length === 2`)
	if got := p.eval(`document.querySelector("#model").options[0].textContent`); got != evil {
		t.Errorf("the first model shows as %q", got)
	}
	if got := p.eval(`document.querySelector("#notice").textContent`); got != "" {
		t.Errorf("a notice stays after the key: %q", got)
	}
	noMarkup("model list")

	// A chat with a system prompt and a JSON schema.
	const schema = `{"type": "object", "properties": {"city": {"type": "string"}}}`
	p.do(chromedp.SetValue(chromedp.CSS("#system"), "Be brief"), chromedp.SetValue(chromedp.CSS("#schema"), schema),
		chromedp.SetValue(chromedp.CSS("#q"), "weather?"), chromedp.Click(chromedp.CSS("#send")))
	body := next()
	msgs, _ := json.Marshal(body["messages"])
	if string(msgs) != `[{"content":"Be brief","role":"system"},{"content":"weather?","role":"user"}]` {
		t.Errorf("messages sent: %s", msgs)
	}
	rf, _ := json.Marshal(body["response_format"])
	if string(rf) != `{"json_schema":{"name":"response","schema":{"properties":{"city":{"type":"string"}},"type":"object"},"strict":true},"type":"json_schema"}` {
		t.Errorf("response_format sent: %s", rf)
	}
	if so, _ := json.Marshal(body["stream_options"]); body["stream"] != true || string(so) != `{"include_usage":true}` || body["model"] != evil {
		t.Errorf("stream %v, stream_options %s, model %v", body["stream"], so, body["model"])
	}
	p.poll("the end of the reply", `!document.querySelector("#send").disabled`)
	for part, want := range map[string]string{
		".content":         "It is sunny.",
		".reasoning .text": "<b>Let</b> me think.",
		".tools":           `tool call get_weather({"city": "<img src=x onerror=window.__pwned=2>"})  id call_1`,
	} {
		if got := p.eval(lastReply(part)); got != want {
			t.Errorf("reply %s shows %q, want %q", part, got, want)
		}
	}
	if p.eval(`(() => { const r = document.querySelectorAll(".msg.assistant .reasoning"); return String(r[r.length - 1].hidden); })()`) != "false" {
		t.Error("the reasoning block is hidden")
	}
	if meta := p.eval(lastReply(".meta")); !strings.Contains(meta, "7 tokens") || !strings.Contains(meta, "tok/s") {
		t.Errorf("timing line %q: want the usage chunk's 7 tokens and tok/s", meta)
	}
	noMarkup("reply")

	// Stop: the stream is cut, the server sees its client leave, what was
	// shown stays, and the conversation carries the tool call.
	p.do(chromedp.SetValue(chromedp.CSS("#q"), "hang"), chromedp.Click(chromedp.CSS("#send")))
	body = next()
	if ms, _ := body["messages"].([]any); len(ms) != 4 {
		t.Errorf("the second turn sent %d messages, want system, user, assistant with its tool call, user: %v", len(ms), ms)
	} else if a := plainJSON(ms[2]); a != `{"content":"It is sunny.","role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\": \"<img src=x onerror=window.__pwned=2>\"}","name":"get_weather"},"id":"call_1","type":"function"}]}` {
		t.Errorf("the assistant turn sent back: %s", a)
	}
	p.poll("the partial reply", lastReply(".content")+` === "partial"`)
	if p.eval(`!document.querySelector("#stop").disabled`) != "true" {
		t.Fatal("the stop button is disabled while a reply streams")
	}
	p.do(chromedp.Click(chromedp.CSS("#stop")))
	select {
	case <-f.cancelled:
	case <-time.After(time.Minute): // a safety net
		t.Fatal("stop did not end the request: the server never saw its client go")
	}
	p.poll("send enabled after stop", `!document.querySelector("#send").disabled && document.querySelector("#stop").disabled`)
	if got := p.eval(lastReply(".content")); got != "partial" {
		t.Errorf("after stop the reply shows %q", got)
	}
	if meta := p.eval(lastReply(".meta")); !strings.Contains(meta, "stopped") {
		t.Errorf("after stop the timing line is %q", meta)
	}

	// New chat: an empty log, and the next request has no history.
	p.do(chromedp.Click(chromedp.CSS("#new")))
	p.poll("an empty log", `document.querySelector("#log").children.length === 0`)
	p.eval(`document.querySelector("#schema").value = ""`)
	p.do(chromedp.SetValue(chromedp.CSS("#q"), "again"), chromedp.Click(chromedp.CSS("#send")))
	body = next()
	if ms, _ := json.Marshal(body["messages"]); string(ms) != `[{"content":"Be brief","role":"system"},{"content":"again","role":"user"}]` {
		t.Errorf("after new chat the page sent %s", ms)
	}
	if _, ok := body["response_format"]; ok {
		t.Error("an empty schema box still sent response_format")
	}
	p.poll("the end of the reply", `!document.querySelector("#send").disabled`)

	// A model without a chat template: text mode, through completions;
	// the next message continues the transcript.
	p.eval(`(() => { const s = document.querySelector("#model"); s.value = "plain"; s.dispatchEvent(new Event("change")); return ""; })()`)
	if got := p.poll("the text-mode notice", `document.querySelector("#notice").textContent`); !strings.Contains(got, "plain has no chat template") {
		t.Errorf("notice for the plain model: %q", got)
	}
	p.do(chromedp.Click(chromedp.CSS("#new")), chromedp.SetValue(chromedp.CSS("#q"), "Once"), chromedp.Click(chromedp.CSS("#send")))
	body = next()
	if body["prompt"] != "Be brief\nOnce" || body["messages"] != nil || body["model"] != "plain" {
		t.Errorf("text mode sent prompt %q, messages %v, model %v", body["prompt"], body["messages"], body["model"])
	}
	p.poll("the continuation", lastReply(".content")+` === " and then more"`)
	p.poll("the end of the reply", `!document.querySelector("#send").disabled`)
	p.do(chromedp.SetValue(chromedp.CSS("#q"), "Then"), chromedp.Click(chromedp.CSS("#send")))
	if body = next(); body["prompt"] != "Be brief\nOnce and then more Then" {
		t.Errorf("the second text-mode turn sent prompt %q", body["prompt"])
	}
	noMarkup("the end")
}
