package bundle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/zrt"
)

// The hyperparameters a graph file records are read by every tool that
// reports them (/v1/models, dump graph, bench) and by the runtime to size
// its state, while the kernels were specialized and the weights packed for
// the values the compiler had. The checks below tie the two together, so
// that a graph file edited to say another n_embd, n_head, n_layer,
// head_dim or n_ff (with its checksums made valid) is refused instead of
// reported. They read the IR's logical buffer names (model.embed_table,
// model.attn.norm[L], …) and the kernels' specialization slots named like
// the hyperparameters (n_head, head_dim, …), which every family's
// builder shares; they hold for every shared model, and a rule only
// applies where the graph has the buffer or slot it reads.

// layerOf returns the layer index of a per-layer buffer name, the last
// "[L]" in it ("qkv(model.attn.q_weight[3])" → 3), or -1.
func layerOf(buffer string) int {
	end := strings.LastIndexByte(buffer, ']')
	start := strings.LastIndexByte(buffer[:max(end, 0)], '[')
	if end < 0 || start < 0 {
		return -1
	}
	l, err := strconv.Atoi(buffer[start+1 : end])
	if err != nil || l < 0 {
		return -1
	}
	return l
}

// baseName strips a per-layer buffer's "[L]": "model.attn.norm[3]" →
// "model.attn.norm", and a rank's slice's "/tpRofN" (passes' shard):
// "model.lm_head/tp1of2" → "model.lm_head".
func baseName(buffer string) string {
	if i := strings.Index(buffer, "/tp"); i >= 0 {
		buffer = buffer[:i]
	}
	if i := strings.IndexByte(buffer, '['); i >= 0 {
		return buffer[:i]
	}
	return buffer
}

// rankView is the hyperparameters as rank TPRank of a tensor-parallel
// set holds the model (zrtc build --tp): its share of the query heads,
// the KV heads it keeps (its share, or the one it replicates where there
// are fewer than ranks) and its part of the vocabulary, which its LM
// head computes. A rank's FFN may be any part of n_ff (split on the
// weight type's blocks), so partFF reports that n_ff is then a bound.
// Outside a set it is the hyperparameters as they are.
func (g *Graph) rankView() (h Hparams, partFF bool) {
	h = g.Hparams
	n := h.TPRanks
	if n <= 1 {
		return h, false
	}
	if h.NHead%n == 0 {
		h.NHead /= n
	}
	switch {
	case h.NHeadKV%n == 0:
		h.NHeadKV /= n
	case h.NHeadKV > 0 && n%h.NHeadKV == 0:
		h.NHeadKV = 1
	}
	// The vocabulary's balanced partition (kernels.Part, which format
	// may not import).
	h.NVocab = (h.TPRank+1)*h.NVocab/n - h.TPRank*h.NVocab/n
	return h, true
}

// checkShapes holds the hyperparameters to the weights' shapes.
func (g *Graph) checkShapes() error {
	h, partFF := g.rankView()
	whole := g.Hparams
	layers := map[int]bool{}
	var maxHeadDim, maxFF int64
	for i := range g.Weights {
		w := &g.Weights[i]
		if l := layerOf(w.Buffer); l >= 0 {
			if l >= h.NLayer {
				return fmt.Errorf("weight %q is of layer %d, n_layer = %d", w.Buffer, l, h.NLayer)
			}
			layers[l] = true
		}
		d := w.Dims
		want := func(axis int, key string, v int) error {
			if axis < len(d) && d[axis] != int64(v) {
				return fmt.Errorf("weight %q has shape %v, %s = %d", w.Buffer, d, key, v)
			}
			return nil
		}
		var err error
		switch baseName(w.Buffer) {
		case "model.embed_table":
			if err = want(0, "n_embd", h.NEmbd); err == nil {
				err = want(1, "n_vocab", whole.NVocab) // every rank's whole
			}
		case "model.lm_head":
			if err = want(0, "n_embd", h.NEmbd); err == nil {
				err = want(1, "n_vocab", h.NVocab)
			}
		case "model.out_norm", "model.attn.norm":
			err = want(0, "n_embd", h.NEmbd)
		case "model.attn.o_weight":
			// Input: the heads' outputs side by side; a layer's heads may be
			// narrower than head_dim (Gemma's sliding layers), never wider.
			// A rank that gathers the heads' outputs (where its part would
			// cut a quantization block) holds the projection whole.
			nh := int64(h.NHead)
			if partFF && len(d) > 0 && d[0] > nh*int64(h.HeadDim) {
				nh = int64(whole.NHead)
			}
			if err = want(1, "n_embd", h.NEmbd); err == nil && (d[0]%nh != 0 || d[0]/nh > int64(h.HeadDim)) {
				err = fmt.Errorf("weight %q has shape %v: its input of %d is not n_head = %d heads of at most head_dim = %d", w.Buffer, d, d[0], nh, h.HeadDim)
			}
			maxHeadDim = max(maxHeadDim, d[0]/nh)
		case "model.ffn.down_weight":
			if err = want(1, "n_embd", h.NEmbd); err == nil && d[0] > int64(h.NFF) {
				err = fmt.Errorf("weight %q has shape %v, wider than n_ff = %d", w.Buffer, d, h.NFF)
			}
			maxFF = max(maxFF, d[0])
		}
		if err != nil {
			return err
		}
	}
	for l := range h.NLayer {
		if len(layers) > 0 && !layers[l] {
			return fmt.Errorf("n_layer = %d, but layer %d has no weights", h.NLayer, l)
		}
	}
	if maxHeadDim > 0 && maxHeadDim != int64(h.HeadDim) {
		return fmt.Errorf("n_head = %d heads of head_dim = %d make %d, but the widest layer's attention output takes %d",
			h.NHead, h.HeadDim, h.NHead*h.HeadDim, maxHeadDim*int64(h.NHead))
	}
	if maxFF > 0 && maxFF != int64(h.NFF) && !partFF {
		return fmt.Errorf("n_ff = %d, but the widest layer's down projection takes %d", h.NFF, maxFF)
	}
	return nil
}

// checkSlots holds the hyperparameters to the values the kernels were
// specialized with: n_head is every attention kernel's, and head_dim and
// n_head_kv are the widest kernel's (layers may differ). (A kernel's
// n_layer counts the cache placements of its region, which is not the
// model's n_layer: that one the weights' layers tell.)
func (g *Graph) checkSlots(blobs []*zrt.Blob) error {
	h, _ := g.rankView()
	widest := map[string]uint32{}
	for _, b := range blobs {
		for _, s := range b.Slots {
			v, err := b.SlotValue(s.Name)
			if err != nil {
				return err
			}
			switch s.Name {
			case "n_head":
				if int(v) != h.NHead {
					return fmt.Errorf("kernel %s was specialized for n_head = %d, the graph file says %d", b.Name, v, h.NHead)
				}
			case "head_dim", "n_head_kv":
				widest[s.Name] = max(widest[s.Name], v)
			}
		}
	}
	for _, c := range []struct {
		key string
		v   int
	}{{"head_dim", h.HeadDim}, {"n_head_kv", h.NHeadKV}} {
		if w, ok := widest[c.key]; ok && int(w) != c.v {
			return fmt.Errorf("the kernels were specialized for %s up to %d, the graph file says %d", c.key, w, c.v)
		}
	}
	return nil
}
