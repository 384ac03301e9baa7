package chat

import (
	"encoding/json"
	"fmt"
	"os"
)

// ReadMessages loads a conversation from a file: a JSON array of
// {role, content} (zrt-run generate --messages).
func ReadMessages(path string) ([]Message, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw []struct{ Role, Content string }
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	msgs := make([]Message, len(raw))
	for i, m := range raw {
		if m.Role == "" {
			return nil, fmt.Errorf("%s: message %d has no role", path, i)
		}
		msgs[i] = Message{Role: m.Role, Content: m.Content}
	}
	return msgs, nil
}
