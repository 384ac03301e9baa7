package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseIDs reads token ids separated by spaces, commas or newlines, and
// checks each is in the vocabulary.
func (t *Tokenizer) ParseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 || int(n) >= t.NVocab() {
			return nil, fmt.Errorf("%q is not a token id of this %d-token vocabulary", f, t.NVocab())
		}
		ids = append(ids, int32(n))
	}
	return ids, nil
}

// FormatIDs writes ids separated by spaces, as llama.cpp's tools print them.
func FormatIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, " ")
}
