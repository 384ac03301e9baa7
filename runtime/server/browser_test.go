package server_test

import (
	"context"
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

// TestPage drives the built-in page (GET /) in headless Chromium: it sends
// a chat message from the playground and sees the reply stream in — part
// of it shown while the engine is held mid-reply, then all of it, equal to
// the same request's answer from the API — and the live engine view show
// the request's slot busy, then free again with more steps done.
func TestPage(t *testing.T) {
	browser := chromium(t)
	held := &heldModel{left: -1, held: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held.release) }) }
	defer release() // a failure must not leave the step loop held
	ts := serveStories(t, serveOptions{config: "", slots: 4, chunkCap: 64,
		wrap: func(p *runtime.Program) engine.Model { held.Program = p; return held }})

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
			// As root in a container Chromium's sandbox cannot start.
			chromedp.NoSandbox)...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()

	// The page's engine view: the cell next to a row's label.
	cell := func(label string) string {
		return `(() => { const tds = [...document.querySelectorAll("#status td")];
			const i = tds.findIndex(td => td.textContent === "` + label + `");
			return i >= 0 ? tds[i + 1].textContent : ""; })()`
	}
	// poll waits for a JavaScript expression to be truthy and returns it;
	// its timeout is a safety net for a page that never gets there.
	poll := func(what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(20*time.Millisecond)))
		if err != nil {
			t.Fatalf("page: waiting for %s: %v", what, err)
		}
		switch v := v.(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("page: %s: %v", expr, err)
		}
		return v
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible("#q")); err != nil {
		t.Fatalf("opening the page in %s: %v", browser, err)
	}
	poll("the model list", `document.querySelector("#model").value`)
	if got := poll("the engine view", cell("slots busy")); got != "0 / 4" {
		t.Errorf("slots busy before the message: %q", got)
	}
	stepsBefore, _ := strconv.Atoi(eval(cell("steps")))

	// Greedy, so the reply has one right answer; the engine is held after
	// the prefill and two decode steps have streamed three tokens.
	const message, maxTokens = "Hello", 24
	held.holdAfter(3)
	if err := chromedp.Do(ctx,
		chromedp.SetValue("#temp", "0"),
		chromedp.SetValue("#max", strconv.Itoa(maxTokens)),
		chromedp.SetValue("#q", message),
		chromedp.Click("#send"),
	); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.held:
	case <-time.After(time.Minute): // a safety net
		t.Fatal("the message never reached the engine")
	}
	// Held mid-reply: the part streamed so far is on the page, the send
	// button still waits for the rest, and the engine view shows the
	// request in its slot.
	partial := poll("the streamed part of the reply", `(() => { const m = document.querySelectorAll(".msg.assistant");
		return m.length ? m[m.length - 1].textContent : ""; })()`)
	if got := poll("the busy slot", cell("slots busy")+` === "1 / 4" && "1 / 4"`); got != "1 / 4" {
		t.Errorf("slots busy mid-reply: %q", got)
	}
	if eval(`String(document.querySelector("#send").disabled)`) != "true" {
		t.Error("the send button is enabled while the reply streams")
	}
	if you := eval(`document.querySelector(".msg.user").textContent`); you != "you: "+message {
		t.Errorf("the user's message shows as %q", you)
	}

	release()
	poll("the end of the reply", `!document.querySelector("#send").disabled`)
	reply := eval(`(() => { const m = document.querySelectorAll(".msg.assistant"); return m[m.length - 1].textContent; })()`)
	poll("the slot to free", cell("slots busy")+` === "0 / 4"`)
	stepsAfter, _ := strconv.Atoi(poll("more steps", `+`+cell("steps")+` > `+strconv.Itoa(stepsBefore)+` && `+cell("steps")))
	t.Logf("page: %q streamed before the hold, reply %q; steps %d → %d", partial, reply, stepsBefore, stepsAfter)

	// The page shows exactly what the API answers to the same request.
	c := client(ts.URL, "")
	want, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "stories260K",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(message)}, MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if w := want.Choices[0].Message.Content; reply != w || partial == "" || !strings.HasPrefix(w, partial) || len(partial) >= len(w) {
		t.Errorf("the page streamed %q, then showed %q; the API answers %q", partial, reply, w)
	}
}
