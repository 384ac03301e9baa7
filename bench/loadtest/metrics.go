package loadtest

import (
	"bufio"
	"context"
	"net/http"
)

// scrapeMetrics passes each line of the server's GET /metrics (Prometheus'
// text format) to each; it reports false when the server gave none (not
// reachable, or no such endpoint, as llama-server without --metrics).
func (lt *loadtest) scrapeMetrics(ctx context.Context, each func(line string)) bool {
	req, err := http.NewRequestWithContext(ctx, "GET", lt.url+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := loadClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
	return true
}
