package bert

import (
	"context"
	"strings"
	"testing"
)

// miniLMConfig has the shape of all-MiniLM-L6-v2 except a small vocabulary
// (the vocabulary size does not change the cost of a forward pass).
var miniLMConfig = Config{VocabSize: 32, HiddenSize: 384, NumHiddenLayers: 6, NumAttentionHeads: 12,
	IntermediateSize: 1536, HiddenAct: "gelu", MaxPositionEmbeddings: 512, TypeVocabSize: 2,
	LayerNormEps: 1e-12, PositionEmbeddingType: "absolute"}

// BenchmarkEmbedMiniLM encodes one 18-token text ([CLS] + 16 + [SEP]) with
// random weights of the all-MiniLM-L6-v2 shape.
func BenchmarkEmbedMiniLM(b *testing.B) {
	dir, _ := writeRandomModel(b, miniLMConfig, 1, nil)
	enc, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("hello world ", 8)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := enc.Embed(ctx, []string{text}); err != nil {
			b.Fatal(err)
		}
	}
}
